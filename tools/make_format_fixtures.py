#!/usr/bin/env python3
"""Checkpoint-format fixtures for ember's loader tests (tests/loader/), written by libraries
ember did not write: the `gguf` package's GGUFWriter, `safetensors` and `transformers`.

tests/fixtures/formats/
  all_types.gguf          GGUF v3: every metadata value type (scalars, arrays of each, arrays
                          of strings, nested arrays) and tensors of many dtypes incl. quantized
  all_types_v2.gguf       the same file with the version field set to 2 (same layout)
  aligned64.gguf          general.alignment = 64
  hf_single/              config.json, model.safetensors (F32/F16/BF16), tokenizer_config.json,
                          generation_config.json
  hf_sharded/             a tiny Llama (f16) saved by transformers in shards with an index
  expected.json           per file: metadata (as written) and, per tensor, dtype, shape
                          (outermost first), byte size, data offset and FNV-1a-64 of its bytes

Run: /root/.cache/ember-tools-venv/bin/python tools/make_format_fixtures.py [out_dir]
"""
import json
import os
import shutil
import sys

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFValueType as V, GGUFWriter
from gguf import quants
from safetensors.torch import save_file

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "formats")
rng = np.random.default_rng(7)

EMBER_DTYPE = {  # GGML / safetensors dtype -> ember dtype name
    Q.F32: "f32", Q.F16: "f16", Q.BF16: "bf16", Q.F64: "f64", Q.I8: "i8", Q.I16: "i16",
    Q.I32: "i32", Q.I64: "i64", Q.Q4_0: "q4_0", Q.Q4_1: "q4_1", Q.Q5_0: "q5_0",
    Q.Q5_1: "q5_1", Q.Q8_0: "q8_0", Q.Q2_K: "q2_k", Q.Q3_K: "q3_k", Q.Q4_K: "q4_k",
    Q.Q5_K: "q5_k", Q.Q6_K: "q6_k",
}
ST_DTYPE = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def fnv1a64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def f32(x):  # the double a float32 metadata value decodes to
    return float(np.float32(x))


METADATA = [  # (key, value, GGUF type, array element type)
    ("test.u8", 200, V.UINT8, None),
    ("test.i8", -100, V.INT8, None),
    ("test.u16", 60000, V.UINT16, None),
    ("test.i16", -30000, V.INT16, None),
    ("test.u32", 4000000000, V.UINT32, None),
    ("test.i32", -2000000000, V.INT32, None),
    ("test.f32", f32(3.14159), V.FLOAT32, None),
    ("test.bool_true", True, V.BOOL, None),
    ("test.bool_false", False, V.BOOL, None),
    ("test.string", "héllo, wörld ✓", V.STRING, None),
    ("test.empty_string", "", V.STRING, None),
    ("test.u64", 18000000000000000000, V.UINT64, None),
    ("test.i64", -9000000000000000000, V.INT64, None),
    ("test.f64", 2.718281828459045, V.FLOAT64, None),
    ("test.arr_u8", [1, 2, 255], V.ARRAY, V.UINT8),
    ("test.arr_i16", [-1, 2, -32768], V.ARRAY, V.INT16),
    ("test.arr_i32", [-5, 0, 7, 2147483647], V.ARRAY, V.INT32),
    ("test.arr_u64", [0, 18446744073709551615], V.ARRAY, V.UINT64),
    ("test.arr_f32", [f32(0.5), f32(-1.25), f32(1e-3)], V.ARRAY, V.FLOAT32),
    ("test.arr_f64", [0.1, -2.5], V.ARRAY, V.FLOAT64),
    ("test.arr_bool", [True, False, True], V.ARRAY, V.BOOL),
    ("test.arr_str", ["<s>", "</s>", "▁the", "", "日本"], V.ARRAY, V.STRING),
    ("test.arr_nested", [[1, 2], [3], [4, 5, 6]], V.ARRAY, V.ARRAY),
    ("test.arr_nested_str", [["a", "b"], ["c"]], V.ARRAY, V.ARRAY),
]


def gguf_tensors():
    """name -> (array to write, raw ggml type or None, logical numpy-order shape)."""
    t = {}
    t["f32.vec"] = (rng.standard_normal(7).astype(np.float32), None)
    t["f32.mat"] = (rng.standard_normal((3, 5)).astype(np.float32), None)
    t["f32.cube"] = (rng.standard_normal((2, 3, 4)).astype(np.float32), None)
    t["f32.4d"] = (rng.standard_normal((2, 1, 3, 2)).astype(np.float32), None)
    t["f16.mat"] = (rng.standard_normal((4, 6)).astype(np.float16), None)
    t["f64.vec"] = (rng.standard_normal(3), None)
    t["i8.vec"] = (rng.integers(-128, 128, 5).astype(np.int8), None)
    t["i32.vec"] = (rng.integers(-1000, 1000, 5).astype(np.int32), None)
    t["bf16.mat"] = (quants.quantize(rng.standard_normal((3, 8)).astype(np.float32), Q.BF16), Q.BF16)
    for qt in (Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1):
        x = rng.standard_normal((2, 64)).astype(np.float32)
        t[f"{qt.name.lower()}.mat"] = (quants.quantize(x, qt), qt)
    for qt, nbytes, f16_offs in ((Q.Q2_K, 84, [80, 82]), (Q.Q3_K, 110, [108]),
                                 (Q.Q4_K, 144, [0, 2]), (Q.Q5_K, 176, [0, 2]),
                                 (Q.Q6_K, 210, [208])):
        raw = rng.integers(0, 256, (2, nbytes), dtype=np.uint8)  # 2 rows of one super-block
        for off in f16_offs:
            raw[:, off:off + 2] = (rng.uniform(0.001, 0.1, 2).astype(np.float16)
                                   .view(np.uint8).reshape(2, 2))
        t[f"{qt.name.lower()}.mat"] = (raw, qt)
    return t


