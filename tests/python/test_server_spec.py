"""Speculative decoding through `ember serve` and the official `openai` client: with n-gram
drafts (`--spec-ngram`) the server streams several tokens a step, and what it returns equals the
offline engine without drafts (`ember run`, both with `--batch-invariant`, so that a step of
several rows computes the bits a one-row step does): greedy, streamed, stopped by a string,
with logprobs, and seeded sampling (against a server without drafts). The tiny fixture model and a prompt that repeats itself, so
that drafts are proposed; /metrics counts them."""
import openai
import pytest

from conftest import EmberServer, ember_run_ids

PROMPT = "one two three four five, one two three four five, one two three four five, one two"


@pytest.fixture(scope="module")
def spec_server(ember_bin, tiny_chat_model):
    srv = EmberServer(tiny_chat_model, "--served-model-name", "tiny", "-t", "2", "--kv-cache-memory", "64MiB",
                      "--spec-ngram", "3", "--batch-invariant", name="spec server").wait_ready()
    yield srv
    assert srv.stop() == 0, srv.log()


@pytest.fixture(scope="module")
def client(spec_server):
    return openai.OpenAI(base_url=spec_server.base_url, api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def reference(tiny_chat_model):
    ids = ember_run_ids(tiny_chat_model, PROMPT, 48, extra=("--ignore-eos", "--batch-invariant"))
    assert len(ids) == 48
    return ids


def text_of(tok, ids):
    return tok.decode(ids, skip_special_tokens=True)


def test_greedy_equals_the_engine_without_drafts(client, tiny_tokenizer, reference):
    r = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=48, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].text == text_of(tiny_tokenizer, reference)
    assert r.usage.completion_tokens == 48


def test_streamed_text_and_logprobs(client, tiny_tokenizer, reference):
    chunks = list(client.completions.create(model="tiny", prompt=PROMPT, max_tokens=30, temperature=0, stream=True,
                                            logprobs=2, extra_body={"ignore_eos": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == text_of(tiny_tokenizer, reference[:30])
    # One logprob entry a token, however many tokens a chunk carried.
    n_logprobs = sum(len(c.choices[0].logprobs.tokens) for c in chunks if c.choices and c.choices[0].logprobs)
    assert n_logprobs == 30


def test_stop_string_inside_a_multi_token_step(client, tiny_tokenizer, reference):
    full = text_of(tiny_tokenizer, reference)
    stop = full[len(full) // 2:len(full) // 2 + 3]
    if not stop.strip():
        pytest.skip("the reference's middle is whitespace")  # (never with the fixture's reference)
    r = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=48, temperature=0, stop=[stop],
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].text == full[:full.index(stop)]
    assert r.choices[0].finish_reason == "stop"


def test_seeded_sampling_equals_a_server_without_drafts(client, tiny_chat_model):
    # (the server seeds a request's stream its own way, so the peer is a server too)
    plain = EmberServer(tiny_chat_model, "--served-model-name", "tiny", "-t", "2", "--kv-cache-memory", "64MiB",
                        "--batch-invariant", name="plain server").wait_ready()
    try:
        peer = openai.OpenAI(base_url=plain.base_url, api_key="unused", max_retries=0, timeout=60)
        for seed in (11, 12):
            args = dict(model="tiny", prompt=PROMPT, max_tokens=32, temperature=0.7, seed=seed, n=2,
                        extra_body={"ignore_eos": True})
            want = [c.text for c in peer.completions.create(**args).choices]
            got = [c.text for c in client.completions.create(**args).choices]
            assert got == want
            assert want[0] != want[1]
    finally:
        assert plain.stop() == 0, plain.log()


def test_metrics_count_drafts(spec_server, client):
    import urllib.request
    client.completions.create(model="tiny", prompt=PROMPT, max_tokens=16, temperature=0,
                              extra_body={"ignore_eos": True})
    body = urllib.request.urlopen(spec_server.url + "/metrics", timeout=30).read().decode()
    values = {line.split()[0]: float(line.split()[1]) for line in body.splitlines()
              if line.startswith("ember_spec_")}
    assert values["ember_spec_draft_tokens_total"] > 0
    assert 0 <= values["ember_spec_accepted_tokens_total"] <= values["ember_spec_draft_tokens_total"]
