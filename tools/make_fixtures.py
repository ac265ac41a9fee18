"""Makes the model fixtures of the fidelity tests: tiny random-weight models of every
supported architecture, built with Hugging Face transformers, saved as HF directories and as
GGUF (F32 and quantized), with transformers' logits for fixed prompts and its greedy
continuations. Reference logits of a converted variant (bf16/f16 weights, quantized GGUF)
come from transformers run in float32 on the variant's weights (rounded or dequantized by
torch / the gguf package), so every comparison isolates ember's arithmetic.

Run with the tools venv (requirements/tools.txt):
    python tools/make_fixtures.py [--out tests/fixtures/models] [--llama-quantize PATH]
Writes <out>/<name>/{hf/,*.gguf,reference/} and <out>/manifest.json.
"""
import argparse
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import torch
import transformers
from gguf import GGMLQuantizationType as QT

import hf_to_gguf

SEED = 1234
N_GREEDY = 32


def tiny_configs():
    base = dict(vocab_size=384, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    return {
        # Llama 2: multi-head attention, untied, plain rope.
        "llama2": ("llama", dict(base, num_key_value_heads=4)),
        # Llama 3.2: GQA 4:1, tied embeddings, llama3 rope scaling.
        "llama3": ("llama", dict(base, num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=True,
                                 rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0,
                                                      low_freq_factor=1.0, high_freq_factor=4.0,
                                                      original_max_position_embeddings=64))),
        "mistral": ("mistral", dict(base, sliding_window=None, rope_parameters=dict(rope_type="default", rope_theta=1e6))),
        # Qwen2: q/k/v biases, tied, 14 heads over 2 kv heads (GQA 7:1 as in Qwen2.5-0.5B).
        "qwen2": ("qwen2", dict(base, hidden_size=112, num_attention_heads=14, num_key_value_heads=2,
                                tie_word_embeddings=True, rope_parameters=dict(rope_type="default", rope_theta=1e6))),
        # Qwen3: q/k norms, head_dim independent of hidden_size.
        "qwen3": ("qwen3", dict(base, head_dim=32, tie_word_embeddings=True,
                                rope_parameters=dict(rope_type="default", rope_theta=1e6))),
        # Gemma 3: 6 layers (5 sliding of window 4, 1 global), MQA, GeGLU, sandwich norms.
        "gemma3": ("gemma3_text", dict(base, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=1,
                                       head_dim=32, query_pre_attn_scalar=32, sliding_window=4,
                                       rope_parameters={"sliding_attention": dict(rope_type="default", rope_theta=10000.0),
                                                        "full_attention": dict(rope_type="default", rope_theta=1e6)},
                                       tie_word_embeddings=True, bos_token_id=2, eos_token_id=1)),
        # Quantization model: rows of 256 so every block format (incl. k-quants) applies.
        "llama_q": ("llama", dict(base, hidden_size=256, intermediate_size=256, num_attention_heads=4,
                                  num_key_value_heads=2, vocab_size=320)),
    }


def build_model(model_type, kwargs):
    cfg = transformers.AutoConfig.for_model(model_type, **kwargs)
    torch.manual_seed(SEED)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    # Larger weights than the default init, so logits are far from uniform and greedy
    # decoding is not decided by rounding.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_((0.0 if model_type == "gemma3_text" else 1.0) + 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / (p.shape[-1] ** 0.5))
            if name.endswith("embed_tokens.weight") and model_type == "gemma3_text":
                p.mul_(0.125)  # Gemma scales embeddings by sqrt(hidden): keep the residual moderate
    model.eval()
    model.config._attn_implementation = "eager"
    return model


def prompts(vocab):
    rng = np.random.default_rng(SEED)
    return [rng.integers(3, vocab, size=n).tolist() for n in (11, 5)]


@torch.no_grad()
def reference(model, prompt_list, state=None):
    if state is not None:
        model = build_like(model)
        model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()}, strict=False)
        if model.config.tie_word_embeddings:
            model.tie_weights()
    logits, greedy = [], []
    for p in prompt_list:
        ids = torch.tensor([p])
        out = model.generate(ids, max_new_tokens=N_GREEDY, do_sample=False, eos_token_id=None,
                             pad_token_id=0, attention_mask=torch.ones_like(ids))
        greedy.append(out[0, len(p):].tolist())
        # Logits of every position of prompt + continuation (minus its last token) in one
        # forward: the oracle for prefill rows and for each teacher-forced decode step.
        logits.append(model(out[:, :-1]).logits[0].float().numpy())
    return logits, greedy


