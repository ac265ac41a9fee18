#!/usr/bin/env python3
"""Writes the tokenizer parity fixtures under tests/fixtures/tokenizer/.

The oracle is Hugging Face: `tokenizers` for tokenizer.json directories and `transformers`
(AutoTokenizer) for GGUF files, which rebuilds a `tokenizers` pipeline from the GGUF metadata.

Writes:
  hard_strings.json          the corpus (bytes as hex, invalid UTF-8 included)
  tiny/<name>/               tiny tokenizers trained here (tokenizer.json + tokenizer_config.json),
                             one per pre-tokenizer / model family
  tiny/<name>.gguf           tokenizer-only GGUF files (metadata, no tensors) built from those
  expected/<name>.json       HF's ids, decoded text and pieces for every corpus string
  expected/real_<name>.json  the same for the real models of scripts/get-models.sh (see REAL_MODELS)

Run with the tools venv: /root/.cache/ember-tools-venv/bin/python tools/make_tokenizer_fixtures.py
Options: --skip-real (only the tiny tokenizers), --only-real.
"""

import argparse
import hashlib
import inspect
import json
import os
import sys
from pathlib import Path

import gguf
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "tokenizer"

# ---------------------------------------------------------------------------------------------
# The corpus. Bytes, not str, so that invalid UTF-8 can be part of it: ember replaces each
# maximal invalid subsequence with U+FFFD before encoding, which is what Python's
# bytes.decode("utf-8", errors="replace") does, so the oracle sees that decoded string.
# ---------------------------------------------------------------------------------------------
CORPUS = [
    ("empty", b""),
    ("single_space", b" "),
    ("hello", b"Hello world"),
    ("leading_space", b" Hello world"),
    ("two_leading_spaces", b"  hi  there"),
    ("trailing_spaces", b"trailing spaces   "),
    ("whitespace_runs", b"a  b   c    d\t\te\n\nf\r\ng \t \n h"),
    ("many_spaces", b"x" + b" " * 40 + b"y"),
    ("only_newlines", b"\n\n\n"),
    ("tabs_code", b"def f(x):\n\treturn x**2  # square\n\n\tpass\n"),
    ("python_code",
     b"import numpy as np\n\nclass Foo(Bar):\n    def __init__(self, n: int = 3) -> None:\n"
     b"        self.items = [i * 2 for i in range(n) if i % 2 == 0]\n"
     b"        print(f\"{self.items!r:>10}\")\n"),
    ("cpp_code", b"template <typename T>\nstd::vector<T> v{1, 2, 3};\nif (a != b && c <= d) { return *p++; }\n"),
    ("json", b"{\"key\": [1, 2.5, -3e10, null, true], \"nested\": {\"a\": \"b\"}}"),
    ("numbers", b"1 12 123 1234 12345 123456 1234567 3.14159 -42 1,000,000 0x1F 1e-9"),
    ("long_digits", b"31415926535897932384626433832795028841971693993751058209749445923078164062862"),
    ("contractions", b"It's we'll they're I've you'd I'm she'd don't"),
    ("contractions_upper", b"IT'S WE'LL THEY'RE I'VE YOU'D I'M DON'T 'S 'll 'RE 'Ll"),
    ("contraction_long_s", "it'\u017f and \u212aelvin '\u212a".encode()),
    ("punctuation", b"Hello!!! What?! ... --- ((()))  [x] <y> {z} @user #tag $5 %20 ^_^ ~/"),
    ("url", b"https://example.com/path?q=1&r=two#frag"),
    ("email", b"someone@example.org, another.one+tag@example.co.uk"),
    ("french", "L'\u00e9t\u00e9 o\u00f9 l'on \u00e9tait \u00e0 No\u00ebl, ma\u00efs cr\u00e8me br\u00fbl\u00e9e".encode()),
    ("german", "Gr\u00fc\u00dfe aus M\u00fcnchen: \u00c4rger \u00fcber Stra\u00dfenbahn".encode()),
    ("russian", "\u041f\u0440\u0438\u0432\u0435\u0442, \u043a\u0430\u043a \u0434\u0435\u043b\u0430? \u0401\u0436\u0438\u043a".encode()),
    ("greek", "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5".encode()),
    ("arabic", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u0661\u0662\u0663".encode()),
    ("hebrew", "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd".encode()),
    ("hindi", "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e \u0967\u0968\u0969".encode()),
    ("thai", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a".encode()),
    ("chinese", "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002".encode()),
    ("japanese", "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c\u3002\u30ab\u30bf\u30ab\u30ca\u3068\u6f22\u5b57\u3002".encode()),
    ("korean", "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4".encode()),
    ("cjk_ext_b", "\U00020000\U0002a6d6 \U00020b9f".encode()),
    ("mixed_scripts", "English, \u0440\u0443\u0441\u0441\u043a\u0438\u0439, \u4e2d\u6587, \u0627\u0644\u0639\u0631\u0628\u064a\u0629 and 123\u4e2d456".encode()),
    ("emoji", "I \u2764\ufe0f tokens \U0001F600\U0001F680\U0001F389".encode()),
    ("emoji_zwj", "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 family, \U0001F3F3\ufe0f\u200d\U0001F308 flag".encode()),
    ("emoji_skin_flags", "\U0001F44B\U0001F3FD \U0001F1FA\U0001F1F8\U0001F1EF\U0001F1F5 \U0001F9D1\u200d\U0001F4BB".encode()),
    ("combining_marks", "e\u0301 a\u0300 n\u0303 Z\u0351\u0352\u0353a\u0300\u0301\u0302l\u0344g\u0305o".encode()),
    ("nfc_vs_nfd", "caf\u00e9 vs cafe\u0301, \u212b vs \u00c5, \ufb01 ligature".encode()),
    ("fullwidth", "\uff28\uff45\uff4c\uff4c\uff4f \uff11\uff12\uff13".encode()),
    ("math_symbols", "\u2200x\u2208\u211d: x\u00b2 \u2265 0 \u2211 \u221e \u2248 \u03c0".encode()),
    ("unicode_spaces", "a\u00a0b\u2003c\u3000d\u200be\u2028f\u0085g\u180eh\ufeffi \u00a0 x".encode()),
    ("control_chars", b"a\x00b\x01c\x7fd\x1b[31mred\x1b[0m"),
    ("special_lookalike_im", b"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
    ("special_partial", b"<|im_start|<|im_end <|endoftext|x <|end|> |im_start|>"),
    ("special_bos_text", b"<bos>Hello<eos> <s> </s> <unk> <pad>"),
    ("special_gemma_turn", b"<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n"),
    ("special_llama3", b"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"),
    ("special_spaced", b"  <|im_start|>  spaced  <|im_end|>  "),
    ("added_tokens", b"x <think>reasoning</think> y [MASK] z [MASK]w a\xc2\xa0[MASK]\xc2\xa0b"),
    ("byte_tokens_text", b"<0x41><0xFF> literal byte-token text"),
    ("invalid_lone_continuation", b"abc\x80def"),
    ("invalid_truncated", b"caf\xc3"),
    ("invalid_overlong", b"\xc0\xafslash \xe0\x80\xaf"),
    ("invalid_surrogate", b"x\xed\xa0\x80y"),
    ("invalid_mixed", b"ok \xff\xfe bad \xe2\x82 euro\xe2\x82\xac \xf0\x9f\x98 end"),
    ("replacement_char", "already \ufffd here".encode()),
    ("long_word", b"Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism"),
    ("repeated_chars", b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!!!!!!!!!!!!!!!!========"),
    ("markdown", b"# Title\n\n* item **bold** _it_ `code`\n\n| a | b |\n|---|---|\n> quote\n"),
    ("mixed_newlines", b"line1\r\nline2\rline3\n\r\n  \n\tend"),
    ("single_char", b"a"),
    ("single_emoji", "\U0001F600".encode()),
    ("apostrophe_variants", "don\u2019t 'quoted' \u201cdouble\u201d it's".encode()),
    ("prefix_space_sentence", b" The quick brown fox jumps over the lazy dog."),
]

# Strings also encoded with parse_special=false (HF: encode_special_tokens=True).
NO_PARSE_SPECIAL = ["special_lookalike_im", "special_bos_text", "special_gemma_turn", "special_llama3",
                    "special_spaced", "added_tokens"]

GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Real model files, as scripts/get-models.sh installs them: $EMBER_MODELS (default
# ~/.cache/ember/models)/<name>/<file>.
REAL_MODELS = {
    "gemma3-270m-q4_k_m": "gemma-3-270m-q4_k_m.gguf",
    "smollm2-135m-instruct-q4_1": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "qwen2.5-coder-0.5b-instruct-q4_k_m": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
}


def training_text():
    """Deterministic, varied text for the tiny tokenizers: Python sources of the stdlib, the corpus."""
    import collections, textwrap, difflib, argparse as ap, json as js  # noqa: E401
    parts = [inspect.getsource(m) for m in (collections, textwrap, difflib, ap, js)]
    words = ("the of and to in is was for on that with as by at from his her they we you it "
             "tokenizer model inference engine server request batch cache attention").split()
    multi = ["L'été où l'on était à Noël", "Grüße aus München", "Привет, как дела? всё хорошо",
             "你好，世界！今天天气很好。我们一起学习。", "こんにちは世界。カタカナと漢字。", "안녕하세요 세계",
             "مرحبا بالعالم", "नमस्ते दुनिया", "Καλημέρα κόσμε", "I ❤️ tokens 😀🚀", "don't can't won't it's"]
    lines = []
    for i in range(400):
        lines.append(" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(12)))
        lines.append(multi[i % len(multi)])
        lines.append(f"{i} {i * 37} {i * 1234567} 3.{i}")
    for _, b in CORPUS:
        lines.append(b.decode("utf-8", errors="replace"))
    return parts + lines


def write_json(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


# ---------------------------------------------------------------------------------------------
# Tiny tokenizers
# ---------------------------------------------------------------------------------------------
BYTE_TOKENS = [f"<0x{i:02X}>" for i in range(256)]


def byte_level_bpe(split_regex, specials, normalizer=None, ignore_merges=False, add_prefix_space=False):
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    if split_regex is None:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split_regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1800, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(), trainer)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    j = json.loads(tok.to_str())
    j["model"]["ignore_merges"] = ignore_merges
    return j


def spm_bpe(normalizer, pre_tokenizer, decoder, train_normalizer):
    """A SentencePiece-style BPE: ▁ for spaces, byte fallback, <unk>/<s>/</s> first, 256 byte tokens."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = train_normalizer
    if pre_tokenizer is not None:
        tok.pre_tokenizer = pre_tokenizer
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    # No stdlib source (keeps lines short), and only characters below U+0400 (Latin, Greek), so
    # that the corpus's other scripts, CJK and emoji go through byte fallback. (limit_alphabet
    # would do it too, but it breaks frequency ties in hash order: the output would not repeat.)
    lines = ["".join(c for c in line if ord(c) < 0x400) for line in training_text()[5:]]
    tok.train_from_iterator(lines, trainer)
    j = json.loads(tok.to_str())
    # Put the byte tokens right after the specials, as SentencePiece vocabularies do.
    old = j["model"]["vocab"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in BYTE_TOKENS:
        vocab[b] = len(vocab)
    for t, _ in sorted(old.items(), key=lambda kv: kv[1]):
        if t not in vocab:
            vocab[t] = len(vocab)
    j["model"]["vocab"] = vocab
    for a in j["added_tokens"]:
        a["id"] = vocab[a["content"]]
    j["normalizer"] = json.loads(Tokenizer(models.BPE()).to_str())["normalizer"]
    tmp = Tokenizer.from_str(json.dumps(j))
    tmp.normalizer = normalizer
    tmp.decoder = decoder
    tmp.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 1)])
    return json.loads(tmp.to_str())


def make_tiny():
    """name -> (tokenizer.json dict, tokenizer_config dict)"""
    out = {}
    chatml = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    out["bpe_gpt2"] = (byte_level_bpe(None, ["<|endoftext|>"]),
                       {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"})
    # <|endoftext|> too: transformers' GGUF path adds it as a new token when a byte-level vocabulary
    # lacks it (GPT-2's default unk), which would give the GGUF fixture an id the file does not have.
    llama3 = byte_level_bpe(LLAMA3_SPLIT, ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                           "<|end_header_id|>", "<|eot_id|>", "<|endoftext|>"],
                            ignore_merges=True)
    out["bpe_llama3"] = (llama3, {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                                  "add_bos_token": True})
    qwen2 = byte_level_bpe(QWEN2_SPLIT, chatml, normalizer=normalizers.NFC())
    out["bpe_qwen2"] = (qwen2, {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"})
    # Added tokens with the flags real vocabularies use: lstrip/rstrip (like [MASK] in many BERT-
    # derived vocabularies), a normalized non-special one and a single_word one.
    t = Tokenizer.from_str(json.dumps(qwen2))
    from tokenizers import AddedToken
    t.add_tokens([AddedToken("<think>", special=False, normalized=False),
                  AddedToken("</think>", special=False, normalized=False)])
    t.add_special_tokens([AddedToken("[MASK]", lstrip=True, rstrip=True, special=True, normalized=False)])
    t.add_tokens([AddedToken("reasoning", single_word=True, normalized=True)])
    out["bpe_qwen2_added"] = (json.loads(t.to_str()), {"eos_token": "<|im_end|>"})

    strip_decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                       decoders.Strip(" ", 1, 0)])
    prepend = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    out["spm_llama2"] = (spm_bpe(prepend, None, strip_decoder, prepend),
                         {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})
    meta = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    out["spm_metaspace"] = (spm_bpe(None, meta, decoders.Metaspace(replacement="▁", prepend_scheme="first",
                                                                   split=False),
                                    normalizers.Sequence([normalizers.Prepend("▁"),
                                                          normalizers.Replace(" ", "▁")])),
                            {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True,
                             "add_eos_token": True})
    gemma_dec = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    out["spm_gemma"] = (spm_bpe(normalizers.Replace(" ", "▁"), None, gemma_dec, normalizers.Replace(" ", "▁")),
                        {"bos_token": "<s>", "eos_token": "</s>"})
    return out


# ---------------------------------------------------------------------------------------------
# Tokenizer-only GGUF files, built from the tiny vocabularies
# ---------------------------------------------------------------------------------------------
def write_gguf(path, arch, model, pre, tokens, types, merges=None, scores=None, bos=None, eos=None, unk=None,
               add_bos=None, add_space_prefix=None, eot=None):
    w = gguf.GGUFWriter(str(path), arch)
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    if scores is not None:
        w.add_token_scores(scores)
    if merges is not None:
        w.add_token_merges(merges)
    if bos is not None:
        w.add_bos_token_id(bos)
    if eos is not None:
        w.add_eos_token_id(eos)
    if eot is not None:
        w.add_eot_token_id(eot)
    if unk is not None:
        w.add_unk_token_id(unk)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    if add_space_prefix is not None:
        w.add_add_space_prefix(add_space_prefix)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tokens_by_id(j):
    vocab = dict(j["model"]["vocab"])
    for a in j["added_tokens"]:
        vocab[a["content"]] = a["id"]
    toks = [None] * (max(vocab.values()) + 1)
    for t, i in vocab.items():
        toks[i] = t
    return toks


def make_tiny_gguf(tiny):
    out = {}
    for name, pre, src in [("gguf_qwen2", "qwen2", "bpe_qwen2"), ("gguf_llama_bpe", "llama-bpe", "bpe_llama3"),
                           ("gguf_gpt2", "gpt-2", "bpe_gpt2")]:
        j = tiny[src][0]
        toks = tokens_by_id(j)
        specials = {a["content"] for a in j["added_tokens"] if a["special"]}
        types = [3 if t in specials else 1 for t in toks]
        merges = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
        bos = toks.index("<|begin_of_text|>") if "<|begin_of_text|>" in toks else toks.index("<|endoftext|>")
        eos = toks.index("<|eot_id|>") if "<|eot_id|>" in toks else toks.index("<|endoftext|>")
        path = OUT / "tiny" / f"{name}.gguf"
        arch = {"qwen2": "qwen2", "llama-bpe": "llama", "gpt-2": "gpt2"}[pre]
        write_gguf(path, arch, "gpt2", pre, toks, types, merges=merges, bos=bos, eos=eos,
                   add_bos=(pre == "llama-bpe"))
        out[name] = path
    for name, arch, src in [("gguf_llama_spm", "llama", "spm_metaspace"), ("gguf_gemma3", "gemma3", "spm_gemma")]:
        j = tiny[src][0]
        toks = tokens_by_id(j)
        types, scores = [], []
        for i, t in enumerate(toks):
            if t == "<unk>":
                types.append(2)
            elif t in ("<s>", "</s>"):
                types.append(3)
            elif t in BYTE_TOKENS:
                types.append(6)
            else:
                types.append(1)
            scores.append(0.0 if types[-1] != 1 else -float(i))
        if arch == "gemma3":
            # Gemma's own special names (GemmaTokenizer adds them as new tokens when absent).
            toks = [{"<s>": "<bos>", "</s>": "<eos>"}.get(t, t) for t in toks] + ["<pad>", "<mask>"]
            types += [3, 3]
            scores += [0.0, 0.0]
            # Gemma files store runs of spaces as real spaces and mark newline runs user-defined.
            toks = [" " * len(t) if len(t) > 1 and set(t) == {"▁"} else t for t in toks]
            types = [4 if ("\n" in t and t.strip() == "") or (len(t) > 1 and set(t) == {" "}) else ty
                     for t, ty in zip(toks, types)]
        path = OUT / "tiny" / f"{name}.gguf"
        write_gguf(path, arch, "llama", "default", toks, types, scores=scores, bos=1, eos=2, unk=0,
                   add_bos=True, add_space_prefix=(arch != "gemma3"), eot=2 if arch == "gemma3" else None)
        out[name] = path
    return out


# ---------------------------------------------------------------------------------------------
# Expected outputs
# ---------------------------------------------------------------------------------------------
def expectations(hf, backend, source):
    """hf: a transformers tokenizer (or None for a bare `tokenizers` one with add_special semantics of
    its post-processor); backend: its tokenizers.Tokenizer."""
    cases = []
    used = set()
    for name, raw in CORPUS:
        text = raw.decode("utf-8", errors="replace")
        if hf is not None:
            ids = hf(text)["input_ids"]
            plain = hf(text, add_special_tokens=False)["input_ids"]
            assert ids == backend.encode(text).ids, (source, name)
        else:
            ids = backend.encode(text).ids
            plain = backend.encode(text, add_special_tokens=False).ids
        case = {
            "name": name,
            "ids": ids,
            "ids_plain": plain,
            "decoded": backend.decode(plain, skip_special_tokens=False),
            "decoded_ids": backend.decode(ids, skip_special_tokens=False),
            "decoded_skip": backend.decode(ids, skip_special_tokens=True),
        }
        if name in NO_PARSE_SPECIAL:
            backend.encode_special_tokens = True
            case["ids_noparse"] = backend.encode(text, add_special_tokens=False).ids
            backend.encode_special_tokens = False
        used.update(ids)
        cases.append(case)
    n = backend.get_vocab_size(with_added_tokens=True)
    sample = sorted(used | set(range(0, n, max(1, n // 300))) | {n - 1})
    specials = sorted(a_id for a_id, a in backend.get_added_tokens_decoder().items() if a.special)
    return {
        "source": source,
        "vocab_size": n,
        "special_ids": specials,
        "pieces": {str(i): backend.id_to_token(i) for i in sample},
        "cases": cases,
    }


def sha256_file(path, limit=1 << 20):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(limit))
    return h.hexdigest()


def find_real(name, file):
    p = Path(os.path.expanduser(os.environ.get("EMBER_MODELS", "~/.cache/ember/models"))) / name / file
    return p if p.exists() else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-real", action="store_true")
    ap.add_argument("--only-real", action="store_true")
    args = ap.parse_args()
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from transformers import AutoTokenizer

    write_json(OUT / "hard_strings.json", [{"name": n, "hex": b.hex(), "text": b.decode("utf-8", errors="replace")}
                                           for n, b in CORPUS])
    if not args.only_real:
        tiny = make_tiny()
        for name, (tj, cfg) in tiny.items():
            d = OUT / "tiny" / name
            d.mkdir(parents=True, exist_ok=True)
            with open(d / "tokenizer.json", "w", encoding="utf-8") as f:
                f.write(json.dumps(tj, ensure_ascii=False, separators=(",", ":")))
            write_json(d / "tokenizer_config.json", cfg)
            hf = AutoTokenizer.from_pretrained(str(d))
            write_json(OUT / "expected" / f"{name}.json",
                       expectations(hf, hf.backend_tokenizer, f"tiny/{name}"))
            print("wrote", name, file=sys.stderr)
        for name, path in make_tiny_gguf(tiny).items():
            hf = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            write_json(OUT / "expected" / f"{name}.json",
                       expectations(hf, hf.backend_tokenizer, f"tiny/{path.name}"))
            print("wrote", name, file=sys.stderr)
    if not args.skip_real:
        for name, file in REAL_MODELS.items():
            path = find_real(name, file)
            if path is None:
                print(f"real model {name}: {file} not found (run scripts/get-models.sh); fixture left as it is",
                      file=sys.stderr)
                continue
            hf = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            exp = expectations(hf, hf.backend_tokenizer, f"{name}/{file}")
            exp["model"] = name
            exp["file"] = file
            exp["sha256_first_mib"] = sha256_file(path)
            write_json(OUT / "expected" / f"real_{name}.json", exp)
            print("wrote real", name, file=sys.stderr)


if __name__ == "__main__":
    main()
