"""Tensor parallel from the command line (`--tensor-parallel-size`, CPU ranks): `ember serve --tp 2`
answers the official `openai` client with the greedy continuation the one-rank offline engine
gives, streams it in the same pieces, and keeps serving after bad requests; `ember run --tp 2`
on a Q4_K model (whose 256-element blocks cannot be cut at the down projection's middle) and
with a rank count that does not divide the heads fails with a message naming why."""
import subprocess

import openai
import pytest

from conftest import ROOT, EmberServer, ember_binary, ember_run_ids

PROMPT = "And Naomi said unto her daughters in law,"


@pytest.fixture(scope="module")
def tp_server(ember_bin, tiny_chat_model):
    srv = EmberServer(tiny_chat_model, "--served-model-name", "tiny", "-t", "2", "--tensor-parallel-size", "2",
                      "--kv-cache-memory", "64MiB", name="tp server").wait_ready()
    yield srv
    assert srv.stop() == 0, srv.log()


def test_served_greedy_equals_one_rank(tp_server, tiny_chat_model, tiny_tokenizer):
    assert any("rank 0 of 2, tensor parallel" in line for line in tp_server.log_lines), tp_server.log()
    reference = ember_run_ids(tiny_chat_model, PROMPT, 24, extra=("--ignore-eos",))
    assert ember_run_ids(tiny_chat_model, PROMPT, 24, extra=("--ignore-eos", "--tp", "2")) == reference
    client = openai.OpenAI(base_url=tp_server.base_url, api_key="unused", max_retries=0, timeout=60)
    want = tiny_tokenizer.decode(reference, skip_special_tokens=True)
    r = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=24, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].text == want
    pieces = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=24, temperature=0, stream=True,
                                       extra_body={"ignore_eos": True})
    assert "".join(c.choices[0].text for c in pieces if c.choices) == want
    # Several sampled requests at once (batched across the ranks), then a bad one: still serving.
    many = client.completions.create(model="tiny", prompt=[PROMPT, "In the beginning"], max_tokens=8, n=3,
                                     temperature=0.8, seed=7)
    assert len(many.choices) == 6 and all(c.text for c in many.choices)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="tiny", prompt=PROMPT, max_tokens=8, temperature=-1)
    assert client.completions.create(model="tiny", prompt=PROMPT, max_tokens=24, temperature=0,
                                     extra_body={"ignore_eos": True}).choices[0].text == want


def run_ember(*args):
    return subprocess.run([str(ember_binary()), *map(str, args)], capture_output=True, text=True, timeout=300)


def test_unsplittable_shapes_are_refused(tmp_path):
    q4k = tmp_path / "llama-q4_k.gguf"
    f16 = ROOT / "tests" / "fixtures" / "models" / "llama_q" / "model-f16.gguf"
    r = run_ember("quantize", "-m", f16, "-o", q4k, "--type", "q4_k", "--pure")
    assert r.returncode == 0, r.stderr[-2000:]
    ok = run_ember("run", "-m", q4k, "--prompt-ids", "1,2,3", "-n", "4", "--temp", "0", "--ids")
    assert ok.returncode == 0, ok.stderr[-2000:]
    r = run_ember("run", "-m", q4k, "--prompt-ids", "1,2,3", "-n", "4", "--temp", "0", "--ids", "--tp", "2")
    assert r.returncode != 0
    assert "(q4_k, blocks of 256) cannot be split for tensor parallelism: a rank's columns [0, 128) are not " \
        "whole blocks" in r.stderr, r.stderr[-2000:]
    r = run_ember("run", "-m", f16, "--prompt-ids", "1,2,3", "-n", "4", "--tp", "3")
    assert r.returncode != 0
    assert "tensor parallel size 3 does not divide the model's 4 attention heads" in r.stderr, r.stderr[-2000:]
