#!/usr/bin/env python3
"""Serving benchmark for OpenAI-compatible servers (ember serve, llama.cpp's llama-server, ...).

Sends streaming /v1/completions (or /v1/chat/completions) requests with Poisson arrivals at
--request-rate (inf: all at once) under at most --max-concurrency requests in flight, and reports
throughput and latency percentiles:
  TTFT  time to first token (first non-empty text chunk)
  TPOT  time per output token after the first: (e2e - ttft) / (output tokens - 1)
  ITL   inter-token latency: gaps between consecutive text chunks
  E2E   end-to-end request latency
Prompts are slices of a text file (default: the KJV excerpt in data/eval) with lengths drawn
from --input-len +- --range-ratio; every request asks for --output-len tokens with ignore_eos,
so every server does the same work. Output tokens are counted from the server's usage when it
sends it (stream_options.include_usage), else from the number of text chunks.

  bench/serving/bench_serving.py --base-url http://127.0.0.1:8080 --num-prompts 64 \\
      --request-rate 4 --max-concurrency 16 --input-len 128 --output-len 64 --json out.json
"""
import argparse
import asyncio
import json
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

try:
    import httpx
except ImportError:  # the openai package of requirements/test.txt ships httpx as httpx2
    import httpx2 as httpx

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Result:
    ok: bool = False
    error: str = ""
    prompt_chars: int = 0
    output_tokens: int = 0
    ttft: float = 0.0
    e2e: float = 0.0
    itl: list = field(default_factory=list)


def make_prompts(args):
    words = Path(args.text).read_text(encoding="utf-8").split()
    rng = random.Random(args.seed)
    prompts = []
    for _ in range(args.num_prompts):
        lo = max(1, int(args.input_len * (1 - args.range_ratio)))
        hi = max(lo, int(args.input_len * (1 + args.range_ratio)))
        # ~0.75 words per token for English text with these tokenizers
        n_words = max(1, int(rng.randint(lo, hi) * 0.75))
        start = rng.randrange(0, max(1, len(words) - n_words))
        prompts.append(" ".join(words[start:start + n_words]))
    return prompts


def request_body(args, prompt):
    body = {"model": args.model, "max_tokens": args.output_len, "temperature": args.temperature, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": args.ignore_eos}
    if args.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


async def one_request(client, args, prompt):
    r = Result(prompt_chars=len(prompt))
    url = args.base_url.rstrip("/") + ("/v1/chat/completions" if args.endpoint == "chat" else "/v1/completions")
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    t0 = time.perf_counter()
    last = None
    chunks = 0
    usage_tokens = None
    try:
        async with client.stream("POST", url, json=request_body(args, prompt), headers=headers) as resp:
            if resp.status_code != 200:
                r.error = f"HTTP {resp.status_code}: {(await resp.aread())[:200]!r}"
                return r
            async for line in resp.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    break
                msg = json.loads(data)
                if msg.get("usage"):
                    usage_tokens = msg["usage"].get("completion_tokens")
                for c in msg.get("choices", []):
                    text = c.get("text") if args.endpoint != "chat" else (c.get("delta") or {}).get("content")
                    if text:
                        now = time.perf_counter()
                        if last is None:
                            r.ttft = now - t0
                        else:
                            r.itl.append(now - last)
                        last = now
                        chunks += 1
        r.e2e = time.perf_counter() - t0
        r.output_tokens = usage_tokens if usage_tokens is not None else chunks
        r.ok = last is not None
        if not r.ok:
            r.error = "no output"
    except Exception as e:  # noqa: BLE001 - counted as a failed request
        r.error = repr(e)
    return r


async def run(args, prompts):
    limits = httpx.Limits(max_connections=args.max_concurrency, max_keepalive_connections=args.max_concurrency)
    timeout = httpx.Timeout(args.timeout)
    sem = asyncio.Semaphore(args.max_concurrency)
    rng = random.Random(args.seed + 1)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        async def limited(p):
            async with sem:
                return await one_request(client, args, p)

        tasks = []
        t0 = time.perf_counter()
        for p in prompts:
            tasks.append(asyncio.create_task(limited(p)))
            if math.isfinite(args.request_rate):
                await asyncio.sleep(rng.expovariate(args.request_rate))
        results = await asyncio.gather(*tasks)
        duration = time.perf_counter() - t0
    return results, duration


def pct(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q / 100
    f, c = math.floor(k), math.ceil(k)
    return s[f] + (s[c] - s[f]) * (k - f)


def summarize(results, duration, args):
    ok = [r for r in results if r.ok]
    out_tokens = sum(r.output_tokens for r in ok)
    ms = lambda xs: {"mean": 1000 * sum(xs) / len(xs) if xs else float("nan"),  # noqa: E731
                     "p50": 1000 * pct(xs, 50), "p90": 1000 * pct(xs, 90), "p99": 1000 * pct(xs, 99)}
    tpot = [(r.e2e - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    return {
        "base_url": args.base_url, "endpoint": args.endpoint, "num_prompts": len(results), "completed": len(ok),
        "failed": len(results) - len(ok), "errors": sorted({r.error for r in results if not r.ok})[:5],
        "request_rate": args.request_rate, "max_concurrency": args.max_concurrency,
        "input_len": args.input_len, "output_len": args.output_len, "duration_s": duration,
        "request_throughput": len(ok) / duration, "output_throughput": out_tokens / duration,
        "output_tokens": out_tokens,
        "ttft_ms": ms([r.ttft for r in ok]), "tpot_ms": ms(tpot),
        "itl_ms": ms([x for r in ok for x in r.itl]), "e2e_ms": ms([r.e2e for r in ok]),
        "loadavg_1m": os.getloadavg()[0],
    }


def print_summary(s, label):
    print(f"== {label}: {s['completed']}/{s['num_prompts']} ok in {s['duration_s']:.1f} s "
          f"(rate {s['request_rate']}, concurrency {s['max_concurrency']}, loadavg {s['loadavg_1m']:.1f})")
    print(f"   throughput: {s['request_throughput']:.2f} req/s, {s['output_throughput']:.1f} output tok/s "
          f"({s['output_tokens']} tokens)")
    for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        v = s[k]
        print(f"   {k[:-3].upper():5s} ms  mean {v['mean']:8.1f}  p50 {v['p50']:8.1f}  p90 {v['p90']:8.1f}  "
              f"p99 {v['p99']:8.1f}")
    if s["errors"]:
        print("   errors:", s["errors"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", default="", help="model name to send (empty: the server's default)")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--request-rate", type=float, default=float("inf"), help="requests/s, Poisson (inf: at once)")
    ap.add_argument("--max-concurrency", type=int, default=16)
    ap.add_argument("--input-len", type=int, default=128, help="prompt tokens (approximately)")
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--range-ratio", type=float, default=0.5, help="prompt length spread: input_len * (1 +- r)")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false")
    ap.add_argument("--text", default=str(ROOT / "data" / "eval" / "kjv-1samuel-100k.txt"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--label", default="")
    ap.add_argument("--json", help="append the summary as one JSON line to this file")
    args = ap.parse_args()
    prompts = make_prompts(args)
    results, duration = asyncio.run(run(args, prompts))
    s = summarize(results, duration, args)
    s["label"] = args.label
    print_summary(s, args.label or args.base_url)
    if args.json:
        with open(args.json, "a", encoding="utf-8") as f:
            f.write(json.dumps(s) + "\n")
    return 0 if s["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
