"""`ember serve` through the official `openai` Python client (issue 6): completions, chat,
streaming, n > 1, stop strings, logprobs, echo, seeds, logit_bias and errors as the client's
own exception types. Most tests use the tiny fixture model (fast, exact references from the
offline engine); a few check realistic behaviour on Gemma 3 270M."""
import json
import socket

import openai
import pytest

from conftest import EmberServer, ember_run_ids, real_model_path

PROMPT = "And Naomi said unto her daughters in law,"


@pytest.fixture(scope="module")
def client(tiny_server):
    return openai.OpenAI(base_url=tiny_server.base_url, api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def reference(tiny_chat_model, tiny_tokenizer):
    """Greedy continuation of PROMPT by the offline engine (`ember run`), as ids and text."""
    ids = ember_run_ids(tiny_chat_model, PROMPT, 40, extra=("--ignore-eos",))
    assert len(ids) == 40
    return ids


def text_of(tok, ids):
    return tok.decode(ids, skip_special_tokens=True)


def test_models(client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["tiny"]


def test_completion_equals_offline_engine(client, tiny_tokenizer, reference):
    r = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=40, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.object == "text_completion"
    assert r.id.startswith("cmpl-")
    assert r.model == "tiny"
    assert r.choices[0].text == text_of(tiny_tokenizer, reference)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == len(tiny_tokenizer.encode(PROMPT).ids)
    assert r.usage.completion_tokens == 40
    assert r.usage.total_tokens == r.usage.prompt_tokens + 40


def test_completion_default_max_tokens_is_16(client):
    r = client.completions.create(model="tiny", prompt=PROMPT, temperature=0, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 16


def test_completion_token_prompt_and_batch(client, tiny_tokenizer, reference):
    ids = tiny_tokenizer.encode(PROMPT).ids
    r = client.completions.create(model="tiny", prompt=[ids, ids[:5]], max_tokens=10, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert [c.index for c in r.choices] == [0, 1]
    assert r.choices[0].text == text_of(tiny_tokenizer, reference[:10])
    assert r.usage.prompt_tokens == len(ids) + 5
    assert r.usage.completion_tokens == 20


def test_streaming_completion(client, tiny_tokenizer, reference):
    stream = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=25, temperature=0, stream=True,
                                       stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == text_of(tiny_tokenizer, reference[:25])
    assert len([c for c in chunks if c.choices]) > 5  # really streamed, not one lump
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 25
    assert all(c.usage is None for c in chunks[:-1])


def test_chat_and_chat_streaming(client, tiny_server):
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Whither thou goest?"}]
    r = client.chat.completions.create(model="tiny", messages=messages, max_tokens=20, temperature=0,
                                       extra_body={"ignore_eos": True})
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert r.usage.completion_tokens == 20
    # The prompt is the ChatML template applied to the messages.
    status, tk = tiny_server.post("/tokenize", {"messages": messages})
    assert status == 200 and r.usage.prompt_tokens == tk["count"]
    stream = client.chat.completions.create(model="tiny", messages=messages, max_tokens=20, temperature=0,
                                            stream=True, extra_body={"ignore_eos": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == r.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "length"


def test_chat_text_parts_equal_string_content(client):
    a = client.chat.completions.create(model="tiny", max_tokens=8, temperature=0, messages=[
        {"role": "user", "content": "one\ntwo"}])
    b = client.chat.completions.create(model="tiny", max_tokens=8, temperature=0, messages=[
        {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}])
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.usage.prompt_tokens == b.usage.prompt_tokens


def test_n_samples_with_seed(client):
    kw = dict(model="tiny", prompt=PROMPT, max_tokens=12, temperature=1.0, n=4, seed=1234,
              extra_body={"ignore_eos": True})
    r1 = client.completions.create(**kw)
    r2 = client.completions.create(**kw)
    assert [c.index for c in r1.choices] == [0, 1, 2, 3]
    assert [c.text for c in r1.choices] == [c.text for c in r2.choices]  # seeded: reproducible
    assert len({c.text for c in r1.choices}) > 1  # the samples differ from each other
    assert r1.usage.completion_tokens == 48
    assert r1.usage.prompt_tokens == r2.usage.prompt_tokens
    s = client.completions.create(**kw, stream=True)
    texts = ["", "", "", ""]
    for c in s:
        for ch in c.choices:
            texts[ch.index] += ch.text
    assert texts == [c.text for c in r1.choices]
    other = client.completions.create(**{**kw, "seed": 99})
    assert [c.text for c in other.choices] != [c.text for c in r1.choices]


def test_chat_n(client):
    r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], n=3,
                                       max_tokens=5, temperature=0.9, seed=5, extra_body={"ignore_eos": True})
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert r.usage.completion_tokens == 15


def stop_across_tokens(tok, ids):
    """A 4-character stop string of the greedy text that starts in one token and ends in a later
    one (and does not occur earlier): (stop, text before it)."""
    full = tok.decode(ids, skip_special_tokens=True)
    for i in range(1, len(ids)):
        b = len(tok.decode(ids[:i], skip_special_tokens=True))  # a token boundary
        cand = full[b - 2:b + 2]
        if b >= 2 and len(cand) == 4 and cand.isascii() and cand not in full[:b + 1]:
            return cand, full[:b - 2]
    raise AssertionError(f"no usable stop string in {full!r}")


def test_stop_strings_trimmed_across_tokens(client, tiny_tokenizer, reference):
    stop, expected = stop_across_tokens(tiny_tokenizer, reference)
    for stream in (False, True):
        r = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=40, temperature=0, stop=[stop, "zzzz"],
                                      stream=stream, extra_body={"ignore_eos": True})
        chunks = list(r) if stream else [r]
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        assert text == expected, (stop, text)
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    r = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=40, temperature=0, stop=stop,
                                  extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens < 40


def test_streamed_text_never_contains_a_stop_prefix_that_later_completes(client, tiny_tokenizer, reference):
    """Held-back text: each chunk as it arrives is already final (a prefix of the answer)."""
    stop, expected = stop_across_tokens(tiny_tokenizer, reference)
    seen = ""
    for c in client.completions.create(model="tiny", prompt=PROMPT, max_tokens=40, temperature=0, stop=stop,
                                       stream=True, extra_body={"ignore_eos": True}):
        seen += c.choices[0].text
        assert expected.startswith(seen), (seen, expected)


def test_completion_logprobs(client, tiny_tokenizer, reference):
    r = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=6, temperature=0, logprobs=3,
                                  extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 6
    assert "".join(lp.tokens) == r.choices[0].text
    for tok, val, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert val <= 0 and len(top) == 3
        # Greedy: the sampled token is the most likely one.
        assert max(top.values()) == pytest.approx(val, abs=1e-5)
    assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[0] == 0


def test_chat_logprobs_and_streamed_logprobs(client):
    kw = dict(model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=5, temperature=0,
              logprobs=True, top_logprobs=2, extra_body={"ignore_eos": True})
    r = client.chat.completions.create(**kw)
    content = r.choices[0].logprobs.content
    assert len(content) == 5
    for e in content:
        assert e.logprob <= 0 and len(e.top_logprobs) == 2 and isinstance(e.bytes, list)
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob
    streamed = []
    for c in client.chat.completions.create(**kw, stream=True):
        if c.choices and c.choices[0].logprobs:
            streamed += c.choices[0].logprobs.content
    assert [e.token for e in streamed] == [e.token for e in content]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in content])
    assert client.chat.completions.create(**{**kw, "logprobs": False, "top_logprobs": None}).choices[0].logprobs is None


def test_echo(client, tiny_tokenizer, reference):
    r = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=5, temperature=0, echo=True,
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].text == PROMPT + text_of(tiny_tokenizer, reference[:5])
    s = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=5, temperature=0, echo=True, stream=True,
                                  extra_body={"ignore_eos": True})
    assert "".join(c.choices[0].text for c in s) == r.choices[0].text


