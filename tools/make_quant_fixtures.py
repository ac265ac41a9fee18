#!/usr/bin/env python3
"""Fixtures for ember's quant tests (tests/quant/), produced by code ember did not write.

For every block format: random blocks (random bytes, with finite f16 scale fields) and their
dequantized values as computed by the `gguf` Python package (PyTorch for FP8; a plain numpy
definition for Q8_1 and Q8_K, which gguf does not implement). For the formats whose quantizer
gguf implements (and Q8_1/Q8_K, transcribed from GGML's quantize_row_*_ref, and FP8 through
PyTorch's casts): random float rows and their quantized bytes.

Output (tests/fixtures/quant/): manifest.json plus raw little-endian files:
  <type>.blocks.bin  random blocks            <type>.deq.f32   their dequantized floats
  <type>.src.f32     floats to quantize       <type>.quant.bin their quantized bytes

Run: /root/.cache/ember-tools-venv/bin/python tools/make_quant_fixtures.py [out_dir]
"""
import json
import os
import sys

import numpy as np
import torch
from gguf import GGMLQuantizationType as T
from gguf import quants

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "quant")

rng = np.random.default_rng(20240607)

# name -> (ggml type or None, block elements, block bytes, byte offsets of f16 scale fields)
FORMATS = {
    "f16": (T.F16, 1, 2, []),
    "bf16": (T.BF16, 1, 2, []),
    "q4_0": (T.Q4_0, 32, 18, [0]),
    "q4_1": (T.Q4_1, 32, 20, [0, 2]),
    "q5_0": (T.Q5_0, 32, 22, [0]),
    "q5_1": (T.Q5_1, 32, 24, [0, 2]),
    "q8_0": (T.Q8_0, 32, 34, [0]),
    "q8_1": (None, 32, 36, [0, 2]),
    "q2_k": (T.Q2_K, 256, 84, [80, 82]),
    "q3_k": (T.Q3_K, 256, 110, [108]),
    "q4_k": (T.Q4_K, 256, 144, [0, 2]),
    "q5_k": (T.Q5_K, 256, 176, [0, 2]),
    "q6_k": (T.Q6_K, 256, 210, [208]),
    "q8_k": (None, 256, 292, []),
}


def random_f16(n):
    """Finite f16 values of varied magnitude and sign (no inf/nan)."""
    mag = np.exp2(rng.uniform(-14, 4, n)) * rng.choice([-1, 1], n)
    vals = mag.astype(np.float16)
    vals[rng.random(n) < 0.05] = 0  # a few zero scales
    return vals


def random_blocks(nbytes, n_blocks, f16_offsets):
    raw = rng.integers(0, 256, size=(n_blocks, nbytes), dtype=np.uint8)
    for off in f16_offsets:
        raw[:, off:off + 2] = random_f16(n_blocks).view(np.uint8).reshape(n_blocks, 2)
    return raw


def dequant_q8_1(raw):  # x = d * q (s is only used by dot products)
    d = raw[:, 0:2].copy().view(np.float16).astype(np.float32)
    return d * raw[:, 4:36].copy().view(np.int8).astype(np.float32)


def random_q8_k(n_blocks):
    raw = rng.integers(0, 256, size=(n_blocks, 292), dtype=np.uint8)
    d = (np.exp2(rng.uniform(-10, 2, n_blocks)) * rng.choice([-1, 1], n_blocks)).astype(np.float32)
    raw[:, 0:4] = d.view(np.uint8).reshape(n_blocks, 4)
    return raw


def dequant_q8_k(raw):
    d = raw[:, 0:4].copy().view(np.float32)
    return d * raw[:, 4:260].copy().view(np.int8).astype(np.float32)


def np_roundf(x):  # C roundf: halves away from zero
    a = np.abs(x)
    fl = np.floor(a)
    return np.sign(x) * (fl + np.floor(2 * (a - fl)))