def write_gguf(path, alignment=None):
    w = GGUFWriter(path, arch="testarch")
    if alignment:
        w.add_custom_alignment(alignment)
    for key, val, vt, sub in METADATA:
        w.add_key_value(key, val, vt, sub_type=sub if vt == V.ARRAY and sub != V.ARRAY else None)
    tensors = gguf_tensors()
    for name, (arr, raw) in tensors.items():
        w.add_tensor(name, arr, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


def expect_gguf(path):
    """Tensor expectations from gguf's own reader (independent of ember's parser)."""
    r = GGUFReader(path)
    out = {}
    with open(path, "rb") as f:
        blob = f.read()
    for t in r.tensors:
        ne = [int(x) for x in t.shape]  # GGML order
        data = blob[t.data_offset:t.data_offset + t.n_bytes]
        out[t.name] = {"dtype": EMBER_DTYPE[t.tensor_type], "shape": ne[::-1],
                       "nbytes": int(t.n_bytes), "offset": int(t.data_offset),
                       "fnv1a64": fnv1a64(data)}
    return out


def gguf_metadata(alignment=None):
    md = {"general.architecture": "testarch"}
    if alignment:
        md["general.alignment"] = alignment
    for key, val, _, _ in METADATA:
        md[key] = val
    return md


def expect_safetensors_dir(d, files):
    out = {}
    for fname in files:
        path = os.path.join(d, fname)
        with open(path, "rb") as f:
            blob = f.read()
        n = int.from_bytes(blob[:8], "little")
        header = json.loads(blob[8:8 + n])
        for name, e in header.items():
            if name == "__metadata__":
                continue
            b, end = e["data_offsets"]
            data = blob[8 + n + b:8 + n + end]
            out[name] = {"dtype": {"F32": "f32", "F16": "f16", "BF16": "bf16"}[e["dtype"]],
                         "shape": e["shape"], "nbytes": end - b, "offset": 8 + n + b,
                         "file": fname, "fnv1a64": fnv1a64(data)}
    return out


def make_hf_single(d):
    os.makedirs(d, exist_ok=True)
    tensors = {
        "model.embed_tokens.weight": torch.randn(11, 4, dtype=torch.float32),
        "model.norm.weight": torch.randn(4).to(torch.float16),
        "lm_head.weight": torch.randn(11, 4).to(torch.bfloat16),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(2, 3, 4),
        "scalar": torch.tensor(1.5),
    }
    save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4,
              "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}
    tok = {"bos_token": "<s>", "chat_template": "{{ messages[0]['content'] }}"}
    gen = {"bos_token_id": 1, "eos_token_id": [2, 3], "temperature": 0.6}
    for name, obj in (("config.json", config), ("tokenizer_config.json", tok),
                      ("generation_config.json", gen)):
        with open(os.path.join(d, name), "w") as f:
            json.dump(obj, f, indent=1)
    md = dict(config, tokenizer_config=tok, generation_config=gen)
    return md, expect_safetensors_dir(d, ["model.safetensors"])


def make_hf_sharded(d):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).to(torch.float16)
    model.save_pretrained(d, max_shard_size="6KB", safe_serialization=True)
    for extra in ("generation_config.json",):
        p = os.path.join(d, extra)
        if os.path.exists(p):
            os.remove(p)  # keep this fixture to config + weights
    with open(os.path.join(d, "config.json")) as f:
        md = json.load(f)
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        index = json.load(f)
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 2, shards
    return md, expect_safetensors_dir(d, shards)


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    expected = {}
    p = os.path.join(OUT, "all_types.gguf")
    write_gguf(p)
    expected["all_types.gguf"] = {"version": 3, "metadata": gguf_metadata(),
                                  "tensors": expect_gguf(p)}
    with open(p, "rb") as f:
        blob = bytearray(f.read())
    assert blob[4:8] == (3).to_bytes(4, "little")
    blob[4:8] = (2).to_bytes(4, "little")
    with open(os.path.join(OUT, "all_types_v2.gguf"), "wb") as f:
        f.write(blob)
    expected["all_types_v2.gguf"] = dict(expected["all_types.gguf"], version=2)
    p = os.path.join(OUT, "aligned64.gguf")
    write_gguf(p, alignment=64)
    expected["aligned64.gguf"] = {"version": 3, "metadata": gguf_metadata(64),
                                  "tensors": expect_gguf(p)}
    for t in expected["aligned64.gguf"]["tensors"].values():
        assert t["offset"] % 64 == 0

    md, tensors = make_hf_single(os.path.join(OUT, "hf_single"))
    expected["hf_single"] = {"metadata": md, "tensors": tensors}
    md, tensors = make_hf_sharded(os.path.join(OUT, "hf_sharded"))
    expected["hf_sharded"] = {"metadata": md, "tensors": tensors}

    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, ensure_ascii=False)
    total = 0
    for root, _, files in os.walk(OUT):
        total += sum(os.path.getsize(os.path.join(root, x)) for x in files)
    print(f"wrote {OUT}: {total} bytes")


if __name__ == "__main__":
    main()
