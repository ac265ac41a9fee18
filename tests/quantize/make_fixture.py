#!/usr/bin/env python3
"""The F32 GGUF of tools/make_fixtures.py's `llama_q` model, the input of `ember quantize`'s tests.

make_fixtures.py writes llama_q only as quantized GGUFs (made by the `gguf` package's
quantizers from the float32 weights). This rebuilds the same float32 weights (same config,
same seed), checks that the gguf package quantizes them to exactly the committed
tests/fixtures/models/llama_q/model-<type>.gguf tensor bytes (so the weights are the same),
and writes them as F32: tests/quantize/data/llama_q-f32.gguf.

Run: /root/.cache/ember-tools-venv/bin/python tests/quantize/make_fixture.py
"""
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import gguf  # noqa: E402
from gguf import GGMLQuantizationType as QT  # noqa: E402

import hf_to_gguf  # noqa: E402
import make_fixtures as mf  # noqa: E402
import json  # noqa: E402


def main():
    model_type, kwargs = mf.tiny_configs()["llama_q"]
    model = mf.build_model(model_type, kwargs)
    cfg = json.loads(model.config.to_json_string())
    cfg["model_type"] = model_type
    state = model.state_dict()
    out = ROOT / "tests/quantize/data/llama_q-f32.gguf"
    out.parent.mkdir(parents=True, exist_ok=True)
    hf_to_gguf.write_gguf(out, state, cfg, QT.F32)
    # The weights must be those of the committed quantized fixtures.
    f32 = {t.name: np.array(t.data) for t in gguf.GGUFReader(str(out)).tensors}
    for qt in (QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1):
        fx = ROOT / f"tests/fixtures/models/llama_q/model-{qt.name.lower()}.gguf"
        for t in gguf.GGUFReader(str(fx)).tensors:
            if t.tensor_type == QT.F32:
                assert np.array_equal(np.array(t.data), f32[t.name]), t.name
                continue
            q = gguf.quants.quantize(f32[t.name], qt)
            assert np.array_equal(q.reshape(-1).view(np.uint8), np.array(t.data).reshape(-1).view(np.uint8)), (qt, t.name)
    print(f"wrote {out}; gguf quantizes it to the committed llama_q fixtures byte for byte")


if __name__ == "__main__":
    main()
