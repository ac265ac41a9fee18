"""Load test of `ember serve` (issue 6): 2,000 requests over 64 concurrent connections with the
official async `openai` client, mixed prompt and output lengths, half of them streaming, 10% of
the clients hanging up mid-stream. Every completed request must equal the offline engine's
greedy output (`ember run --temp 0`), no request may be lost, and afterwards the server must be
healthy with no KV blocks held (checked through /metrics)."""
import asyncio
import random
import time
from pathlib import Path

import openai
import pytest

from conftest import ROOT, ember_run_ids

N_REQUESTS = 2000
CONCURRENCY = 64
DISCONNECT_FRACTION = 0.10
N_PROMPTS = 24
MAX_TOKENS = [1, 2, 5, 12, 24, 48]


def make_prompts():
    words = (ROOT / "data" / "eval" / "kjv-ruth-8k.txt").read_text().split()
    rng = random.Random(6)
    prompts = []
    for i in range(N_PROMPTS):
        n = rng.choice([3, 8, 20, 45, 80])  # words; up to ~150 tokens of the 256-token context
        start = rng.randrange(0, len(words) - n)
        prompts.append(" ".join(words[start:start + n]))
    return prompts


@pytest.fixture(scope="module")
def references(tiny_chat_model):
    """Greedy continuation of each prompt by the offline engine, long enough for any max_tokens
    (a shorter max_tokens is a prefix; EOS may end it earlier)."""
    return [ember_run_ids(tiny_chat_model, p, max(MAX_TOKENS)) for p in make_prompts()]


async def run_load(base_url, plan):
    client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120,
                                http_client=None)
    results = [None] * len(plan)
    queue = asyncio.Queue()
    for i in range(len(plan)):
        queue.put_nowait(i)

    async def one(i):
        prompt, max_tokens, stream, disconnect_after = plan[i]
        if not stream:
            r = await client.completions.create(model="tiny", prompt=prompt, max_tokens=max_tokens, temperature=0)
            return ("done", r.choices[0].text, r.choices[0].finish_reason, r.usage.completion_tokens)
        s = await client.completions.create(model="tiny", prompt=prompt, max_tokens=max_tokens, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
        text, finish, usage, n_chunks = "", None, None, 0
        async for chunk in s:
            if chunk.usage:
                usage = chunk.usage.completion_tokens
            for c in chunk.choices:
                text += c.text
                finish = c.finish_reason or finish
            n_chunks += 1
            if disconnect_after is not None and n_chunks >= disconnect_after:
                await s.close()  # hang up mid-stream: the connection is dropped
                return ("disconnected", text, None, None)
        return ("done", text, finish, usage)

    async def worker():
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            try:
                results[i] = await one(i)
            except Exception as e:  # noqa: BLE001 - every failure is reported by the test
                results[i] = ("error", repr(e), None, None)

    t0 = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    await client.close()
    return results, time.monotonic() - t0


def test_load_2000_requests_64_connections(tiny_server, tiny_tokenizer, references):
    prompts = make_prompts()
    rng = random.Random(1)
    plan = []
    for i in range(N_REQUESTS):
        p = rng.randrange(N_PROMPTS)
        stream = rng.random() < 0.5
        disconnect = None
        if rng.random() < DISCONNECT_FRACTION:
            stream, disconnect = True, rng.randint(1, 3)
            max_tokens = 48  # long enough to be cut off
        else:
            max_tokens = rng.choice(MAX_TOKENS)
        plan.append((prompts[p], max_tokens, stream, disconnect, p))
    before = tiny_server.metrics()
    results, secs = asyncio.run(run_load(tiny_server.base_url, [x[:4] for x in plan]))

    errors = [(i, r) for i, r in enumerate(results) if r is None or r[0] == "error"]
    assert not errors, f"{len(errors)} requests failed, first: {errors[:3]}"
    n_done = n_disc = 0
    for (prompt, max_tokens, stream, disconnect, p), (kind, text, finish, usage) in zip(plan, results):
        ref = references[p]
        if kind == "disconnected":
            n_disc += 1
            # What arrived before hanging up is a prefix of the right answer.
            assert tiny_tokenizer.decode(ref, skip_special_tokens=True).startswith(text)
            continue
        n_done += 1
        # EOS may end the reference before max_tokens: then generation stopped there too.
        expected_ids = ref[:max_tokens]
        expected_finish = "length" if len(ref) >= max_tokens else "stop"
        assert text == tiny_tokenizer.decode(expected_ids, skip_special_tokens=True), (prompt, max_tokens, stream)
        assert finish == expected_finish
        if usage is not None:
            assert usage == (max_tokens if expected_finish == "length" else len(ref) + 1)
    assert n_done + n_disc == N_REQUESTS
    assert n_disc >= N_REQUESTS * DISCONNECT_FRACTION * 0.5

    # Healthy afterwards, and the aborted requests gave back every KV block.
    status, body = tiny_server.get("/health")
    assert status == 200 and body["status"] == "ok"
    deadline = time.monotonic() + 10
    while True:
        m = tiny_server.metrics()
        idle = (m["ember_kv_blocks_used"] == 0 and m["ember_num_requests_running"] == 0
                and m["ember_num_requests_waiting"] == 0 and m["ember_http_requests_in_flight"] == 0)
        if idle or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert idle, {k: v for k, v in m.items() if "kv" in k or "requests" in k}
    served = sum(v for k, v in m.items() if k.startswith('ember_http_requests_total{route="/v1/completions"'))
    served_before = sum(v for k, v in before.items() if k.startswith('ember_http_requests_total{route="/v1/completions"'))
    assert served - served_before == N_REQUESTS  # every request reached the server and got logged
    print(f"\nload: {N_REQUESTS} requests ({n_disc} hung up mid-stream) at concurrency {CONCURRENCY} "
          f"in {secs:.1f} s = {N_REQUESTS / secs:.0f} req/s; "
          f"disconnects seen by the server: {m['ember_client_disconnects_total']:.0f}")
