"""Converts a tiny Hugging Face checkpoint (llama, mistral, qwen2, qwen3, gemma3_text) into
GGUF with the `gguf` package, following llama.cpp's conventions: GGUF tensor names, Q/K rows
permuted for llama (interleaved rope), Gemma norms stored as (1 + w), llama3 rope scaling as
a rope_freqs tensor. Used by make_fixtures.py; not a general converter."""
import math

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT

ARCH = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma3_text": "gemma3"}

LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf_name, model_type):
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    if hf_name == "lm_head.weight":
        return "output.weight"
    parts = hf_name.split(".")
    assert parts[0] == "model" and parts[1] == "layers", hf_name
    i, rest = parts[2], ".".join(parts[3:])
    if model_type == "gemma3_text":
        gemma = {"post_attention_layernorm.weight": "post_attention_norm.weight",
                 "pre_feedforward_layernorm.weight": "ffn_norm.weight",
                 "post_feedforward_layernorm.weight": "post_ffw_norm.weight"}
        if rest in gemma:
            return f"blk.{i}.{gemma[rest]}"
    elif rest == "post_attention_layernorm.weight":
        return f"blk.{i}.ffn_norm.weight"
    return f"blk.{i}.{LAYER_NAMES[rest]}"


def permute_qk(w, n_head):
    """HF rotate-half layout -> interleaved pairs, as llama.cpp's converter does for llama."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_qk(w, n_head):
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(cfg):
    rp = cfg["rope_parameters"]
    base, factor = rp["rope_theta"], rp["factor"]
    low, high, old_ctx = rp["low_freq_factor"], rp["high_freq_factor"], rp["original_max_position_embeddings"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    low_wl, high_wl = old_ctx / low, old_ctx / high
    out = []
    for f in freqs:
        wl = 2 * math.pi / f
        if wl < high_wl:
            out.append(1.0)
        elif wl > low_wl:
            out.append(factor)
        else:
            smooth = (old_ctx / wl - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def gguf_tensors(state, cfg):
    """Yields (gguf_name, float32 array) in GGUF layout."""
    mt = cfg["model_type"]
    n_head, n_kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    for name, t in state.items():
        a = t.detach().float().numpy().astype(np.float32)
        if mt == "gemma3_text" and name.endswith("norm.weight"):
            a = a + 1.0
        if ARCH[mt] == "llama" and name.endswith("q_proj.weight"):
            a = permute_qk(a, n_head)
        if ARCH[mt] == "llama" and name.endswith("k_proj.weight"):
            a = permute_qk(a, n_kv)
        if name == "lm_head.weight" and cfg.get("tie_word_embeddings"):
            continue
        yield gguf_name(name, mt), a
    rp = cfg.get("rope_parameters") or {}
    if rp.get("rope_type") == "llama3":
        yield "rope_freqs.weight", llama3_rope_factors(cfg)


def write_gguf(path, state, cfg, qtype=QT.F32):
    mt = cfg["model_type"]
    arch = ARCH[mt]
    w = gguf.GGUFWriter(str(path), arch)
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    w.add_name(f"ember-tiny-{mt}")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg.get("num_key_value_heads", cfg["num_attention_heads"]))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_vocab_size(cfg["vocab_size"])
    rp = cfg.get("rope_parameters") or {}
    if mt == "gemma3_text":
        w.add_rope_freq_base(rp["full_attention"]["rope_theta"])
        w.add_sliding_window(cfg["sliding_window"])
    else:
        w.add_rope_freq_base(rp.get("rope_theta", 10000.0))
    w.add_file_type(int(qtype))
    for name, a in gguf_tensors(state, cfg):
        if a.ndim == 1 or qtype == QT.F32:
            w.add_tensor(name, a)
        else:
            q = gguf.quants.quantize(a, qtype)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def dequantized_state(gguf_path, state, cfg):
    """The HF state dict with every weight replaced by its dequantized GGUF value."""
    mt = cfg["model_type"]
    n_head, n_kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    reader = gguf.GGUFReader(str(gguf_path))
    by_name = {t.name: gguf.quants.dequantize(t.data, t.tensor_type).reshape([int(x) for x in reversed(t.shape)])
               for t in reader.tensors}
    out = {}
    for name, t in state.items():
        gname = gguf_name(name, mt)
        if name == "lm_head.weight" and cfg.get("tie_word_embeddings"):
            gname = "token_embd.weight"
        a = np.array(by_name[gname], dtype=np.float32)
        if mt == "gemma3_text" and name.endswith("norm.weight"):
            a = a - 1.0
        if ARCH[mt] == "llama" and name.endswith("q_proj.weight"):
            a = unpermute_qk(a, n_head)
        if ARCH[mt] == "llama" and name.endswith("k_proj.weight"):
            a = unpermute_qk(a, n_kv)
        out[name] = a.reshape(tuple(t.shape))
    return out
