"""Shared pytest fixtures for the server suites (tests/python/test_server*.py): the ember binary,
a tiny complete chat model assembled from committed fixtures, and `ember serve` processes on
free loopback ports."""
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def ember_binary() -> Path:
    """$EMBER_BIN, else build/bin/ember (scripts/build.sh), else build-server/bin/ember."""
    if os.environ.get("EMBER_BIN"):
        return Path(os.environ["EMBER_BIN"])
    for d in ("build", "build-server"):
        p = ROOT / d / "bin" / "ember"
        if p.exists():
            return p
    return ROOT / "build" / "bin" / "ember"


def real_model_path(name: str) -> Path:
    out = subprocess.run([str(ROOT / "scripts" / "get-models.sh"), "--only", name], check=True,
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        n, _, p = line.partition("\t")
        if n == name:
            return Path(p)
    raise AssertionError(f"get-models.sh did not install {name}: {out!r}")


class EmberServer:
    """`ember serve` as a child process. The port is the one the server reports after binding
    port 0, so parallel test runs never collide."""

    def __init__(self, model, *extra, env=None, name="server"):
        self.args = [str(ember_binary()), "serve", "-m", str(model), "--host", "127.0.0.1", "--port", "0",
                     *map(str, extra)]
        self.log_lines = []
        self.port = None
        self.name = name
        self._ready = threading.Event()
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     errors="replace", env=env)
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()

    def _read_log(self):
        for line in self.proc.stderr:
            self.log_lines.append(line.rstrip("\n"))
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m and self.port is None:
                self.port = int(m.group(1))
                self._ready.set()
        self._ready.set()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self):
        return self.url + "/v1"

    def log(self):
        if self.proc.poll() is not None:
            # The reader thread may still be behind on the last lines of an exited process;
            # its pipe is at EOF now, so this join ends.
            self._reader.join(10)
        return "\n".join(self.log_lines[-80:])

    def wait_ready(self, timeout=120):
        """Until /health says ok (the model is loaded)."""
        deadline = time.monotonic() + timeout
        self._ready.wait(timeout)
        assert self.port is not None, f"{self.name} did not start:\n{self.log()}"
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"{self.name} exited with {self.proc.returncode}:\n{self.log()}"
            status, _ = self.get("/health")
            if status == 200:
                return self
            time.sleep(0.05)
        raise AssertionError(f"{self.name} not ready after {timeout}s:\n{self.log()}")

    def request(self, method, path, body=None, headers=None, timeout=60):
        """Plain HTTP (stdlib): (status, parsed JSON or text)."""
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, raw, ctype = r.status, r.read(), r.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            status, raw, ctype = e.code, e.read(), e.headers.get("Content-Type", "")
        text = raw.decode("utf-8", errors="replace")
        return status, (json.loads(text) if "json" in ctype else text)

    def get(self, path, **kw):
        try:
            return self.request("GET", path, **kw)
        except (urllib.error.URLError, ConnectionError):
            return None, None

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def metrics(self):
        """/metrics as {sample name with labels: value}."""
        status, text = self.request("GET", "/metrics")
        assert status == 200
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        return self.proc.returncode


@pytest.fixture(scope="session")
def ember_bin():
    p = ember_binary()
    assert p.exists(), f"{p} is missing: build ember first (scripts/build.sh)"
    return p


@pytest.fixture(scope="session")
def tiny_chat_model(tmp_path_factory):
    """A complete HF model directory: the random-weight Llama-3-style fixture (vocab 384,
    context 256) plus the 384-token byte-level BPE tokenizer and ChatML template of
    tests/server/fixtures/tiny_chat. Fast enough for thousands of requests."""
    d = tmp_path_factory.mktemp("tiny_chat_model")
    src = ROOT / "tests" / "fixtures" / "models" / "llama3" / "hf"
    for f in ("config.json", "generation_config.json", "model.safetensors"):
        (d / f).symlink_to(src / f)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ROOT / "tests" / "server" / "fixtures" / "tiny_chat" / f, d / f)
    return d


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """The tiny model's tokenizer through Hugging Face `tokenizers`: an independent decoder."""
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(ROOT / "tests" / "server" / "fixtures" / "tiny_chat" / "tokenizer.json"))


@pytest.fixture(scope="session")
def tiny_server(ember_bin, tiny_chat_model):
    """One server on the tiny model for the whole session (tests must leave it idle)."""
    srv = EmberServer(tiny_chat_model, "--served-model-name", "tiny", "-t", "2", "--max-num-seqs", "64",
                      "--kv-cache-memory", "64MiB", name="tiny server").wait_ready()
    yield srv
    assert srv.stop() == 0, srv.log()


@pytest.fixture(scope="session")
def gemma_path():
    return real_model_path("gemma3-270m-q4_k_m")


@pytest.fixture(scope="session")
def gemma_server(ember_bin, gemma_path):
    srv = EmberServer(gemma_path, "--served-model-name", "gemma-3-270m", "-t", "2", "--max-num-seqs", "16",
                      "--kv-cache-memory", "256MiB", name="gemma server").wait_ready(timeout=300)
    yield srv
    assert srv.stop() == 0, srv.log()


def ember_run_ids(model, prompt, n, extra=()):
    """Offline reference: `ember run --temp 0 --ids` (the engine without the server)."""
    r = subprocess.run([str(ember_binary()), "run", "-m", str(model), "-p", prompt, "-n", str(n), "--temp", "0",
                        "--ids", "-t", "2", *extra], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    line = r.stdout.strip()
    return [int(x) for x in line.split(",") if x]
