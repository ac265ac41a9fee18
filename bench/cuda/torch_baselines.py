#!/usr/bin/env python3
"""PyTorch baselines for bench_cuda_kernels, measured on the same GPU in the same run.

Prints RESULT|group|name|value|unit|note lines like the C++ benchmark:
  - device-to-device copy bandwidth (bytes read + written),
  - GEMV (torch.matmul, bf16, batch 1) at Llama-3-8B shapes, weights rotated past the L2,
  - decode attention (scaled_dot_product_attention, q length 1, dense K/V, GQA),
  - causal prefill attention at 4096 tokens, per SDPA backend that runs.
Timing: CUDA events around CUDA-graph replays (decode-sized work) or plain launches, median.
"""
import math
import sys

import torch
import torch.nn.functional as F


def result(group, name, value, unit, note=""):
    print(f"RESULT|{group}|{name}|{value:.3f}|{unit}|{note}", flush=True)


def time_ms(fn, per_graph=10, reps=9, graph=True):
    """Median milliseconds per fn() call."""
    for _ in range(3):
        fn(0)
    torch.cuda.synchronize()
    if graph:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(s):
            with torch.cuda.graph(g, stream=s):
                for i in range(per_graph):
                    fn(i)
        torch.cuda.synchronize()
        run = g.replay
    else:
        def run():
            for i in range(per_graph):
                fn(i)
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        run()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / per_graph)
    times.sort()
    return times[len(times) // 2]


def copy_bandwidth():
    n = (2 << 30) // 4
    src = torch.rand(n, device="cuda")
    dst = torch.empty_like(src)
    ms = time_ms(lambda i: dst.copy_(src), per_graph=4, reps=7, graph=False)
    gbs = 2 * src.numel() * 4 / (ms * 1e-3) / 1e9
    result("ceiling", "torch d2d copy 2 GiB (read+write)", gbs, "GB/s")
    return gbs


def gemv(copy_gbs):
    for m, k, what in [(4096, 4096, "q/o proj"), (14336, 4096, "gate/up"),
                       (4096, 14336, "down"), (128256, 4096, "lm_head")]:
        wbytes = m * k * 2
        copies = max(1, (512 << 20) // wbytes + 1)
        ws = [(torch.rand(m, k, device="cuda", dtype=torch.bfloat16) - 0.5) * 0.1 for _ in range(copies)]
        x = torch.rand(1, k, device="cuda", dtype=torch.bfloat16) * 2 - 1
        outs = [torch.empty(1, m, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        ms = time_ms(lambda i: torch.matmul(x, ws[i % copies].t(), out=outs[i % copies]),
                     per_graph=max(4 * copies, 16))
        gbs = wbytes / (ms * 1e-3) / 1e9
        result("gemv", f"torch.matmul bf16 n=1 {m}x{k} {what}", gbs, "GB/s",
               f"{ms * 1e3:.1f} us, {100 * gbs / copy_gbs:.0f}% of copy")
        del ws


def sdpa_backends():
    from torch.nn.attention import SDPBackend
    names = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
             "efficient": SDPBackend.EFFICIENT_ATTENTION}
    return names


def decode_attention(copy_gbs):
    from torch.nn.attention import sdpa_kernel
    h, kv, d, s = 32, 8, 128, 4096
    for b in (32, 64):
        q = torch.randn(b, h, 1, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, kv, s, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, kv, s, d, device="cuda", dtype=torch.bfloat16)
        kv_bytes = 2 * k.numel() * 2
        for name, be in sdpa_backends().items():
            try:
                with sdpa_kernel([be]):
                    ms = time_ms(lambda i: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
            except Exception as e:  # a backend that does not take these shapes
                print(f"# sdpa {name} decode b{b}: {type(e).__name__}: {str(e)[:120]}", file=sys.stderr)
                continue
            gbs = kv_bytes / (ms * 1e-3) / 1e9
            result("decode-attn", f"torch sdpa[{name}] dense bf16 b{b} s4096 h32/kv8 d128", gbs, "GB/s",
                   f"{ms * 1e3:.1f} us, {100 * gbs / copy_gbs:.0f}% of copy")
        del k, v


def prefill_attention():
    from torch.nn.attention import sdpa_kernel
    n, h, d = 4096, 32, 128
    flop = 4.0 * d * h * (n * (n + 1) / 2)
    for kv in (8, 32):
        q = torch.randn(1, h, n, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, kv, n, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(1, kv, n, d, device="cuda", dtype=torch.bfloat16)
        for name, be in sdpa_backends().items():
            try:
                with sdpa_kernel([be]):
                    ms = time_ms(lambda i: F.scaled_dot_product_attention(
                        q, k, v, is_causal=True, enable_gqa=kv != h), per_graph=5, graph=False)
            except Exception as e:
                print(f"# sdpa {name} prefill kv{kv}: {type(e).__name__}: {str(e)[:120]}", file=sys.stderr)
                continue
            result("prefill-attn", f"torch sdpa[{name}] causal 4096 h32/kv{kv} d128",
                   flop / (ms * 1e-3) / 1e12, "TFLOP/s", f"{ms:.3f} ms")


def main():
    torch.manual_seed(0)
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    copy = copy_bandwidth()
    gemv(copy)
    decode_attention(copy)
    prefill_attention()


if __name__ == "__main__":
    main()
