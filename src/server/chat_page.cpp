#include "server/chat_page.h"

namespace ember::server {

namespace {

// Text only ever reaches the DOM through textContent, so model output cannot inject markup.
constexpr std::string_view kPage = R"EMBERPAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ember chat</title>
<style>
  :root { --bg: #f6f5f2; --fg: #1d1d1f; --muted: #6b6b70; --user: #dbe8ff; --bot: #ffffff; --accent: #d9480f; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 15px/1.45 system-ui, sans-serif; background: var(--bg); color: var(--fg);
         display: flex; flex-direction: column; height: 100vh; }
  header { display: flex; gap: 12px; align-items: baseline; padding: 10px 16px; border-bottom: 1px solid #ddd; }
  header h1 { font-size: 18px; margin: 0; color: var(--accent); }
  #model, #health { color: var(--muted); font-size: 13px; }
  details { padding: 6px 16px; border-bottom: 1px solid #eee; font-size: 13px; }
  details label { margin-right: 14px; }
  details input[type=number] { width: 70px; }
  #system { width: 100%; margin-top: 6px; }
  #messages { flex: 1; overflow-y: auto; padding: 16px; display: flex; flex-direction: column; gap: 10px; }
  .msg { max-width: 80ch; padding: 8px 12px; border-radius: 10px; white-space: pre-wrap; word-wrap: break-word; }
  .msg.user { align-self: flex-end; background: var(--user); }
  .msg.assistant { align-self: flex-start; background: var(--bot); border: 1px solid #e3e3e3; }
  .msg.error { align-self: stretch; background: #fff0f0; border: 1px solid #f3b0b0; color: #a00; }
  #stats { color: var(--muted); font-size: 12px; padding: 0 16px; min-height: 1.4em; }
  form { display: flex; gap: 8px; padding: 10px 16px 16px; }
  #input { flex: 1; resize: vertical; min-height: 44px; font: inherit; padding: 8px; }
  button { font: inherit; padding: 0 16px; }
</style>
</head>
<body data-state="idle">
<header><h1>ember</h1><span id="model">…</span><span id="health"></span></header>
<details>
  <summary>Settings</summary>
  <label>Temperature <input id="temperature" type="number" min="0" max="2" step="0.1" value="0.7"></label>
  <label>Max tokens <input id="max_tokens" type="number" min="1" step="1" value="256"></label>
  <label>API key <input id="api_key" type="password" autocomplete="off"></label>
  <button type="button" id="clear">Clear chat</button>
  <textarea id="system" rows="2" placeholder="System prompt (optional)"></textarea>
</details>
<div id="messages"></div>
<div id="stats"></div>
<form id="form">
  <textarea id="input" rows="2" placeholder="Message (Enter to send, Shift+Enter for a new line)"></textarea>
  <button id="send" type="submit">Send</button>
  <button id="stop" type="button" disabled>Stop</button>
</form>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const turns = [];  // {role, content} of the conversation so far
let controller = null;

$("api_key").value = localStorage.getItem("ember_api_key") || "";
$("api_key").addEventListener("change", () => localStorage.setItem("ember_api_key", $("api_key").value));

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api_key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  $("messages").appendChild(div);
  div.scrollIntoView({ block: "end" });
  return div;
}

function setState(state) {
  document.body.dataset.state = state;
  const busy = state === "streaming";
  $("send").disabled = busy;
  $("stop").disabled = !busy;
}

async function refreshInfo() {
  try {
    const h = await fetch("/health");
    $("health").textContent = h.ok ? "ready" : "(" + ((await h.json()).status || h.status) + ")";
    const r = await fetch("/v1/models", { headers: headers() });
    if (r.ok) {
      const models = (await r.json()).data;
      if (models.length) $("model").textContent = models[0].id;
    }
  } catch (e) {
    $("health").textContent = "(unreachable)";
  }
}

// Reads an SSE body and calls onEvent(json) for each data event until [DONE].
async function readEvents(body, onEvent) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") return;
        onEvent(JSON.parse(data));
      }
    }
  }
}

async function send(text) {
  if (!text.trim() || controller) return;
  const system = $("system").value.trim();
  turns.push({ role: "user", content: text });
  addMessage("user", text);
  const out = addMessage("assistant", "");
  const messages = (system ? [{ role: "system", content: system }] : []).concat(turns);
  controller = new AbortController();
  setState("streaming");
  const t0 = performance.now();
  let tFirst = 0, usage = null, finish = null;
  try {
    const res = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), signal: controller.signal,
      body: JSON.stringify({
        messages, stream: true, stream_options: { include_usage: true },
        temperature: Number($("temperature").value), max_tokens: Number($("max_tokens").value),
      }),
    });
    if (!res.ok) {
      const err = await res.json().catch(() => ({}));
      throw new Error((err.error && err.error.message) || ("HTTP " + res.status));
    }
    await readEvents(res.body, (chunk) => {
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices || []) {
        if (c.delta && c.delta.content) {
          if (!tFirst) tFirst = performance.now();
          out.textContent += c.delta.content;
          out.scrollIntoView({ block: "end" });
        }
        if (c.finish_reason) finish = c.finish_reason;
      }
    });
    turns.push({ role: "assistant", content: out.textContent });
    const t1 = performance.now();
    let stats = "finish: " + finish;
    if (usage) {
      const secs = Math.max((t1 - (tFirst || t1)) / 1000, 1e-6);
      stats += " · " + usage.prompt_tokens + " prompt + " + usage.completion_tokens + " completion tokens";
      if (usage.completion_tokens > 1) stats += " · " + ((usage.completion_tokens - 1) / secs).toFixed(1) + " tok/s";
    }
    if (tFirst) stats += " · first token " + (tFirst - t0).toFixed(0) + " ms";
    $("stats").textContent = stats;
    setState("done");
  } catch (e) {
    if (e.name === "AbortError") {
      turns.push({ role: "assistant", content: out.textContent });
      $("stats").textContent = "stopped";
      setState("done");
    } else {
      turns.pop();
      if (!out.textContent) out.remove();
      addMessage("error", String(e.message || e));
      setState("error");
    }
  } finally {
    controller = null;
    if (document.body.dataset.state === "streaming") setState("done");
    $("send").disabled = false;
    $("stop").disabled = true;
  }
}

$("form").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("input").value;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("form").requestSubmit(); }
});
$("stop").addEventListener("click", () => controller && controller.abort());
$("clear").addEventListener("click", () => { turns.length = 0; $("messages").textContent = ""; $("stats").textContent = ""; });

// URL parameters preset the settings and send a first message: /?q=Hello&temperature=0
const params = new URLSearchParams(location.search);
for (const k of ["temperature", "max_tokens"]) if (params.has(k)) $(k).value = params.get(k);
refreshInfo().then(() => {
  if (params.get("q")) send(params.get("q"));
});
</script>
</body>
</html>
)EMBERPAGE";

}  // namespace

std::string_view chat_page_html() { return kPage; }

}  // namespace ember::server
