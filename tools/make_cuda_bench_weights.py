#!/usr/bin/env python3
"""Writes a random-weight Llama-3-8B-shaped checkpoint (config.json + bf16 safetensors shards)
for GPU benchmarks of whole-model decode and prefill, where only shapes and dtypes matter.

Values are uniform in +-1/sqrt(fan_in) (norm weights 1), from a fixed seed. With PyTorch and a
GPU the values are drawn on the GPU (torch's Philox generator; seconds instead of minutes),
otherwise with numpy (--numpy forces it); each path gives the same bytes on every run. The full
model is ~16 GB:
  tools/make_cuda_bench_weights.py models/llama3-8b-random            # all 32 layers
  tools/make_cuda_bench_weights.py models/llama3-tiny --layers 2      # a quick check
"""
import argparse
import json
import os
import struct

import numpy as np

LLAMA3_8B = dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                 num_key_value_heads=8, head_dim=128, vocab_size=128256, rope_theta=500000.0,
                 rms_norm_eps=1e-5, max_position_embeddings=8192)


def bf16_bytes(a):
    """float32 array -> bf16 bytes, round to nearest even (as torch does)."""
    u = a.astype(np.float32).view(np.uint32)
    u = u + 0x7FFF + ((u >> 16) & 1)
    return (u >> 16).astype(np.uint16).tobytes()


def write_safetensors(path, tensors):
    """tensors: list of (name, shape, data) in bf16; data is bytes or a buffer (memoryview)."""
    header, offset = {}, 0
    for name, shape, data in tensors:
        n = memoryview(data).nbytes
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for _, _, data in tensors:
            f.write(data)


def torch_generator(seed):
    """A CUDA torch generator, or None when torch or a GPU is missing."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return torch.Generator(device="cuda").manual_seed(seed)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--numpy", action="store_true", help="draw the values with numpy, not torch on the GPU")
    args = ap.parse_args()
    c = dict(LLAMA3_8B, num_hidden_layers=args.layers)
    d, f, hd = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    q_dim, kv_dim = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    rng = np.random.default_rng(args.seed)
    gen = None if args.numpy else torch_generator(args.seed)

    def rand(rows, cols):
        lim = 1.0 / np.sqrt(cols)
        if gen is not None:
            import torch
            t = torch.empty(rows, cols, dtype=torch.bfloat16, device="cuda").uniform_(-lim, lim, generator=gen)
            return memoryview(t.view(torch.int16).cpu().numpy()).cast("B")
        return bf16_bytes(rng.uniform(-lim, lim, size=(rows, cols)).astype(np.float32))

    os.makedirs(args.out_dir, exist_ok=True)
    shards = [[("model.embed_tokens.weight", (c["vocab_size"], d), rand(c["vocab_size"], d)),
               ("model.norm.weight", (d,), bf16_bytes(np.ones(d, np.float32))),
               ("lm_head.weight", (c["vocab_size"], d), rand(c["vocab_size"], d))]]
    for l in range(args.layers):
        p = f"model.layers.{l}."
        shards.append([
            (p + "input_layernorm.weight", (d,), bf16_bytes(np.ones(d, np.float32))),
            (p + "post_attention_layernorm.weight", (d,), bf16_bytes(np.ones(d, np.float32))),
            (p + "self_attn.q_proj.weight", (q_dim, d), rand(q_dim, d)),
            (p + "self_attn.k_proj.weight", (kv_dim, d), rand(kv_dim, d)),
            (p + "self_attn.v_proj.weight", (kv_dim, d), rand(kv_dim, d)),
            (p + "self_attn.o_proj.weight", (d, q_dim), rand(d, q_dim)),
            (p + "mlp.gate_proj.weight", (f, d), rand(f, d)),
            (p + "mlp.up_proj.weight", (f, d), rand(f, d)),
            (p + "mlp.down_proj.weight", (d, f), rand(d, f)),
        ])
    weight_map = {}
    for i, tensors in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(os.path.join(args.out_dir, name), tensors)
        for t in tensors:
            weight_map[t[0]] = name
        print(f"wrote {name}", flush=True)
    with open(os.path.join(args.out_dir, "model.safetensors.index.json"), "w") as fp:
        json.dump({"metadata": {}, "weight_map": weight_map}, fp, indent=1)
    config = dict(c, architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
                  torch_dtype="bfloat16", tie_word_embeddings=False, bos_token_id=128000,
                  eos_token_id=128001)
    with open(os.path.join(args.out_dir, "config.json"), "w") as fp:
        json.dump(config, fp, indent=1)


if __name__ == "__main__":
    main()
