#!/usr/bin/env python3
"""PyTorch baselines for whole-model decode and prefill at Llama-3-8B shapes (bf16, random
weights), beside `ember bench speed --device cuda` in the same run.

  - copy: device-to-device copy bandwidth (bytes read + written), the roofline's ceiling;
  - torch-eager / torch-graph: a plain PyTorch decode loop (F.linear, F.rms_norm, RoPE, a static
    KV cache, SDPA over the cache with a mask), eager and with each decode step captured in a
    CUDA graph (torch.cuda.CUDAGraph); the next token is fed back on the GPU (no host sync per
    token, unlike ember's sampler, which reads the logits every step);
  - torch-compile (--compile): the same step through torch.compile(mode="reduce-overhead"),
    which captures CUDA graphs of the compiled step: the weights and the K/V cache are
    registered buffers of nn.Modules, so the in-place cache writes keep the graphs (with the
    cache as a plain tensor inductor skipped them: "mutated inputs", 59.5 tok/s on an H200);
  - transformers (--hf): LlamaForCausalLM.generate, greedy, eager, dynamic cache; and
    (--hf-static) with cache_implementation="static", which generate compiles itself
    (torch.compile of the forward with CUDA graphs, its own compile_config);
  - prefill: one forward pass over a 4096-token prompt (SDPA causal), i.e. time to first token.
Decode: 128-token prompt, then 256 greedy steps, tokens/s of the steps. Prints RESULT| lines.
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F

CFG = dict(d=4096, f=14336, heads=32, kv_heads=8, hd=128, vocab=128256, theta=500000.0, eps=1e-5)


def result(group, name, value, unit, note=""):
    print(f"RESULT|{group}|{name}|{value:.3f}|{unit}|{note}", flush=True)


def rand(rows, cols, g):
    lim = 1.0 / math.sqrt(cols)
    return torch.empty(rows, cols, dtype=torch.bfloat16, device="cuda").uniform_(-lim, lim, generator=g)


class Layer(torch.nn.Module):
    """One decoder layer's weights and its K/V cache, all registered buffers: torch.compile's
    CUDA graphs (mode="reduce-overhead") treat buffers as static, so writing the cache in place
    keeps the graph (a mutated plain tensor input makes inductor skip CUDA graphs)."""

    def __init__(self, g, max_len):
        super().__init__()
        c = CFG
        d, f, hd = c["d"], c["f"], c["hd"]
        self.register_buffer("n1", torch.ones(d, dtype=torch.bfloat16, device="cuda"))
        self.register_buffer("n2", torch.ones(d, dtype=torch.bfloat16, device="cuda"))
        for name, rows, cols in [("wq", c["heads"] * hd, d), ("wk", c["kv_heads"] * hd, d),
                                 ("wv", c["kv_heads"] * hd, d), ("wo", d, c["heads"] * hd),
                                 ("wg", f, d), ("wu", f, d), ("wd", d, f)]:
            self.register_buffer(name, rand(rows, cols, g))
        self.register_buffer("k", torch.zeros(1, c["kv_heads"], max_len, hd, dtype=torch.bfloat16, device="cuda"))
        self.register_buffer("v", torch.zeros_like(self.k))


class Llama(torch.nn.Module):
    def __init__(self, layers, max_len):
        super().__init__()
        c = CFG
        g = torch.Generator(device="cuda").manual_seed(0)
        d, hd = c["d"], c["hd"]
        self.register_buffer("embed", rand(c["vocab"], d, g))
        self.register_buffer("lm_head", rand(c["vocab"], d, g))
        self.register_buffer("norm", torch.ones(d, dtype=torch.bfloat16, device="cuda"))
        self.layers = torch.nn.ModuleList([Layer(g, max_len) for _ in range(layers)])
        self.max_len = max_len
        inv = 1.0 / (c["theta"] ** (torch.arange(0, hd, 2, device="cuda", dtype=torch.float32) / hd))
        ang = torch.arange(max_len, device="cuda", dtype=torch.float32)[:, None] * inv[None, :]
        self.register_buffer("cos", torch.cat([ang.cos(), ang.cos()], -1).to(torch.bfloat16))
        self.register_buffer("sin", torch.cat([ang.sin(), ang.sin()], -1).to(torch.bfloat16))

    @staticmethod
    def rope(x, cos, sin):  # x [1, h, T, hd]
        h = x.shape[-1] // 2
        rot = torch.cat([-x[..., h:], x[..., :h]], -1)
        return x * cos + rot * sin

    def forward(self, tokens, pos, last_only=True):
        """tokens [T] at positions pos [T] (contiguous); the cache holds positions < pos[0]."""
        c = CFG
        T = tokens.shape[0]
        x = self.embed[tokens][None]  # [1, T, d]
        cos, sin = self.cos[pos][None, None], self.sin[pos][None, None]
        decode = T == 1
        if decode:
            mask = (torch.arange(self.max_len, device="cuda") <= pos[0])[None, None, None, :]
        for L in self.layers:
            h = F.rms_norm(x, (c["d"],), L.n1, c["eps"])
            q = F.linear(h, L.wq).view(1, T, c["heads"], c["hd"]).transpose(1, 2)
            k = F.linear(h, L.wk).view(1, T, c["kv_heads"], c["hd"]).transpose(1, 2)
            v = F.linear(h, L.wv).view(1, T, c["kv_heads"], c["hd"]).transpose(1, 2)
            q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
            L.k.index_copy_(2, pos, k)
            L.v.index_copy_(2, pos, v)
            if decode:
                o = F.scaled_dot_product_attention(q, L.k, L.v, attn_mask=mask, enable_gqa=True)
            else:  # prefill of a whole prompt from position 0
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            x = x + F.linear(o.transpose(1, 2).reshape(1, T, -1), L.wo)
            h = F.rms_norm(x, (c["d"],), L.n2, c["eps"])
            x = x + F.linear(F.silu(F.linear(h, L.wg)) * F.linear(h, L.wu), L.wd)
        if last_only:
            x = x[:, -1:]
        return F.linear(F.rms_norm(x, (c["d"],), self.norm, c["eps"]), self.lm_head)


def events_ms(fn, reps):
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def copy_bandwidth():
    src = torch.rand((2 << 30) // 4, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    ms = events_ms(lambda: dst.copy_(src), 7)
    result("ceiling", "torch d2d copy 2 GiB (read+write)", 2 * src.numel() * 4 / (ms * 1e-3) / 1e9, "GB/s")


def decode(model, n_prompt, n_gen, mode):
    prompt = torch.randint(100, 20000, (n_prompt,), device="cuda")
    tok = torch.zeros(1, dtype=torch.long, device="cuda")
    pos = torch.zeros(1, dtype=torch.long, device="cuda")
    step = lambda: model.forward(tok, pos)
    if mode == "compile":
        compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)  # the module: buffers stay static
        step = lambda: compiled(tok, pos)
    run = step
    if mode == "graph":
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = step()
        run = lambda: (g.replay(), out)[1]
    rates = []
    for rep in range(3 if mode != "eager" else 2):
        model.forward(prompt, torch.arange(n_prompt, device="cuda"))
        tok.copy_(prompt[-1:])
        if mode == "compile" and rep == 0:  # compile (and its graph) outside the timing
            for p in range(n_prompt, n_prompt + 3):
                pos.fill_(p)
                run()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for p in range(n_prompt, n_prompt + n_gen):
            pos.fill_(p)
            logits = run()
            tok.copy_(logits[0, -1].argmax().view(1))
        torch.cuda.synchronize()
        rates.append(n_gen / (time.perf_counter() - t0))
    rates.sort()
    result("decode", f"torch-{mode} Llama-3-8B bf16 batch 1, p{n_prompt} + {n_gen} steps",
           rates[len(rates) // 2], "tok/s")


def prefill(model, n):
    prompt = torch.randint(100, 20000, (n,), device="cuda")
    posv = torch.arange(n, device="cuda")
    fn = lambda: model.forward(prompt, posv)
    for _ in range(2):
        fn()
    ms = events_ms(fn, 5)
    result("prefill", f"torch prefill {n} tokens (time to first token)", ms, "ms", f"{n / ms * 1e3:.0f} tok/s")


def transformers_generate(n_prompt, n_gen, layers, static=False):
    from transformers import LlamaConfig, LlamaForCausalLM
    c = CFG
    cfg = LlamaConfig(hidden_size=c["d"], intermediate_size=c["f"], num_attention_heads=c["heads"],
                      num_key_value_heads=c["kv_heads"], head_dim=c["hd"], vocab_size=c["vocab"],
                      num_hidden_layers=layers, rope_theta=c["theta"], rms_norm_eps=c["eps"],
                      max_position_embeddings=8192, tie_word_embeddings=False)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).eval()
    torch.set_default_dtype(torch.float32)
    ids = torch.randint(100, 20000, (1, n_prompt), device="cuda")
    kw = dict(max_new_tokens=n_gen, min_new_tokens=n_gen, do_sample=False, eos_token_id=None, pad_token_id=0)
    if static:
        kw["cache_implementation"] = "static"
    with torch.no_grad():
        t0 = time.perf_counter()
        # (static: the same lengths as the timed runs, so the compiled graphs are reused)
        model.generate(ids, **(kw if static else dict(kw, max_new_tokens=8, min_new_tokens=8)))
        warm_s = time.perf_counter() - t0
        rates = []
        for _ in range(2):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model.generate(ids, **kw)
            torch.cuda.synchronize()
            rates.append(n_gen / (time.perf_counter() - t0))
    how = "static cache, compiled by generate" if static else "eager"
    result("decode", f"transformers generate ({how}) Llama-3-8B bf16 batch 1, p{n_prompt} + {n_gen}",
           max(rates), "tok/s", f"includes the 128-token prefill; first call {warm_s:.0f} s")
    del model
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--hf", action="store_true")
    ap.add_argument("--hf-static", action="store_true")
    ap.add_argument("--prefill", type=int, default=4096)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
    copy_bandwidth()
    with torch.no_grad():
        model = Llama(args.layers, max(512, args.prefill))
        for mode in ["graph", "eager"] + (["compile"] if args.compile else []):
            try:
                decode(model, 128, 256, mode)
            except Exception as e:  # keep the other numbers
                print(f"torch decode {mode} failed: {e}", flush=True)
        prefill(model, args.prefill)
        del model
        torch.cuda.empty_cache()
    for static, wanted in ((False, args.hf), (True, args.hf_static)):
        if not wanted:
            continue
        try:
            transformers_generate(128, 256, args.layers, static)
        except Exception as e:
            print(f"transformers (static={static}) failed: {type(e).__name__}: {e}", flush=True)


if __name__ == "__main__":
    main()