def test_logit_bias_forces_a_token(client, tiny_tokenizer):
    target = tiny_tokenizer.token_to_id("Ġthe") or 300
    r = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=5, temperature=0,
                                  logit_bias={str(target): 100}, extra_body={"ignore_eos": True})
    assert r.choices[0].text == tiny_tokenizer.decode([target] * 5)


def test_penalties_and_sampling_knobs_accepted(client):
    r = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=8, temperature=0.8, top_p=0.9,
                                  presence_penalty=0.5, frequency_penalty=0.5, seed=3, user="tester",
                                  extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.2,
                                              "ignore_eos": True})
    assert r.usage.completion_tokens == 8


def test_errors_are_client_exceptions(client, tiny_server):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt=PROMPT, temperature=5)
    assert e.value.status_code == 400 and "temperature" in e.value.message
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="tiny", prompt=PROMPT, extra_body={"top_p": "high"})
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="tiny", prompt=PROMPT, n=0)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="tiny", prompt=[[1, 2, 100000]])
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="tiny", messages=[{"role": "wizard", "content": "x"}])
    with pytest.raises(openai.BadRequestError) as e:  # longer than the 256-token context
        client.completions.create(model="tiny", prompt=PROMPT * 40)
    assert "context length" in e.value.message
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="tiny", prompt=PROMPT, max_tokens=250)
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="gpt-4o", prompt=PROMPT)
    assert e.value.status_code == 404 and e.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    # Not reachable through the client: malformed JSON, wrong content.
    status, body = tiny_server.post("/v1/completions", b'{"prompt": "x",')
    assert status == 400 and "not valid JSON" in body["error"]["message"]
    status, body = tiny_server.post("/v1/completions", b'["prompt"]')
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    status, body = tiny_server.post("/v1/completions", b"\xff\xfe")
    assert status == 400
    status, body = tiny_server.get("/v1/nothing")
    assert status == 404 and "error" in body


