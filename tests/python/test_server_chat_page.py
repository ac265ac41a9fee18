"""The chat page at GET / (issue 6): served from the binary, and it really chats. Headless
Chromium (Debian's package) is driven over the DevTools protocol (--remote-debugging-pipe, no
extra packages): it opens the page, types a message and presses Enter like a user; the page
streams the model's answer from /v1/chat/completions into the DOM, and the text shown must equal
what the API answers for the same conversation."""
import base64
import json
import os
import shutil
import subprocess
import time

import openai
import pytest


def chromium_path():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("headless Chromium is missing: apt-get install chromium")


class Browser:
    """Chromium with the DevTools protocol on fds 3 (commands in) and 4 (replies out), messages
    separated by NUL bytes."""

    def __init__(self, profile_dir):
        cmd_r, cmd_w = os.pipe()
        out_r, out_w = os.pipe()

        def child_fds():
            # Move both ends out of the way first: either may itself be fd 3 or 4.
            a, b = os.dup(cmd_r), os.dup(out_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [chromium_path(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--remote-debugging-pipe", f"--user-data-dir={profile_dir}",
             "--window-size=900,640", "about:blank"],
            preexec_fn=child_fds, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(out_w)
        self.tx = os.fdopen(cmd_w, "wb", buffering=0)
        self.rx = os.fdopen(out_r, "rb", buffering=0)
        self.buf = b""
        self.next_id = 0
        self.session = None

    def _read_message(self):
        while b"\0" not in self.buf:
            chunk = self.rx.read(65536)
            if not chunk:
                raise AssertionError("chromium closed the DevTools pipe")
            self.buf += chunk
        msg, _, self.buf = self.buf.partition(b"\0")
        return json.loads(msg)

    def call(self, method, session=True, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if session and self.session:
            msg["sessionId"] = self.session
        self.tx.write(json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read_message()
            if reply.get("id") == self.next_id:
                assert "error" not in reply, reply
                return reply["result"]

    def open(self, url):
        target = self.call("Target.createTarget", session=False, url=url)["targetId"]
        self.session = self.call("Target.attachToTarget", session=False, targetId=target, flatten=True)["sessionId"]

    def eval(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in r, r
        return r["result"].get("value")

    def wait_for(self, expression, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # The page may not exist yet: errors count as "not yet".
            if self.eval(f"(() => {{ try {{ return !!({expression}); }} catch (e) {{ return false; }} }})()"):
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {expression}; body: {self.eval('document.body.outerHTML')}")

    def close(self):
        try:
            self.call("Browser.close", session=False)
        except (AssertionError, OSError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def test_page_is_served(tiny_server):
    status, body = tiny_server.get("/")
    assert status == 200
    assert body.startswith("<!doctype html>") and "/v1/chat/completions" in body
    assert "http://" not in body and "https://" not in body  # self-contained: no external resources


def test_page_chats_with_streaming(tiny_server, tmp_path):
    question = "Whither thou goest, I will go"
    follow_up = "and where thou lodgest"
    api = openai.OpenAI(base_url=tiny_server.base_url, api_key="x", max_retries=0)
    first = api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": question}],
                                        temperature=0, max_tokens=24).choices[0].message.content
    second = api.chat.completions.create(model="tiny", temperature=0, max_tokens=24, messages=[
        {"role": "user", "content": question}, {"role": "assistant", "content": first},
        {"role": "user", "content": follow_up}]).choices[0].message.content

    browser = Browser(tmp_path / "profile")
    try:
        browser.open(f"{tiny_server.url}/?temperature=0&max_tokens=24")
        browser.wait_for("document.getElementById('model').textContent === 'tiny'")
        for text in (question, follow_up):
            browser.eval("document.getElementById('input').focus(); true")
            browser.call("Input.insertText", text=text)
            browser.call("Input.dispatchKeyEvent", type="keyDown", key="Enter", code="Enter",
                         windowsVirtualKeyCode=13, text="\r")
            browser.call("Input.dispatchKeyEvent", type="keyUp", key="Enter", code="Enter", windowsVirtualKeyCode=13)
            browser.wait_for("document.body.dataset.state === 'done' && "
                             f"document.querySelectorAll('.msg.assistant').length === {1 + (text == follow_up)}")
        msgs = browser.eval("[...document.querySelectorAll('.msg')].map(m => [m.className, m.textContent])")
        assert msgs == [["msg user", question], ["msg assistant", first],
                        ["msg user", follow_up], ["msg assistant", second]]
        stats = browser.eval("document.getElementById('stats').textContent")
        assert stats.startswith("finish: length") and "24 completion tokens" in stats, stats
        # The page asked for a stream (how the browser groups the chunks is its business).
        page_requests = [l for l in tiny_server.log_lines if "path=/v1/chat/completions" in l][-2:]
        assert len(page_requests) == 2 and all("stream=true" in l and "status=200" in l for l in page_requests)
        png = base64.b64decode(browser.call("Page.captureScreenshot", format="png")["data"])
        (tmp_path / "chat.png").write_bytes(png)
        assert png.startswith(b"\x89PNG") and len(png) > 5000
    finally:
        browser.close()
