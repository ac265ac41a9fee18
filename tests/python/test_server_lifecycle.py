"""`ember serve` as a process (issue 6): graceful shutdown on SIGTERM (stop accepting, finish
in-flight requests, exit 0), --drain-timeout aborting what is left, --request-timeout, and
/health while the model loads."""
import signal
import threading
import time

import openai
import pytest

from conftest import EmberServer

PROMPT = "And Ruth said, Intreat me not to leave thee"


def stream_in_thread(srv, max_tokens, n, started):
    """Streams a greedy completion with n samples in a thread (n makes the work long enough to
    be interrupted); sets `started` after the first chunk."""
    out = {"text": [""] * n, "finish": [None] * n, "usage": None, "error": None}

    def run():
        try:
            client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0, timeout=120)
            for c in client.completions.create(model="tiny", prompt=PROMPT, max_tokens=max_tokens, temperature=0, n=n,
                                               stream=True, stream_options={"include_usage": True},
                                               extra_body={"ignore_eos": True}):
                started.set()
                if c.usage:
                    out["usage"] = c.usage.completion_tokens
                for ch in c.choices:
                    out["text"][ch.index] += ch.text
                    out["finish"][ch.index] = ch.finish_reason or out["finish"][ch.index]
        except Exception as e:  # noqa: BLE001 - reported by the test
            out["error"] = repr(e)
        started.set()

    t = threading.Thread(target=run)
    t.start()
    return t, out


def test_sigterm_finishes_in_flight_stream_and_exits_0(ember_bin, tiny_chat_model):
    srv = EmberServer(tiny_chat_model, "--served-model-name", "tiny", "-t", "2", "--kv-cache-memory", "16MiB",
                      name="drain server").wait_ready()
    ref = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0).completions.create(
        model="tiny", prompt=PROMPT, max_tokens=200, temperature=0, extra_body={"ignore_eos": True})
    started = threading.Event()
    t, out = stream_in_thread(srv, 200, 16, started)
    assert started.wait(60)
    srv.proc.send_signal(signal.SIGTERM)
    t.join(120)
    assert out["error"] is None, out["error"]
    assert out["finish"] == ["length"] * 16 and out["usage"] == 200 * 16
    assert out["text"] == [ref.choices[0].text] * 16  # not cut short
    assert srv.proc.wait(60) == 0
    log = srv.log()
    assert "received SIGTERM" in log and "server: stopped" in log
    assert "shutting down (in flight: 1)" in log  # the signal came while the stream ran
    with pytest.raises(openai.APIConnectionError):  # nobody listens any more
        openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0, timeout=5).models.list()


def test_drain_timeout_aborts_what_is_left(ember_bin, tiny_chat_model):
    srv = EmberServer(tiny_chat_model, "--served-model-name", "tiny", "-t", "1", "--kv-cache-memory", "16MiB",
                      "--drain-timeout", "0", name="abort server").wait_ready()
    started = threading.Event()
    t, out = stream_in_thread(srv, 220, 32, started)
    assert started.wait(60)
    srv.proc.send_signal(signal.SIGTERM)
    t.join(120)
    assert out["error"] is None, out["error"]
    assert out["finish"] == ["abort"] * 32 and out["usage"] < 220 * 32
    assert srv.proc.wait(60) == 0


def test_request_timeout(ember_bin, tiny_chat_model):
    srv = EmberServer(tiny_chat_model, "--served-model-name", "tiny", "-t", "1", "--kv-cache-memory", "16MiB",
                      "--request-timeout", "0.02", name="timeout server").wait_ready()
    try:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        # 64 samples of 220 tokens take far longer than the 20 ms allowed.
        with pytest.raises(openai.APIStatusError) as e:
            client.completions.create(model="tiny", prompt=PROMPT, max_tokens=220, temperature=0, n=64,
                                      extra_body={"ignore_eos": True})
        assert e.value.status_code == 408 and e.value.body["type"] == "timeout_error"
        with pytest.raises(openai.APIError) as e:  # in a stream: an error event
            for _ in client.completions.create(model="tiny", prompt=PROMPT, max_tokens=220, temperature=0, n=64,
                                               stream=True, extra_body={"ignore_eos": True}):
                pass
        assert "did not finish within" in str(e.value)
        # Short requests are unaffected, and the aborted ones left no KV blocks behind.
        assert client.completions.create(model="tiny", prompt="x", max_tokens=1).usage.completion_tokens == 1
        time.sleep(0.2)
        m = srv.metrics()
        assert m["ember_kv_blocks_used"] == 0 and m["ember_request_timeouts_total"] == 2
    finally:
        assert srv.stop() == 0


def test_health_reports_loading_then_ok(ember_bin, gemma_path):
    srv = EmberServer(gemma_path, "-t", "2", "--kv-cache-memory", "64MiB", name="loading server")
    try:
        srv._ready.wait(120)
        seen = []
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            status, body = srv.get("/health")
            seen.append((status, body and body.get("status")))
            if status == 200:
                break
        assert seen[-1] == (200, "ok")
        assert all(s == (503, "loading") for s in seen[:-1]), seen
        status, body = srv.get("/v1/models")
        assert status == 200 and body["data"][0]["id"] == "gemma-3-270m-q4_k_m.gguf"
    finally:
        assert srv.stop() == 0


def test_queue_full_is_429_with_retry_after(ember_bin, tiny_chat_model):
    srv = EmberServer(tiny_chat_model, "--served-model-name", "tiny", "-t", "1", "--kv-cache-memory", "16MiB",
                      "--max-num-seqs", "4", "--max-queue", "1", name="queue server").wait_ready()
    try:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0, timeout=120)
        outcomes = []

        def call():
            try:
                client.completions.create(model="tiny", prompt=PROMPT, max_tokens=200, temperature=0, n=4,
                                          extra_body={"ignore_eos": True})
                outcomes.append("ok")
            except openai.RateLimitError as e:
                ok = e.status_code == 429 and e.response.headers["retry-after"] == "1" and e.code == "queue_full"
                outcomes.append("429" if ok else repr(e))
            except Exception as e:  # noqa: BLE001 - shows up in the assertion below
                outcomes.append(repr(e))

        threads = [threading.Thread(target=call) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert len(outcomes) == 8 and "429" in outcomes and "ok" in outcomes, outcomes
        # The client's own retries honour Retry-After and get through once the queue drains.
        patient = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=5, timeout=120)
        assert patient.completions.create(model="tiny", prompt=PROMPT, max_tokens=4).usage.completion_tokens >= 1
        assert srv.metrics()["ember_requests_rejected_total"] >= 1
    finally:
        assert srv.stop() == 0