def test_raw_http_edge_cases(tiny_server):
    """Bytes no client library would send must not hurt the server."""
    def raw(payload: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", tiny_server.port), timeout=10) as s:
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
            out = b""
            while chunk := s.recv(65536):
                out += chunk
            return out
    assert raw(b"GARBAGE\r\n\r\n").startswith(b"HTTP/1.1 400")
    big = b'{"prompt": "' + b"a" * 40_000_000 + b'"}'
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    resp = raw(head + b"Content-Length: %d\r\n\r\n" % len(big) + big[:1000])
    assert resp.startswith(b"HTTP/1.1 413")
    resp = raw(head + b"Content-Length: 5\r\n\r\n{\"pr")  # body shorter than announced
    assert resp == b"" or resp.startswith(b"HTTP/1.1 400")
    status, _ = tiny_server.get("/health")
    assert status == 200


def test_tokenize_detokenize(tiny_server, tiny_tokenizer):
    status, r = tiny_server.post("/tokenize", {"prompt": PROMPT})
    assert status == 200
    assert r["tokens"] == tiny_tokenizer.encode(PROMPT).ids
    assert r["count"] == len(r["tokens"]) and r["max_model_len"] == 256
    status, r2 = tiny_server.post("/tokenize", {"prompt": PROMPT, "add_special_tokens": False,
                                                "return_token_strs": True})
    assert r2["tokens"] == r["tokens"][1:] and len(r2["token_strs"]) == len(r2["tokens"])
    status, d = tiny_server.post("/detokenize", {"tokens": r2["tokens"]})
    assert status == 200 and d["prompt"] == PROMPT
    status, e = tiny_server.post("/detokenize", {"tokens": [100000]})
    assert status == 400 and e["error"]["param"] == "tokens"


def test_metrics_exposition(tiny_server, client):
    client.completions.create(model="tiny", prompt=PROMPT, max_tokens=3, temperature=0)
    m = tiny_server.metrics()
    for name in ("ember_num_requests_running", "ember_num_requests_waiting", "ember_kv_blocks_used",
                 "ember_kv_blocks_total", "ember_prefix_cache_hit_rate", "ember_prompt_tokens_total",
                 "ember_generation_tokens_total", "ember_num_preemptions_total",
                 "ember_time_to_first_token_seconds_count", "ember_inter_token_latency_seconds_count",
                 "ember_e2e_request_latency_seconds_count"):
        assert name in m, name
    assert m["ember_time_to_first_token_seconds_count"] >= 1
    assert m["ember_generation_tokens_total"] >= 3
    assert m['ember_http_requests_total{route="/v1/completions",status="200"}'] >= 1


def test_api_key(ember_bin, tiny_chat_model):
    srv = EmberServer(tiny_chat_model, "--api-key", "sk-test", "--served-model-name", "tiny", "-t", "1",
                      "--kv-cache-memory", "16MiB", name="api-key server").wait_ready()
    try:
        bad = openai.OpenAI(base_url=srv.base_url, api_key="sk-wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as e:
            bad.completions.create(model="tiny", prompt="x", max_tokens=1)
        assert e.value.status_code == 401
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
        good = openai.OpenAI(base_url=srv.base_url, api_key="sk-test", max_retries=0)
        assert good.completions.create(model="tiny", prompt="x", max_tokens=2).usage.completion_tokens >= 1
        assert srv.get("/health")[0] == 200  # probes need no key
    finally:
        assert srv.stop() == 0


# ---- Real models: Gemma 3 270M (the default model; a base model without a chat template) for
# completions, SmolLM2 135M Instruct (chat template in its GGUF) for chat. ----

@pytest.fixture(scope="module")
def gemma(gemma_server):
    return openai.OpenAI(base_url=gemma_server.base_url, api_key="unused", max_retries=0, timeout=300)


def test_gemma_completion_is_sensible(gemma):
    r = gemma.completions.create(model="gemma-3-270m", prompt="The Eiffel Tower is located in the city of",
                                 max_tokens=8, temperature=0)
    assert r.choices[0].text.startswith(" Paris")


def test_gemma_equals_offline_engine_streaming_or_not(gemma, gemma_server, gemma_path):
    prompt = "The three primary colors are"
    ids = ember_run_ids(gemma_path, prompt, 24, extra=("--ignore-eos",))
    status, d = gemma_server.post("/detokenize", {"tokens": ids})
    assert status == 200
    kw = dict(model="gemma-3-270m", prompt=prompt, max_tokens=24, temperature=0, extra_body={"ignore_eos": True})
    r = gemma.completions.create(**kw)
    assert r.choices[0].text == d["prompt"]
    assert "".join(c.choices[0].text for c in gemma.completions.create(**kw, stream=True)) == d["prompt"]


def test_gemma_stop_and_logprobs(gemma):
    r = gemma.completions.create(model="gemma-3-270m", prompt="Question: What is the capital of France?\nAnswer:",
                                 max_tokens=20, temperature=0, stop=["\n"], logprobs=2)
    c = r.choices[0]
    assert c.text.strip() == "Paris" and c.finish_reason == "stop"
    assert all(v <= 0 for v in c.logprobs.token_logprobs)


def test_gemma_without_template_refuses_chat(gemma):
    with pytest.raises(openai.BadRequestError) as e:
        gemma.chat.completions.create(model="gemma-3-270m", messages=[{"role": "user", "content": "hi"}])
    assert "chat template" in e.value.message


@pytest.fixture(scope="module")
def smollm(ember_bin):
    srv = EmberServer(real_model_path("smollm2-135m-instruct-q4_1"), "--served-model-name", "smollm", "-t", "2",
                      "--kv-cache-memory", "128MiB", name="smollm server").wait_ready(timeout=300)
    yield openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0, timeout=300)
    assert srv.stop() == 0, srv.log()


def test_smollm_chat_answers(smollm):
    r = smollm.chat.completions.create(model="smollm", temperature=0, max_tokens=30, messages=[
        {"role": "user", "content": "What is the capital of France? Answer in one word."}])
    assert "Paris" in r.choices[0].message.content
    assert r.choices[0].finish_reason == "stop"  # the model's end of turn, not part of the text
    assert "<|im_end|>" not in r.choices[0].message.content
    s = smollm.chat.completions.create(model="smollm", temperature=0, max_tokens=30, stream=True, messages=[
        {"role": "user", "content": "What is the capital of France? Answer in one word."}])
    assert "".join(c.choices[0].delta.content or "" for c in s) == r.choices[0].message.content


def test_smollm_stop_logprobs_and_prefix_cache(smollm):
    msgs = [{"role": "user", "content": "List three fruits, one per line."}]
    full = smollm.chat.completions.create(model="smollm", temperature=0, max_tokens=40, messages=msgs)
    assert "\n" in full.choices[0].message.content
    r = smollm.chat.completions.create(model="smollm", temperature=0, max_tokens=40, stop=["\n"], logprobs=True,
                                       top_logprobs=3, messages=msgs)
    c = r.choices[0]
    assert c.message.content == full.choices[0].message.content.split("\n")[0]
    assert c.finish_reason == "stop"
    assert c.logprobs.content and all(e.logprob <= 0 and len(e.top_logprobs) == 3 for e in c.logprobs.content)
    # The same conversation again: its prompt comes from the prefix cache.
    assert r.usage.prompt_tokens_details.cached_tokens > 0


def test_smollm_json_object(smollm):
    """response_format json_object: the output is one JSON object (judged by Python's json), the
    same streamed, for sampled requests too; json_schema is refused by name."""
    msgs = [{"role": "user", "content": "Reply with only a JSON object with the keys name and age for a cat named "
                                        "Tom who is 3 years old."}]
    kw = dict(model="smollm", messages=msgs, max_tokens=80, response_format={"type": "json_object"})
    r = smollm.chat.completions.create(temperature=0, **kw)
    c = r.choices[0]
    assert c.finish_reason == "stop", c.message.content
    assert json.loads(c.message.content) == {"name": "Tom", "age": 3}, c.message.content
    s = smollm.chat.completions.create(temperature=0, stream=True, **kw)
    assert "".join(ch.choices[0].delta.content or "" for ch in s) == c.message.content
    # Without the constraint the same greedy request is not a JSON object (else this test proves nothing).
    plain = smollm.chat.completions.create(model="smollm", messages=msgs, max_tokens=80, temperature=0)
    with pytest.raises(ValueError):
        json.loads(plain.choices[0].message.content)
    finished = 0
    for seed in range(4):
        r = smollm.chat.completions.create(temperature=1.0, seed=seed, **kw)
        if r.choices[0].finish_reason == "stop":
            finished += 1
            assert isinstance(json.loads(r.choices[0].message.content), dict), r.choices[0].message.content
    assert finished >= 3


def test_smollm_json_schema(smollm):
    """response_format json_schema: required keys, types and an enum hold in every finished
    output, greedy and sampled; keywords ember cannot enforce are refused by name."""
    schema = {"type": "object", "additionalProperties": False, "required": ["name", "age", "color"],
              "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                             "color": {"enum": ["black", "white", "orange"]}}}
    rf = {"type": "json_schema", "json_schema": {"name": "cat", "schema": schema, "strict": True}}
    msgs = [{"role": "user", "content": "Describe the cat Tom as JSON: he is 3 years old and orange."}]
    finished = 0
    for temperature, seed in [(0, 0), (1.0, 0), (1.0, 1), (1.0, 2)]:
        r = smollm.chat.completions.create(model="smollm", messages=msgs, max_tokens=60, temperature=temperature,
                                           seed=seed, response_format=rf)
        if r.choices[0].finish_reason != "stop":
            continue
        finished += 1
        obj = json.loads(r.choices[0].message.content)
        assert set(obj) == {"name", "age", "color"}, obj
        assert isinstance(obj["name"], str) and type(obj["age"]) is int and obj["color"] in schema["properties"]["color"]["enum"]
        if temperature == 0:
            assert obj == {"name": "Tom", "age": 3, "color": "orange"}
    assert finished >= 3
    with pytest.raises(openai.BadRequestError) as e:
        smollm.chat.completions.create(model="smollm", messages=msgs, max_tokens=8, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {
                "type": "object", "properties": {"a": {"type": "string", "pattern": "^x"}}}}})
    assert e.value.body["param"] == "response_format" and "'pattern'" in e.value.message
