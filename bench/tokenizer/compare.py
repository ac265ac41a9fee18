#!/usr/bin/env python3
"""Encoding throughput of ember's tokenizer next to Hugging Face `tokenizers`, one thread each.

    bench/tokenizer/compare.py [--build build] [--models NAME ...] [--text FILE] [--chunk BYTES] [--iters N]

The text (unless --text) is ~0.6 MB: Debian's licence texts (English prose), Python standard
library sources (code) and the multilingual hard-strings corpus (twice). It is cut at line
ends into prompts of about --chunk bytes (default 2000; 0: one string), each encoded on its own.
HF runs with TOKENIZERS_PARALLELISM=false and Tokenizer.encode (not encode_batch) on the same
prompts, without special tokens. Both figures are MB per second of the thread's CPU time, since the machines are
shared and wall time would measure the neighbours; for GGUF models its Tokenizer is the one transformers builds from the file. The
ids of both are compared, so a speedup never hides a wrong answer.
Run with the tools venv: /root/.cache/ember-tools-venv/bin/python bench/tokenizer/compare.py
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"

ROOT = Path(__file__).resolve().parents[2]
MODELS = os.path.expanduser(os.environ.get("EMBER_MODELS", "~/.cache/ember/models"))
TARGETS = {
    "gemma3-270m-q4_k_m": f"{MODELS}/gemma3-270m-q4_k_m/gemma-3-270m-q4_k_m.gguf",
    "qwen2.5-coder-0.5b-instruct-q4_k_m":
        f"{MODELS}/qwen2.5-coder-0.5b-instruct-q4_k_m/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    "smollm2-135m-instruct-q4_1": f"{MODELS}/smollm2-135m-instruct-q4_1/SmolLM2-135M-Instruct.Q4_1.gguf",
    "tiny-bpe_llama3": str(ROOT / "tests/fixtures/tokenizer/tiny/bpe_llama3"),
    "tiny-spm_llama2": str(ROOT / "tests/fixtures/tokenizer/tiny/spm_llama2"),
}


def make_text(path):
    parts = []
    for f in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(f):
            parts.append(open(f, encoding="utf-8", errors="replace").read())
    import collections, textwrap, difflib, argparse as ap, json as js, inspect  # noqa: E401
    parts += [inspect.getsource(m) for m in (collections, textwrap, difflib, ap, js)]
    corpus = json.load(open(ROOT / "tests/fixtures/tokenizer/hard_strings.json", encoding="utf-8"))
    parts.append("\n".join(e["text"] for e in corpus) * 2)
    text = "\n".join(parts)
    Path(path).write_text(text, encoding="utf-8")
    return text


def chunks(text, size):
    if size <= 0:
        return [text]
    out, cur, n = [], [], 0
    for line in text.splitlines(keepends=True):
        cur.append(line)
        n += len(line.encode("utf-8"))
        if n >= size:
            out.append("".join(cur))
            cur, n = [], 0
    if cur:
        out.append("".join(cur))
    return out


def hf_tokenizer(path):
    if path.endswith(".gguf"):
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path)).backend_tokenizer
    from tokenizers import Tokenizer
    return Tokenizer.from_file(os.path.join(path, "tokenizer.json"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build-tok"))
    ap.add_argument("--models", nargs="*", default=list(TARGETS))
    ap.add_argument("--text")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=2000)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    text_path = args.text or os.path.join(tmp, "bench.txt")
    text = open(text_path, encoding="utf-8").read() if args.text else make_text(text_path)
    prompts = chunks(text, args.chunk)
    prompts_path = os.path.join(tmp, "prompts.txt")
    Path(prompts_path).write_text("\x1e".join(prompts), encoding="utf-8")
    mb = sum(len(p.encode("utf-8")) for p in prompts) / 1e6
    exe = os.path.join(args.build, "bench", "tokenizer", "bench_tokenizer")
    print(f"text: {mb:.2f} MB in {len(prompts)} prompts, 1 thread each")
    print("MB/s per CPU-second. cold: first pass on a freshly loaded tokenizer; warm: best later pass over")
    print("the same prompts (word caches full, so it overstates repeated-prompt speed).")
    print(f"{'model':36s} {'cold: ember':>11s} {'HF':>6s} {'ratio':>6s} {'warm: ember':>11s} {'HF':>6s} {'ratio':>6s}"
          f" {'tokens':>8s}  ids")
    for name in args.models:
        path = TARGETS[name]
        if not os.path.exists(path):
            print(f"{name:40s} missing: {path}")
            continue
        ids_path = os.path.join(tmp, name + ".ids")
        out = subprocess.run([exe, path, prompts_path, "--iters", str(args.iters), "--ids", ids_path],
                             check=True, capture_output=True, text=True).stdout
        ember = dict(kv.split("=") for kv in out.split())
        tok = hf_tokenizer(path)
        def encode_all():
            out = []
            for p in prompts:
                out += tok.encode(p, add_special_tokens=False).ids
            return out
        t = time.thread_time()
        encode_all()  # cold: first pass on a fresh tokenizer, as ember's cold figure
        hf_cold = mb / (time.thread_time() - t)
        best = 1e30
        for _ in range(args.iters):
            t = time.thread_time()  # CPU time, as ember's figure (shared machines)
            hf_ids = encode_all()
            best = min(best, time.thread_time() - t)
        hf_mb_s = mb / best
        same = [int(x) for x in open(ids_path)] == hf_ids
        e, ec = float(ember["mb_s"]), float(ember["cold_mb_s"])
        print(f"{name:36s} {ec:11.2f} {hf_cold:6.2f} {ec / hf_cold:6.2f} {e:11.2f} {hf_mb_s:6.2f} {e / hf_mb_s:6.2f}"
              f" {len(hf_ids):8d}  {'identical' if same else 'DIFFERENT'}  (ember load {float(ember['load_s']):.2f}s)")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