def build_like(model):
    m = transformers.AutoModelForCausalLM.from_config(model.config, dtype=torch.float32)
    m.eval()
    m.config._attn_implementation = "eager"
    return m


def save_reference(dirpath, prompt_list, logits, greedy):
    dirpath.mkdir(parents=True, exist_ok=True)
    for i, l in enumerate(logits):
        np.save(dirpath / f"logits_{i}.npy", l.astype(np.float32))
    (dirpath / "greedy.json").write_text(json.dumps({"prompts": prompt_list, "greedy": greedy}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/fixtures/models"))
    ap.add_argument("--llama-quantize", default=None, help="llama-quantize binary for k-quant variants")
    args = ap.parse_args()
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    manifest = {"transformers": transformers.__version__, "torch": torch.__version__, "models": {}}
    for name, (model_type, kwargs) in tiny_configs().items():
        model = build_model(model_type, kwargs)
        cfg = json.loads(model.config.to_json_string())
        cfg["model_type"] = model_type
        state = model.state_dict()
        mdir = out / name
        entry = {"arch": model_type, "variants": []}
        ps = prompts(kwargs["vocab_size"])

        # HF float32 (qwen2 is saved sharded to cover model.safetensors.index.json).
        shard = "20KB" if name == "qwen2" else "100GB"
        model.save_pretrained(mdir / "hf", safe_serialization=True, max_shard_size=shard)
        logits, greedy = reference(model, ps)
        save_reference(mdir / "reference" / "f32", ps, logits, greedy)
        entry["variants"].append(dict(name="hf-f32", path="hf", reference="reference/f32", kind="f32"))

        # HF bf16 / f16 weights (llama3, gemma3): reference in f32 on the rounded weights.
        if name in ("llama3", "gemma3"):
            for dt, tdt in (("bf16", torch.bfloat16), ("f16", torch.float16)):
                if name == "gemma3" and dt == "f16":
                    continue
                rounded = {k: v.to(tdt).float().numpy() for k, v in state.items()}
                m2 = build_like(model)
                m2.load_state_dict({k: torch.from_numpy(v) for k, v in rounded.items()})
                m2.to(tdt).save_pretrained(mdir / f"hf-{dt}", safe_serialization=True)
                lg, gr = reference(model, ps, rounded)
                save_reference(mdir / "reference" / dt, ps, lg, gr)
                entry["variants"].append(dict(name=f"hf-{dt}", path=f"hf-{dt}", reference=f"reference/{dt}", kind=dt))

        # GGUF float32 (all but the quantization model, whose GGUFs are quantized).
        if name != "llama_q":
            hf_to_gguf.write_gguf(mdir / "model-f32.gguf", state, cfg, QT.F32)
            entry["variants"].append(dict(name="gguf-f32", path="model-f32.gguf", reference="reference/f32", kind="f32"))
        else:
            qtypes = [QT.F16, QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1]
            for qt in qtypes:
                path = mdir / f"model-{qt.name.lower()}.gguf"
                hf_to_gguf.write_gguf(path, state, cfg, qt)
                add_quant_variant(model, ps, state, cfg, mdir, path, qt.name.lower(), entry)
            if args.llama_quantize:
                f32 = mdir / "tmp-f32.gguf"
                hf_to_gguf.write_gguf(f32, state, cfg, QT.F32)
                for qname in ("Q4_K", "Q5_K", "Q6_K", "Q2_K", "Q3_K"):
                    path = mdir / f"model-{qname.lower()}.gguf"
                    subprocess.run([args.llama_quantize, "--pure", str(f32), str(path), qname], check=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    add_quant_variant(model, ps, state, cfg, mdir, path, qname.lower(), entry)
                f32.unlink()
            shutil.rmtree(mdir / "hf")  # only the GGUF variants are tested for this model
            entry["variants"] = [v for v in entry["variants"] if v["path"] != "hf"]
        manifest["models"][name] = entry
        print(f"{name}: {len(entry['variants'])} variants")
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))


def add_quant_variant(model, ps, state, cfg, mdir, path, qname, entry):
    deq = hf_to_gguf.dequantized_state(path, state, cfg)
    lg, gr = reference(model, ps, deq)
    save_reference(mdir / "reference" / qname, ps, lg, gr)
    entry["variants"].append(dict(name=f"gguf-{qname}", path=path.name, reference=f"reference/{qname}", kind=qname))


if __name__ == "__main__":
    main()
