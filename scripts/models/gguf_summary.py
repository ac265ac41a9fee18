#!/usr/bin/env python3
"""Print a one-screen summary of a GGUF file: architecture, name, sizes, tensor types.

    python3 scripts/models/gguf_summary.py FILE.gguf [--json]

Needs the `gguf` package (requirements/test.txt).
"""
import collections
import json
import sys

import gguf

KEYS = ("general.architecture", "general.name", "general.basename", "general.size_label",
        "general.file_type", "general.license", "general.finetune", "general.quantized_by")
ARCH_KEYS = ("context_length", "embedding_length", "block_count", "feed_forward_length",
             "attention.head_count", "attention.head_count_kv", "attention.key_length",
             "attention.sliding_window", "rope.freq_base", "vocab_size")


def field_value(field):
    if not field.types:
        return None
    t = field.types[0]
    if t == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8", "replace")
    if t == gguf.GGUFValueType.ARRAY:
        return f"[array of {len(field.data)}]"
    return field.parts[field.data[0]].tolist()[0]


def summary(path):
    r = gguf.GGUFReader(path)
    out = {"file": path, "gguf_version": None, "metadata": {}, "tensor_count": len(r.tensors)}
    arch = None
    for f in r.fields.values():
        if f.name == "GGUF.version":
            out["gguf_version"] = field_value(f)
        if f.name == "general.architecture":
            arch = field_value(f)
    for k in KEYS + tuple(f"{arch}.{a}" for a in ARCH_KEYS) + ("tokenizer.ggml.model", "tokenizer.ggml.pre"):
        if k in r.fields:
            out["metadata"][k] = field_value(r.fields[k])
    if "tokenizer.ggml.tokens" in r.fields:
        out["metadata"]["n_vocab"] = len(r.fields["tokenizer.ggml.tokens"].data)
    out["metadata"]["has_chat_template"] = "tokenizer.chat_template" in r.fields
    types = collections.Counter(t.tensor_type.name for t in r.tensors)
    out["tensor_types"] = dict(sorted(types.items()))
    out["n_params"] = int(sum(int(t.n_elements) for t in r.tensors))
    return out


if __name__ == "__main__":
    s = summary(sys.argv[1])
    if "--json" in sys.argv:
        print(json.dumps(s, indent=1))
    else:
        print(f"{s['file']}: GGUF v{s['gguf_version']}, {s['tensor_count']} tensors, "
              f"{s['n_params']/1e6:.1f}M params")
        for k, v in s["metadata"].items():
            print(f"  {k} = {v}")
        print("  tensor types: " + ", ".join(f"{k} x{v}" for k, v in s["tensor_types"].items()))
