#!/usr/bin/env python3
"""HTTP smoke test of a running `ember serve` (standard library only: the lent GPU machines have
no openai package): waits for /health, then sends a greedy completion, a streamed chat
completion and a malformed request, and prints one line per check. Exit 0 only when all pass.
  bench/cuda/serve_smoke.py PORT [LABEL [SERVER_PID]]
"""
import json
import os
import sys
import time
import urllib.error
import urllib.request

port = int(sys.argv[1])
label = sys.argv[2] if len(sys.argv) > 2 else ""
server_pid = int(sys.argv[3]) if len(sys.argv) > 3 else 0
base = f"http://127.0.0.1:{port}"


def post(path, body, raw=False):
    data = body if raw else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


for _ in range(120):
    try:
        with urllib.request.urlopen(base + "/health", timeout=2) as r:
            if r.status == 200:
                break
    except Exception:
        if server_pid:
            try:
                os.kill(server_pid, 0)
            except OSError:
                print(f"{label} serve: the server exited before answering /health")
                sys.exit(1)
        time.sleep(1)
else:
    print(f"{label} serve: /health never answered")
    sys.exit(1)

ok = True
status, text = post("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 16, "temperature": 0})
body = json.loads(text) if status == 200 else {}
completion = body.get("choices", [{}])[0].get("text", "")
good = status == 200 and body.get("usage", {}).get("completion_tokens", 0) > 0
ok &= good
print(f"{label} completion: http {status}, {body.get('usage', {}).get('completion_tokens')} tokens, text {completion!r}")

status, text = post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8,
                                             "temperature": 0, "stream": True})
events = [line for line in text.splitlines() if line.startswith("data:")]
good = status == 200 and len(events) >= 2 and events[-1].strip() == "data: [DONE]"
ok &= good
print(f"{label} streamed chat: http {status}, {len(events)} events, last {events[-1] if events else None!r}")

status, text = post("/v1/completions", b"{not json", raw=True)
good = 400 <= status < 500
ok &= good
print(f"{label} malformed JSON: http {status} (want 4xx)")
sys.exit(0 if ok else 1)
