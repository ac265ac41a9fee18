#!/usr/bin/env python3
"""Records llama.cpp's reference outputs for ember's real-model tests (issue 4, item 6).

For each model (a name from scripts/get-models.sh) this writes tests/fixtures/real/<name>.json:
  - greedy continuations (temperature 0, 32 tokens) of fixed prompts: the exact prompt token ids
    llama.cpp used (BOS included when the model adds one), the generated token ids and text, and
    at each generated position the top-k log-probabilities of llama.cpp's raw (pre-sampling)
    distribution: for KL / logit checks without storing full logits;
  - the tokenization of the short evaluation text and llama-perplexity's result on it at a fixed
    context (per-chunk values and the final estimate);
  - the commands, the llama.cpp version, the model's sha256 and the host CPU.

The peer is llama.cpp built from the llama-cpp-python sdist by bench/peer/build-llamacpp.sh:
generation goes through llama-server (loopback only) because its /completion endpoint returns
token ids and pre-sampling log-probabilities; perplexity through llama-perplexity.

    python3 tools/make_llamacpp_refs.py                       # gemma3-270m-q4_k_m
    python3 tools/make_llamacpp_refs.py --model smollm2-135m-instruct-q4_1 --model ...
    python3 tools/make_llamacpp_refs.py --kl-base             # also save llama.cpp's full
        # log-probabilities of the first 4 chunks of the text (llama-perplexity
        # --kl-divergence-base, decoded) as .npy [n_scored, n_vocab] into the model's cache folder

Stdlib only (numpy for --kl-base). Needs scripts/get-models.sh and bench/peer/build-llamacpp.sh to have run (they are
called when needed).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT_DIR = REPO / "tests" / "fixtures" / "real"
TEXT = REPO / "data" / "eval" / "kjv-ruth-8k.txt"
CTX = 128
N_PREDICT = 32
TOP_K = 20
THREADS = 2
PROMPTS = [
    "The capital of France is",
    "Once upon a time, there was a little",
    "def fibonacci(n):\n",
    "The three primary colors are",
]


def log(msg: str) -> None:
    print(f"[make_llamacpp_refs] {msg}", file=sys.stderr, flush=True)


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, text=True, **kw)


def model_path(name: str) -> Path:
    r = sh([str(REPO / "scripts" / "get-models.sh"), "--only", name], stdout=subprocess.PIPE,
           check=True)
    for line in r.stdout.splitlines():
        n, p = line.split("\t")
        if n == name:
            return Path(p)
    raise SystemExit(f"model {name} not installed")


def llama_bins() -> Path:
    r = sh([str(REPO / "bench" / "peer" / "build-llamacpp.sh")], stdout=subprocess.PIPE, check=True)
    return Path(r.stdout.strip().splitlines()[-1])


def llama_version(bins: Path) -> str:
    root = bins.parents[1]
    built = root / ".built"
    first = built.read_text().splitlines()[0] if built.exists() else "llama-cpp-python ?"
    cm = root / "src" / "ggml" / "CMakeLists.txt"
    ggml = "?"
    if cm.exists():
        v = dict(re.findall(r"set\(GGML_VERSION_(MAJOR|MINOR|PATCH) (\d+)\)", cm.read_text()))
        ggml = f"{v.get('MAJOR')}.{v.get('MINOR')}.{v.get('PATCH')}"
    return f"{first} (its vendored llama.cpp; ggml {ggml}; no git commit in the sdist)"


def cpu_info() -> dict:
    name, flags = platform.processor(), []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not name:
                name = line.split(":", 1)[1].strip()
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                break
    except OSError:
        pass
    keep = [f for f in flags if f in ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw",
                                       "avx512vl", "avx512_vnni", "avx_vnni", "avx512_bf16")]
    return {"model": name, "simd_flags": keep, "nproc": os.cpu_count()}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port: int, route: str, body: dict) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{route}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


class Server:
    def __init__(self, bins: Path, model: Path):
        self.port = free_port()
        self.cmd = [str(bins / "llama-server"), "-m", str(model), "--host", "127.0.0.1",
                    "--port", str(self.port), "-c", "2048", "-np", "1", "-t", str(THREADS),
                    "-b", "512", "--no-webui", "--log-disable"]

    def __enter__(self):
        log("starting " + " ".join(self.cmd))
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit("llama-server exited: " + self.proc.stderr.read().decode()[-2000:])
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.5)
        raise SystemExit("llama-server did not become ready")

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def greedy(srv: Server, prompt: str) -> dict:
    ids = post(srv.port, "/tokenize", {"content": prompt, "add_special": True})["tokens"]
    body = {"prompt": ids, "n_predict": N_PREDICT, "temperature": 0.0, "top_k": 1, "seed": 0,
            "n_probs": TOP_K, "post_sampling_probs": False, "return_tokens": True,
            "cache_prompt": False, "repeat_penalty": 1.0, "ignore_eos": False,
            "samplers": ["top_k", "temperature"]}
    r = post(srv.port, "/completion", body)
    if r.get("tokens_evaluated") not in (None, len(ids)):
        raise SystemExit(f"server evaluated {r['tokens_evaluated']} prompt tokens, sent {len(ids)}")
    probs = r.get("completion_probabilities", [])
    tokens = r.get("tokens") or [p["id"] for p in probs]
    steps = [{"id": p["id"], "logprob": p["logprob"],
              "top": [[t["id"], t["logprob"]] for t in p["top_logprobs"]]} for p in probs]
    return {"prompt": prompt, "prompt_ids": ids, "output_ids": tokens, "output_text": r["content"],
            "stop_type": r.get("stop_type"), "top_logprobs": steps}


def perplexity(bins: Path, model: Path, kl_base: Path | None = None, chunks: int = 0) -> dict:
    cmd = [str(bins / "llama-perplexity"), "-m", str(model), "-f", str(TEXT), "-c", str(CTX),
           "-b", str(CTX), "-t", str(THREADS)]
    if kl_base:
        cmd += ["--kl-divergence-base", str(kl_base)]
    if chunks:
        cmd += ["--chunks", str(chunks)]
    log("running " + " ".join(cmd))
    r = sh(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = r.stdout
    if r.returncode != 0:
        raise SystemExit(out[-3000:])
    final = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
    lines = [ln for ln in out.splitlines() if ln.startswith("[1]")]
    chunks = [float(x) for x in re.findall(r"\[\d+\]([0-9.]+)", lines[-1])] if lines else []
    meta = re.search(r"calculating perplexity over (\d+) chunks, n_ctx=(\d+)", out)
    res = {"command": " ".join(cmd).replace(str(REPO) + "/", "").replace(str(model), "MODEL")
                                   .replace(str(bins) + "/", ""),
           "ctx": CTX, "n_chunks": int(meta.group(1)) if meta else None,
           "ppl": float(final.group(1)), "ppl_stderr": float(final.group(2)),
           "running_ppl_by_chunk": chunks}
    return res


def kl_base_npy(bins: Path, model: Path, name: str, chunks: int) -> dict:
    """llama.cpp's log-probabilities of the scored rows of the first `chunks` chunks of the text
    (llama-perplexity --kl-divergence-base, decoded) as float32 .npy [n_scored, n_vocab] beside
    the model, the shape ember's `perplexity --kl-base` reads. Needs numpy."""
    import numpy as np
    out = model.with_name(f"llamacpp-logprobs.{TEXT.stem}.c{CTX}.chunks{chunks}.npy")
    raw = model.with_name(out.stem + ".bin")
    ppl = perplexity(bins, model, raw, chunks)
    buf = raw.read_bytes()
    assert buf[:8] == b"_logits_", "unexpected --kl-divergence-base header"
    n_ctx, n_vocab, n_chunk = np.frombuffer(buf, np.int32, 3, 8)
    off = 8 + 12 + 4 * int(n_chunk) * int(n_ctx)
    nv = 2 * ((int(n_vocab) + 1) // 2) + 4
    rows = np.frombuffer(buf, np.uint16, offset=off).reshape(-1, nv)
    head = rows[:, :4].copy().view(np.float32)  # [scale, min_log_prob] per row
    lp = rows[:, 4:4 + int(n_vocab)].astype(np.float32) * head[:, :1] + head[:, 1:2]
    np.save(out, lp)
    raw.unlink()
    log(f"wrote {out}: {lp.shape}")
    return {"file": f"$EMBER_MODELS/{name}/{out.name}", "shape": list(lp.shape),
            "chunks": chunks, "ppl_over_these_chunks": ppl["ppl"],
            "command": ppl["command"].replace(str(raw), "BASE.bin"),
            "decoding": "llama.cpp stores per row scale, min_log_prob (float32) and n_vocab uint16 "
                        "q; log_prob = scale*q + min_log_prob (16-nat range below the max, "
                        "lower values clamped); rows are the scored positions ctx/2..ctx-2 of "
                        "each chunk in order; compare with `ember perplexity --ctx "
                        f"{CTX} --chunks {chunks} --kl-base FILE`"}


def text_tokens(srv: Server) -> list[int]:
    return post(srv.port, "/tokenize", {"content": TEXT.read_text(), "add_special": True})["tokens"]


def dumps(obj, indent: int = 0) -> str:
    """JSON with one key per line but lists of scalars (and [id, logprob] pairs) on one line."""
    pad, inner = " " * indent, " " * (indent + 1)
    flat = lambda v: not isinstance(v, (dict, list)) or (
        isinstance(v, list) and all(not isinstance(x, (dict, list)) for x in v))
    if isinstance(obj, dict):
        items = [f"{inner}{json.dumps(k)}: {dumps(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}" if items else "{}"
    if isinstance(obj, list) and not all(flat(x) for x in obj):
        items = [f"{inner}{dumps(x, indent + 1)}" for x in obj]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(obj, ensure_ascii=False)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", action="append", default=[])
    ap.add_argument("--kl-base", action="store_true",
                    help="also save llama.cpp's log-probs of the text as .npy beside the model "
                         "(needs numpy; hundreds of MB for a 262k vocabulary)")
    ap.add_argument("--kl-chunks", type=int, default=4, help="chunks in the --kl-base file (4)")
    a = ap.parse_args()
    models = a.model or ["gemma3-270m-q4_k_m"]
    bins = llama_bins()
    version = llama_version(bins)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name in models:
        path = model_path(name)
        with Server(bins, path) as srv:
            gens = [greedy(srv, p) for p in PROMPTS]
            toks = text_tokens(srv)
        ppl = perplexity(bins, path)
        n_chunks = len(toks) // CTX
        ppl["scoring"] = (
            "llama-perplexity (no --ppl-stride): the text is tokenized once with BOS; chunk i is "
            f"tokens[i*{CTX}:(i+1)*{CTX}] with its first token replaced by BOS (if the model adds "
            f"BOS), evaluated from an empty KV cache; the logits at positions {CTX//2}..{CTX-2} "
            f"score tokens {CTX//2+1}..{CTX-1}; PPL = exp(mean NLL) over all {n_chunks} chunks; "
            "running_ppl_by_chunk[i] is the estimate after chunk i+1")
        fixture = {
            "model": name,
            "model_file": path.name,
            "model_sha256": sha256_file(path),
            "llama_cpp": version,
            "cpu": cpu_info(),
            "threads": THREADS,
            "generation": {
                "command": "llama-server -m MODEL -c 2048 -np 1 -t 2 -b 512; POST /tokenize "
                           "{content, add_special:true}; POST /completion {prompt: <ids>, "
                           f"n_predict:{N_PREDICT}, temperature:0, top_k:1, n_probs:{TOP_K}, "
                           "post_sampling_probs:false, return_tokens:true, cache_prompt:false}",
                "n_predict": N_PREDICT, "top_k_logprobs": TOP_K,
                "note": "top_logprobs are natural-log softmax of llama.cpp's raw logits at each "
                        "generated position (the token was generated from them greedily)",
                "prompts": gens,
            },
            "eval_text": {"file": str(TEXT.relative_to(REPO)),
                          "sha256": sha256_file(TEXT), "n_tokens": len(toks), "token_ids": toks},
            "perplexity": ppl,
        }
        if a.kl_base:
            fixture["kl_base"] = kl_base_npy(bins, path, name, a.kl_chunks)
        out = OUT_DIR / f"{name}.json"
        out.write_text(dumps(fixture) + "\n")
        log(f"wrote {out}: ppl {ppl['ppl']} over {ppl['n_chunks']} chunks; "
            + " | ".join(repr(g["output_text"][:40]) for g in gens))
    return 0


if __name__ == "__main__":
    sys.exit(main())
