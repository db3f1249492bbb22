// The web page canvas serve shows at "/": a chat application (a conversation of bubbles, each reply streamed
// with its canvas drawn live from the stream's drafts), a completion view one tab away, a model picker and
// the decoding knobs folded under Settings (self-contained: no CDN, no build step).
#include "serve/http_server.h"

namespace canvas::serve {

const char* web_page_html() {
  return R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>canvas serve</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
* { box-sizing: border-box; } [hidden] { display: none !important; }
body { font-family: system-ui, sans-serif; margin: 0 auto; padding: 0 1em; max-width: 60em; height: 100vh;
       display: flex; flex-direction: column; color: #222; background: #fafafa; }
header { display: flex; flex-wrap: wrap; align-items: center; gap: .5em 1.2em; padding: .8em 0 .5em; }
h1 { font-size: 1.2em; margin: 0; } h2 { font-size: 1em; margin: .8em 0 .3em; }
button, select, input, textarea { font: inherit; } button { padding: .3em 1.1em; cursor: pointer; }
[role=tablist] { display: inline-flex; border: 1px solid #9fb3d6; border-radius: 6px; overflow: hidden; }
[role=tab] { border: 0; background: #fff; color: #2c5fb3; padding: .3em 1em; }
[role=tab][aria-selected=true] { background: #2c5fb3; color: #fff; }
#model-note { color: #9a5b00; font-size: .9em; }
details { border: 1px solid #ddd; border-radius: 6px; background: #fff; padding: .3em .8em; margin-bottom: .5em; }
summary { cursor: pointer; color: #444; } #settings-summary { color: #888; font-size: .9em; margin-left: .6em; }
.knobs { display: flex; flex-wrap: wrap; gap: .5em 1.2em; padding: .6em 0 .3em; }
.knobs label { white-space: nowrap; } input[type=number] { width: 5em; }
main { flex: 1; min-height: 0; display: flex; flex-direction: column; }
main > section { flex: 1; min-height: 0; display: flex; flex-direction: column; }
#conversation { flex: 1; overflow-y: auto; display: flex; flex-direction: column; gap: .7em; padding: .6em .2em; }
#conversation:empty::before { content: "Write a message below to start a conversation."; color: #888; margin: auto; }
.msg { display: flex; flex-direction: column; gap: .3em; max-width: 85%; }
.msg.user { align-self: flex-end; } .msg.assistant, .msg.error { align-self: flex-start; }
.bubble { white-space: pre-wrap; overflow-wrap: anywhere; padding: .5em .8em; border-radius: 12px; border: 1px solid #ddd; background: #fff; }
.msg.user .bubble { background: #2c5fb3; border-color: #2c5fb3; color: #fff; border-bottom-right-radius: 3px; }
.msg.assistant .bubble { border-bottom-left-radius: 3px; } .msg.assistant .bubble:empty::before { content: "\2026"; color: #888; }
.msg.stopped .bubble::after { content: "stopped"; margin-left: .6em; padding: 0 .4em; border-radius: 4px; background: #fbe3e3; color: #b00; font-size: .8em; }
.msg.error .bubble { background: #fdecec; border-color: #f2b8b8; color: #b00; }
#send-box { display: flex; gap: .5em; align-items: flex-end; padding: .6em 0 1em; border-top: 1px solid #ddd; }
#message { flex: 1; resize: vertical; min-height: 2.7em; height: 2.7em; padding: .4em .6em; border-radius: 6px; border: 1px solid #bbb; }
#send { background: #2c5fb3; color: #fff; border: 1px solid #2c5fb3; border-radius: 6px; }
button.stop { background: #b00 !important; border-color: #b00 !important; color: #fff !important; }
#completion-view { overflow-y: auto; padding-bottom: 1em; } #prompt { width: 100%; height: 5em; } #generate { margin-top: .5em; }
.canvas { display: flex; flex-wrap: wrap; gap: 2px; } #canvas { margin: .8em 0; min-height: 2em; }
.cell { font: 13px/1.6 monospace; min-width: .9em; padding: 0 2px; text-align: center; border-radius: 2px; background: #fff; border: 1px solid #ddd; white-space: pre; }
.cell:empty::before { content: "\200b"; } /* a piece with no text keeps the row's height */
.cell.masked { background: #9aa5b1; color: #9aa5b1; } .cell.noise { background: #f3e6c4; color: #8a6d1f; }
.cell.new { background: #c7f0c2; } .cell.drafted { background: #f4f4f4; color: #888; border-style: dashed; }
.stats { color: #555; font-size: .85em; } .stats.error { color: #b00; }
#output { white-space: pre-wrap; background: #fff; border: 1px solid #ddd; padding: .6em; min-height: 2em; }
.visually-hidden { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
</style></head><body>
<header>
<h1>canvas serve</h1>
<div role="tablist" aria-label="view">
<button role="tab" id="tab-chat" aria-controls="chat-view" aria-selected="true">Chat</button><button role="tab" id="tab-completion" aria-controls="completion-view" aria-selected="false" tabindex="-1">Completion</button>
</div>
<label>model <select id="model"></select></label>
<span id="model-note" role="status"></span>
</header>
<details id="settings"><summary>Settings<span id="settings-summary"></span></summary><div class="knobs">
<label>mode <select id="mode"><option>auto</option><option>diffusion</option><option>ar</option><option>verify</option></select></label>
<label>max_tokens <input type="number" id="max_tokens" min="1" placeholder="to the end"></label>
<label>temperature <input type="number" id="temperature" min="0" step="0.1" placeholder="model's"></label>
<label>steps <input type="number" id="steps" min="1" placeholder="auto"></label>
<label>block_length <input type="number" id="block_length" min="1" placeholder="auto"></label>
<label>threshold <input type="number" id="threshold" min="0" max="1" step="0.05" placeholder="0"></label>
<label>cache <select id="cache"><option>prefix</option><option>none</option><option>dual</option></select></label>
<label>API key <input type="password" id="key" size="10" autocomplete="off"></label>
</div></details>
<main>
<section id="chat-view" role="tabpanel" aria-labelledby="tab-chat">
<div id="conversation" role="log" aria-label="conversation" aria-live="polite"></div>
<form id="send-box">
<label for="message" class="visually-hidden">Message</label>
<textarea id="message" placeholder="Message (Enter sends, Shift+Enter starts a new line)"></textarea>
<button type="submit" id="send">Send</button>
<button type="button" id="new-conversation">New conversation</button>
</form>
</section>
<section id="completion-view" role="tabpanel" aria-labelledby="tab-completion" hidden>
<label for="prompt" class="visually-hidden">Prompt</label>
<textarea id="prompt" placeholder="Prompt">And God said</textarea>
<div><button id="generate">Generate</button></div>
<div id="canvas" class="canvas" role="img" aria-label="canvas: the text being denoised"></div>
<div id="stats" class="stats"></div>
<h2>Text</h2><div id="output" aria-label="completion"></div>
</section>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
function num(id) { const v = $(id).value; return v === "" ? undefined : Number(v); }
function headers() {
  const h = { "Content-Type": "application/json" };
  if ($("key").value) h.Authorization = "Bearer " + $("key").value;
  return h;
}
// The request fields the picker and the Settings fold set, shared by both views.
function settings() {
  const s = { mode: $("mode").value, cache: $("cache").value };
  for (const k of ["max_tokens", "steps", "block_length", "threshold", "temperature"]) if (num(k) !== undefined) s[k] = num(k);
  if ($("model").value) s.model = $("model").value;
  return s;
}
function summarizeSettings() {
  $("settings-summary").textContent = `${$("mode").value} · max_tokens ${$("max_tokens").value || "to the end"} · temperature ${$("temperature").value || "model's"}`;
}

// The models the server serves (GET /v1/models), in the picker; the request names the one chosen. Chat
// models (canvas.chat: the model has a chat format) are marked: the page opens in the chat view on the
// first of them when there is one, else in the completion view; the Chat tab picks a chat model, the
// Completion tab a model without one, as the server does for requests that name none.
async function loadModels() {
  try {
    const res = await fetch("/v1/models", { headers: headers() });
    if (res.status === 503) setTimeout(loadModels, 1000);  // still loading the models
    if (res.status === 401) $("model-note").textContent = "the server asks for an API key (Settings)";
    if (!res.ok) return;
    const list = await res.json(), picker = $("model"), chosen = picker.value;
    picker.textContent = "";
    for (const m of list.data || []) {
      const o = document.createElement("option"); o.value = o.textContent = m.id;
      o.dataset.chat = m.canvas && m.canvas.chat ? "1" : ""; picker.appendChild(o);
    }
    if (chosen) picker.value = chosen;
    else showView([...picker.options].some((o) => o.dataset.chat) ? "chat" : "completion");
    noteModel();
    document.body.dataset.models = String(picker.options.length);
  } catch (e) { /* the page still works without the list: the server's default model answers */ }
}
function suitModel() {
  const picker = $("model"), want = view === "chat" ? "1" : "", selected = picker.selectedOptions[0];
  if (!selected || selected.dataset.chat === want) return;
  const suited = [...picker.options].find((o) => o.dataset.chat === want);
  if (suited) picker.value = suited.value;
}
// In the chat view, a model without a chat format is named (the server refuses chat with it).
function noteModel() {
  const selected = $("model").selectedOptions[0];
  $("model-note").textContent = view === "chat" && selected && !selected.dataset.chat
    ? `${selected.value} has no chat format: pick a chat model, or use Completion` : "";
}
let view = "chat";
function showView(name) {
  view = name;
  for (const v of ["chat", "completion"]) {
    const on = v === name, tab = $("tab-" + v);
    tab.setAttribute("aria-selected", String(on)); tab.tabIndex = on ? 0 : -1;
    $(v + "-view").hidden = !on;
  }
  document.body.dataset.view = name;
  suitModel(); noteModel();
}

// Padding and end-of-text positions (draft.pad) get no box: only text the model keeps is drawn. In verify
// mode the positions from draft.drafts on are the drafts being checked (dashed), the ones before kept.
function draw(box, draft, previous) {
  box.textContent = "";
  document.body.dataset.drafts = String(Number(document.body.dataset.drafts || 0) + 1);  // drafts drawn
  const pad = new Set(draft.pad || []);
  draft.tokens.forEach((piece, i) => {
    if (pad.has(i)) return;
    const cell = document.createElement("span");
    cell.className = "cell";
    if (piece === null) { cell.classList.add("masked"); cell.textContent = "\u2591"; }
    else {
      cell.textContent = piece === "\n" ? "\u21b5" : piece;
      if (draft.noise) cell.classList.add("noise");
      else if (draft.drafts !== undefined && i >= draft.drafts) cell.classList.add("drafted");
      else if (previous && previous[i] === null) cell.classList.add("new");
    }
    box.appendChild(cell);
  });
}
// Committed tokens of a draft: neither masked, nor noise, nor padding.
function committed(draft) {
  if (!draft || draft.noise) return 0;
  const pad = new Set(draft.pad || []);
  const end = draft.drafts !== undefined ? draft.drafts : draft.tokens.length;
  return draft.tokens.filter((p, i) => i < end && p !== null && !pad.has(i)).length;
}

// One request at a time: its controller, and the button (Send or Generate) that stops it meanwhile.
let controller = null;
function setBusy(button) {
  for (const b of [$("send"), $("generate")]) b.disabled = b !== button;
  button.textContent = "Stop"; button.classList.add("stop");
}
function setReady() {
  $("send").textContent = "Send"; $("generate").textContent = "Generate";
  for (const b of [$("send"), $("generate")]) { b.disabled = false; b.classList.remove("stop"); }
}
// Streams one request (chat: `messages`, else `prompt`) into `out` (text, canvas, stats: elements); returns
// how it ended ("1", "stopped" or "error", as document.body.dataset.done tells the tests), the text that
// arrived and the error's message.
async function stream(chat, body, out, button, follow) {
  Object.assign(body, { stream: true, canvas_draft: true, stream_options: { include_usage: true } }, settings());
  out.stats.textContent = "waiting…"; out.stats.classList.remove("error");
  delete document.body.dataset.done;
  controller = new AbortController(); setBusy(button);
  const t0 = performance.now(); let text = "", previous = null, draft = null, mode = "", usage = null, drafts = 0;
  try {
    const res = await fetch(chat ? "/v1/chat/completions" : "/v1/completions",
                            { method: "POST", headers: headers(), body: JSON.stringify(body), signal: controller.signal });
    if (!res.ok) {
      let message = res.status + " " + res.statusText;
      try { const e = await res.json(); if (e.error) message = e.error.message; } catch (ignored) { /* not JSON */ }
      throw new Error(message);
    }
    const reader = res.body.getReader(), decoder = new TextDecoder(); let buffer = "";
    for (;;) {
      const { value, done } = await reader.read(); if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, end); buffer = buffer.slice(end + 2);
        if (!event.startsWith("data: ")) continue;
        const data = event.slice(6); if (data === "[DONE]") continue;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        if (chunk.usage) usage = chunk.usage;
        const c = chunk.choices && chunk.choices[0];
        if (c) { text += chat ? (c.delta.content || "") : (c.text || ""); out.text.textContent = text; }
        // Every chunk names its mode in chunk.canvas; drafts (canvas_draft) also carry the tokens.
        if (chunk.canvas) mode = chunk.canvas.mode;
        if (chunk.canvas && chunk.canvas.tokens) { draw(out.canvas, chunk.canvas, previous); previous = chunk.canvas.tokens; draft = chunk.canvas; drafts++; }
        const secs = (performance.now() - t0) / 1000, kept = committed(draft);
        if (draft) out.stats.textContent = `${mode} · step ${draft.step} · ${draft.passes} forward passes · ` +
          `${(kept / secs).toFixed(1)} tokens/s · ${draft.passes ? (kept / draft.passes).toFixed(2) : 0} tokens per forward`;
        follow();
      }
    }
    const secs = (performance.now() - t0) / 1000;
    if (usage) out.stats.textContent = `${mode} · ${usage.completion_tokens} tokens · ${usage.forward_passes} forward passes · ` +
      `${usage.tokens_per_forward.toFixed(2)} tokens per forward · ${secs.toFixed(2)} s · ` +
      `${(usage.completion_tokens / secs).toFixed(1)} tokens/s · ${drafts} drafts drawn`;
    return { ended: "1", text };
  } catch (e) {
    if (e.name === "AbortError") {
      out.stats.textContent = `${mode ? mode + " · " : ""}stopped after ${((performance.now() - t0) / 1000).toFixed(2)} s · ` +
        `${text.length} characters kept`;
      return { ended: "stopped", text };
    }
    out.stats.textContent = "error: " + e.message; out.stats.classList.add("error");
    return { ended: "error", text, error: e.message };
  } finally { controller = null; setReady(); follow(); }
}

// The conversation: the messages sent with each request, and their bubbles. A reply carries its canvas
// (drawn while it streams; earlier replies' canvases fold away) and its stats line.
let messages = [], conversation = 0;
function addMessage(role, text) {
  const msg = document.createElement("div"), bubble = document.createElement("div");
  msg.className = "msg " + role; bubble.className = "bubble"; bubble.textContent = text;
  msg.setAttribute("aria-label", role === "user" ? "you" : role);
  msg.appendChild(bubble);
  $("conversation").appendChild(msg);
  return msg;
}
// The conversation follows a streaming reply unless the reader has scrolled up.
let following = true;
function followConversation() { if (following) { const c = $("conversation"); c.scrollTop = c.scrollHeight; } }
async function sendMessage() {
  const said = $("message").value, ours = conversation;
  if (!said.trim() || controller) return;
  messages.push({ role: "user", content: said });
  const mine = addMessage("user", said), reply = addMessage("assistant", "");
  const canvas = document.createElement("div"), stats = document.createElement("div");
  canvas.className = "canvas"; canvas.setAttribute("role", "img"); canvas.setAttribute("aria-label", "canvas: the reply being denoised");
  stats.className = "stats";
  reply.append(canvas, stats);
  for (const old of $("conversation").querySelectorAll(".canvas")) old.hidden = old !== canvas;
  $("message").value = ""; following = true;
  const r = await stream(true, { messages: messages.slice() }, { text: reply.firstChild, canvas, stats }, $("send"),
                         followConversation);
  if (ours === conversation) {  // not cleared by New conversation meanwhile
    if (r.ended === "error") {
      // The turn did not happen: the error is said in the conversation, the message goes back to the send box.
      messages.pop(); mine.remove(); reply.remove();
      const error = addMessage("error", "error: " + r.error); error.setAttribute("role", "alert");
      if (!$("message").value) $("message").value = said;
      followConversation();
    } else {
      // Stopped: what arrived is kept, in the history too, so the next turn follows it.
      messages.push({ role: "assistant", content: r.text });
      if (r.ended === "stopped") reply.classList.add("stopped");
    }
  }
  document.body.dataset.done = r.ended;
  $("message").focus();
}
function newConversation() {
  if (controller && !$("send").disabled) controller.abort();  // the running request is a reply (Send is its Stop)
  conversation++; messages = []; $("conversation").textContent = "";
  $("message").focus();
}

// The completion view: the prompt, its text, its canvas and stats line.
async function complete() {
  if (controller) return;
  $("output").textContent = "";
  const r = await stream(false, { prompt: $("prompt").value }, { text: $("output"), canvas: $("canvas"), stats: $("stats") },
                         $("generate"), () => {});
  document.body.dataset.done = r.ended;
}

$("send-box").addEventListener("submit", (e) => { e.preventDefault(); if (controller) controller.abort(); else sendMessage(); });
$("message").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); if (!controller) sendMessage(); }
});
$("generate").addEventListener("click", () => { if (controller) controller.abort(); else complete(); });
$("new-conversation").addEventListener("click", newConversation);
$("tab-chat").addEventListener("click", () => showView("chat"));
$("tab-completion").addEventListener("click", () => showView("completion"));
document.querySelector("[role=tablist]").addEventListener("keydown", (e) => {  // arrow keys move between the tabs
  if (e.key !== "ArrowLeft" && e.key !== "ArrowRight") return;
  const next = view === "chat" ? "completion" : "chat";
  showView(next); $("tab-" + next).focus();
});
$("conversation").addEventListener("scroll", () => {
  const c = $("conversation"); following = c.scrollHeight - c.scrollTop - c.clientHeight < 40;
});
$("model").addEventListener("change", noteModel);
$("key").addEventListener("change", loadModels);
for (const k of ["mode", "max_tokens", "temperature"]) $(k).addEventListener("input", summarizeSettings);
summarizeSettings();
showView("chat");
loadModels();
</script></body></html>
)HTML";
}

}  // namespace canvas::serve
