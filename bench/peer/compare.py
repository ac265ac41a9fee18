#!/usr/bin/env python3
"""ember vs llama.cpp on the same GGUF files, same threads, same text (issue 4, item 3).

    bench/peer/compare.sh [options] MODEL...     (MODEL: a get-models.sh name or a .gguf path)

For each model: llama-bench (pp512, tg128) and llama-perplexity over the evaluation text at a
fixed context, then the same for ember when its side is available (see ember_side below), and
the ratios ember/llama.cpp. Prints a table and writes JSON (--out, default
bench/peer/results/latest.json).

Options: --threads N (default: all cores), --ctx N (512), --text FILE
(data/eval/kjv-1samuel-100k.txt), --quick (data/eval/kjv-ruth-8k.txt at ctx 128, 1 repetition),
--reps N (llama-bench repetitions, 3), --no-ppl, --out FILE, --omp-passive (see --help).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENV = dict(os.environ)


def log(msg: str) -> None:
    print(f"[compare] {msg}", file=sys.stderr, flush=True)


def resolve_model(m: str) -> tuple[str, Path]:
    p = Path(m)
    if p.suffix == ".gguf" or p.exists():
        return p.stem, p.resolve()
    r = subprocess.run([str(REPO / "scripts" / "get-models.sh"), "--only", m],
                       stdout=subprocess.PIPE, text=True, check=True)
    name, path = r.stdout.strip().splitlines()[-1].split("\t")
    return name, Path(path)


def llama_bins() -> Path:
    r = subprocess.run([str(REPO / "bench" / "peer" / "build-llamacpp.sh")],
                       stdout=subprocess.PIPE, text=True, check=True)
    return Path(r.stdout.strip().splitlines()[-1])


def cpu_info() -> dict:
    name, flags = "?", []
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            name = line.split(":", 1)[1].strip()
        if line.startswith("flags"):
            flags = line.split(":", 1)[1].split()
            break
    simd = [f for f in flags if f in ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw",
                                       "avx512vl", "avx512_vnni", "avx_vnni", "avx512_bf16",
                                       "amx_tile")]
    return {"model": name, "simd_flags": simd, "nproc": os.cpu_count()}


def llama_bench(bins: Path, model: Path, threads: int, reps: int) -> dict:
    cmd = [str(bins / "llama-bench"), "-m", str(model), "-p", "512", "-n", "128",
           "-t", str(threads), "-r", str(reps), "-o", "json"]
    log(" ".join(cmd))
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    if r.returncode != 0:
        raise SystemExit(r.stderr[-3000:])
    rows = json.loads(r.stdout)
    out = {"command": " ".join(cmd)}
    for row in rows:
        key = f"pp{row['n_prompt']}" if row["n_prompt"] else f"tg{row['n_gen']}"
        out[key] = {"tok_s": row["avg_ts"], "stddev": row["stddev_ts"],
                    "best_tok_s": max(row.get("samples_ts") or [row["avg_ts"]])}
        out.setdefault("model_size", row.get("model_size"))
        out.setdefault("model_n_params", row.get("model_n_params"))
        out.setdefault("model_type", row.get("model_type"))
        out.setdefault("backend", row.get("backends") or row.get("backend"))
        out.setdefault("cpu_info", row.get("cpu_info"))
        out.setdefault("build", f"{row.get('build_commit')} ({row.get('build_number')})")
    return out


def llama_perplexity(bins: Path, model: Path, text: Path, ctx: int, threads: int) -> dict:
    cmd = [str(bins / "llama-perplexity"), "-m", str(model), "-f", str(text), "-c", str(ctx),
           "-b", str(min(ctx, 2048)), "-t", str(threads)]
    log(" ".join(cmd))
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV)
    if r.returncode != 0:
        raise SystemExit(r.stdout[-3000:])
    final = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", r.stdout)
    chunks = re.search(r"calculating perplexity over (\d+) chunks", r.stdout)
    sec = re.search(r"([0-9.]+) seconds per pass", r.stdout)
    return {"command": " ".join(cmd), "ppl": float(final.group(1)),
            "ppl_stderr": float(final.group(2)), "n_chunks": int(chunks.group(1)),
            "seconds_per_pass": float(sec.group(1)) if sec else None}


# ---------------------------------------------------------------------------------------------
# EMBER HOOK: ember's side of the comparison. Fill this in once `ember bench` and
# `ember perplexity` exist; return None to skip. Expected shape (same keys as llama.cpp's side):
#   {"command": "...", "pp512": {"tok_s": float}, "tg128": {"tok_s": float},
#    "perplexity": {"ppl": float, "n_chunks": int}, "peak_rss_mb": float}
# Use the same model file, thread count, text and ctx as passed in.
# ---------------------------------------------------------------------------------------------
def ember_side(model: Path, threads: int, text: Path, ctx: int, do_ppl: bool) -> dict | None:
    ember = os.environ.get("EMBER_BIN") or shutil.which("ember") or str(REPO / "build" / "bin" / "ember")
    if not Path(ember).is_file():
        return None
    out: dict = {}
    with_json = REPO / "build" / "ember-bench-speed.json"
    for key, args in (("pp512", ["-p", "512", "-n", "0"]), ("tg128", ["-p", "0", "-n", "128"])):
        subprocess.run([ember, "bench", "speed", "-m", str(model), "-t", str(threads), "-r", "3",
                        "--json", str(with_json), *args], check=True, stdout=subprocess.DEVNULL)
        result = json.loads(with_json.read_text())
        out[key] = {"tok_s": result["pp" if key == "pp512" else "tg"]["tokens_per_s"]}
    if do_ppl:
        r = subprocess.run([ember, "perplexity", "-m", str(model), "-f", str(text), "--ctx", str(ctx),
                            "-t", str(threads)], check=True, capture_output=True, text=True)
        out["perplexity"] = {"ppl": float(re.search(r"perplexity: ([0-9.]+)", r.stdout).group(1))}
    return out


def ratios(ours: dict | None, peer: dict) -> dict | None:
    if not ours:
        return None
    out = {}
    for k in ("pp512", "tg128"):
        if k in ours and k in peer["bench"]:
            out[k] = ours[k]["tok_s"] / peer["bench"][k]["tok_s"]
    if "perplexity" in ours and peer.get("perplexity"):
        out["ppl_rel_diff"] = ours["perplexity"]["ppl"] / peer["perplexity"]["ppl"] - 1.0
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--ctx", type=int, default=None)
    ap.add_argument("--text", type=Path, default=None)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-ppl", action="store_true")
    ap.add_argument("--omp-passive", action="store_true",
                    help="OMP_WAIT_POLICY=PASSIVE for llama.cpp: on a machine shared with other "
                         "work, spinning OpenMP threads collapse (tg 10x slower); off by default")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "peer" / "results" / "latest.json")
    a = ap.parse_args()
    if a.omp_passive:
        ENV["OMP_WAIT_POLICY"] = "PASSIVE"
    text = a.text or REPO / "data" / "eval" / ("kjv-ruth-8k.txt" if a.quick else "kjv-1samuel-100k.txt")
    ctx = a.ctx or (128 if a.quick else 512)
    reps = a.reps or (1 if a.quick else 3)
    bins = llama_bins()
    built = (bins.parents[1] / ".built")
    built_lines = built.read_text().splitlines() if built.exists() else []
    # (builds from before the flags line was written were all GGML_NATIVE=ON)
    native = next((line for line in built_lines if line.startswith("GGML_NATIVE=")), "GGML_NATIVE=ON")
    native_note = " (-march=native)" if native.endswith("ON") else " (portable: AVX2/FMA/F16C, no AVX-512)"
    result = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
              "cpu": cpu_info(), "threads": a.threads,
              "llama_cpp": built.read_text().splitlines()[0] if built.exists() else "?",
              "llama_cpp_flags": f"Release, {native}{native_note}, OpenMP, CPU backend only",
              "ember_cpu_isa": os.environ.get("EMBER_CPU_ISA", "auto (the widest this CPU has)"),
              "text": str(text.relative_to(REPO)) if text.is_relative_to(REPO) else str(text),
              "omp_wait_policy": ENV.get("OMP_WAIT_POLICY", "default (active spin)"),
              "ctx": ctx, "loadavg_1m_before": round(os.getloadavg()[0], 2),
              "note": "other processes share the cores: compare loadavg with the core count",
              "models": []}
    for m in a.models:
        name, path = resolve_model(m)
        peer = {"bench": llama_bench(bins, path, a.threads, reps)}
        if not a.no_ppl:
            peer["perplexity"] = llama_perplexity(bins, path, text, ctx, a.threads)
        ours = ember_side(path, a.threads, text, ctx, not a.no_ppl)
        entry = {"name": name, "loadavg_1m_after": round(os.getloadavg()[0], 2), "file": path.name, "size_bytes": path.stat().st_size,
                 "llama_cpp": peer, "ember": ours, "ember_over_llama_cpp": ratios(ours, peer)}
        result["models"].append(entry)
        pp, tg = peer["bench"].get("pp512", {}), peer["bench"].get("tg128", {})
        ppl = peer.get("perplexity", {}).get("ppl")
        print(f"{name:40s} llama.cpp pp512 {pp.get('tok_s', 0):8.1f} tok/s  "
              f"tg128 {tg.get('tok_s', 0):7.1f} tok/s  ppl {ppl if ppl else '-'}"
              + (f"   ember/llama.cpp {entry['ember_over_llama_cpp']}" if ours else ""), flush=True)
        a.out.parent.mkdir(parents=True, exist_ok=True)  # after each model: partial results survive
        a.out.write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