def quant_q8_1(x):
    """GGML quantize_row_q8_1_ref: d = amax/127, q = roundf(x/d), s = f16(sum(q)*d)."""
    x = x.reshape(-1, 32).astype(np.float32)
    d = (np.abs(x).max(axis=1, keepdims=True) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    q = np_roundf(x * inv).astype(np.int8)
    s = (q.astype(np.int32).sum(axis=1, keepdims=True).astype(np.float32) * d).astype(np.float32)
    return np.concatenate([d.astype(np.float16).view(np.uint8), s.astype(np.float16).view(np.uint8),
                           q.view(np.uint8)], axis=1)


def quant_q8_k(x):
    """GGML quantize_row_q8_K_ref: iscale = -127/max (max = signed absmax), q = rint(iscale*x)
    capped at 127, bsums of 16, d = 1/iscale; an all-zero block is all zero."""
    x = x.reshape(-1, 256).astype(np.float32)
    out = np.zeros((x.shape[0], 292), dtype=np.uint8)
    for i, blk in enumerate(x):
        idx = int(np.argmax(np.abs(blk)))
        mx = blk[idx]
        if mx == 0:
            continue
        iscale = np.float32(-127.0) / mx
        q = np.minimum(127, np.rint(iscale * blk)).astype(np.int8)
        bsums = q.astype(np.int16).reshape(16, 16).sum(axis=1).astype(np.int16)
        d = np.float32(1.0) / iscale
        out[i] = np.concatenate([np.array([d], np.float32).view(np.uint8), q.view(np.uint8),
                                 bsums.view(np.uint8)])
    return out


def random_rows(n_blocks, block):
    """Gaussian rows with a different scale per block, plus edge-case blocks."""
    x = rng.standard_normal((n_blocks, block)).astype(np.float32)
    x *= np.exp2(rng.uniform(-8, 8, (n_blocks, 1))).astype(np.float32)
    x[0] = 0  # all-zero block
    if n_blocks > 2:
        x[1] = np.abs(x[1])  # one-signed blocks
        x[2] = -np.abs(x[2])
    return x.reshape(-1)


def write(name, arr):
    arr.tofile(os.path.join(OUT, name))
    return name


def main():
    os.makedirs(OUT, exist_ok=True)
    manifest = {"dequantize": [], "quantize": []}

    for name, (qt, block, nbytes, offs) in FORMATS.items():
        n_blocks = 6 if block == 256 else (512 if block == 1 else 40)
        if name == "f16":
            raw = random_f16(n_blocks).view(np.uint8).reshape(n_blocks, 2)
        elif name == "q8_k":
            raw = random_q8_k(n_blocks)
        else:
            raw = random_blocks(nbytes, n_blocks, offs)
        if name == "bf16":  # random bf16 bits, but finite
            bits = raw.copy().view(np.uint16)
            bits[(bits & 0x7F80) == 0x7F80] &= 0xBFFF
            raw = bits.view(np.uint8).reshape(n_blocks, 2)
        if name == "q8_1":
            deq = dequant_q8_1(raw)
        elif name == "q8_k":
            deq = dequant_q8_k(raw)
        else:
            deq = quants.dequantize(raw.reshape(1, -1), qt)
        deq = np.ascontiguousarray(deq, dtype=np.float32).reshape(-1)
        assert np.all(np.isfinite(deq)), name
        manifest["dequantize"].append({
            "type": name, "n": int(n_blocks * block),
            "blocks": write(f"{name}.blocks.bin", raw), "values": write(f"{name}.deq.f32", deq)})

    # FP8: every byte value, decoded by PyTorch.
    codes = np.arange(256, dtype=np.uint8)
    for name, tdt in (("fp8_e4m3", torch.float8_e4m3fn), ("fp8_e5m2", torch.float8_e5m2)):
        deq = torch.from_numpy(codes.copy()).view(tdt).to(torch.float32).numpy()
        manifest["dequantize"].append({
            "type": name, "n": 256, "blocks": write(f"{name}.blocks.bin", codes),
            "values": write(f"{name}.deq.f32", deq)})

    quantizers = {
        "f16": lambda x: quants.quantize(x, T.F16).view(np.uint8),
        "bf16": lambda x: quants.quantize(x, T.BF16),
        "q4_0": lambda x: quants.quantize(x, T.Q4_0),
        "q4_1": lambda x: quants.quantize(x, T.Q4_1),
        "q5_0": lambda x: quants.quantize(x, T.Q5_0),
        "q5_1": lambda x: quants.quantize(x, T.Q5_1),
        "q8_0": lambda x: quants.quantize(x, T.Q8_0),
        "q8_1": quant_q8_1,
        "q8_k": quant_q8_k,
    }
    for name, fn in quantizers.items():
        block = FORMATS[name][1]
        n_blocks = 6 if block == 256 else (1024 if block == 1 else 48)
        x = random_rows(n_blocks // max(1, 64 // block) if block == 1 else n_blocks,
                        block if block > 1 else 64)
        q = np.ascontiguousarray(fn(x.reshape(1, -1))).view(np.uint8).reshape(-1)
        manifest["quantize"].append({
            "type": name, "n": int(x.size),
            "source": write(f"{name}.src.f32", x), "bytes": write(f"{name}.quant.bin", q)})

    # FP8 quantization by PyTorch's casts: values across the whole exponent range, exact ties
    # (midpoints of neighbouring codes), out-of-range values, infinities, signed zeros.
    for name, tdt in (("fp8_e4m3", torch.float8_e4m3fn), ("fp8_e5m2", torch.float8_e5m2)):
        finite = torch.from_numpy(codes.copy()).view(tdt).to(torch.float32).numpy()
        finite = np.unique(finite[np.isfinite(finite)])
        mids = (finite[:-1] + finite[1:]) / 2
        top = float(finite[-1])
        x = np.concatenate([
            finite, mids, np.nextafter(mids, np.float32(np.inf)),
            np.nextafter(mids, np.float32(-np.inf)),
            rng.standard_normal(1000).astype(np.float32) * np.exp2(rng.uniform(-20, 17, 1000)),
            np.array([top * 1.01, top * 1.1, top * 4, 1e30, np.inf, -np.inf, 0.0, -0.0,
                      1e-30, -1e-30], np.float32),
        ]).astype(np.float32)
        q = torch.from_numpy(x).to(tdt).view(torch.uint8).numpy()
        manifest["quantize"].append({
            "type": name, "n": int(x.size),
            "source": write(f"{name}.src.f32", x), "bytes": write(f"{name}.quant.bin", q)})

    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    total = sum(os.path.getsize(os.path.join(OUT, p)) for p in os.listdir(OUT))
    print(f"wrote {OUT}: {total} bytes")


if __name__ == "__main__":
    main()
