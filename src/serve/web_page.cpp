// The web page canvas serve shows at "/": a chat application (a conversation of bubbles, each reply streamed
// as rendered Markdown with its canvas drawn live from the stream's drafts when its mode has one; copy,
// regenerate and edit-and-resend), a completion view one tab away, a model picker and the decoding knobs
// folded under Settings (self-contained: no CDN, no build step).
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
.msg.user { align-self: flex-end; align-items: flex-end; } .msg.assistant, .msg.error { align-self: flex-start; }
.bubble { white-space: pre-wrap; overflow-wrap: anywhere; min-width: 0; padding: .5em .8em; border-radius: 12px; border: 1px solid #ddd; background: #fff; }
.bubble.markdown { white-space: normal; line-height: 1.45; }
.markdown > :first-child { margin-top: 0; } .markdown > :last-child { margin-bottom: 0; }
.markdown p, .markdown ul, .markdown ol, .markdown pre, .markdown blockquote { margin: .5em 0; }
.markdown h1, .markdown h2, .markdown h3, .markdown h4, .markdown h5, .markdown h6 { font-size: 1.05em; margin: .7em 0 .3em; }
.markdown h1 { font-size: 1.3em; } .markdown h2 { font-size: 1.18em; }
.markdown ul, .markdown ol { padding-left: 1.6em; } .markdown li > ul, .markdown li > ol { margin: .2em 0; }
.markdown code { font: .88em/1.45 ui-monospace, monospace; background: #eef0f3; padding: .05em .3em; border-radius: 4px; }
.markdown pre { background: #f5f7fa; border: 1px solid #e1e4e8; border-radius: 6px; padding: .5em .8em; overflow-x: auto; white-space: pre; }
.markdown pre code { background: none; padding: 0; } .markdown a { color: #2c5fb3; }
.markdown blockquote { border-left: 3px solid #c8ced6; padding-left: .8em; color: #555; }
.markdown hr { border: 0; border-top: 1px solid #ddd; }
.actions { display: flex; gap: .3em; } .actions button { border: 0; background: none; color: #777; font-size: .8em; padding: .1em .4em; border-radius: 4px; }
.actions button:hover:not(:disabled), .actions button:focus-visible { background: #e8ecf3; color: #2c5fb3; } .actions button:disabled { cursor: default; opacity: .5; }
.editor { display: flex; flex-direction: column; gap: .3em; min-width: 22em; } .editor textarea { min-height: 4em; padding: .4em .6em; border-radius: 6px; border: 1px solid #2c5fb3; }
.editor div { display: flex; gap: .4em; justify-content: flex-end; } .editor button[type=submit] { background: #2c5fb3; color: #fff; border: 1px solid #2c5fb3; border-radius: 6px; }
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

// The modes whose decoding has a canvas to draw: AR writes its text token by token, so its reply is its canvas.
const CANVAS_MODES = new Set(["diffusion", "verify"]);
// Padding and end-of-text positions (draft.pad) get no box: only text the model keeps is drawn. In verify
// mode the positions from draft.drafts on are the drafts being checked (dashed), the ones before kept.
function draw(box, draft, previous) {
  box.textContent = ""; box.hidden = false;
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

// A reply's Markdown as HTML. The text is escaped first and a small grammar then works on the escaped text
// (paragraphs and line breaks, headings, ordered and unordered lists, block quotes, fenced code, **bold**,
// *italic*, `code`, http(s) links), so nothing the model writes reaches the page as markup of its own. An
// unclosed fence (a reply still streaming) is an open code block.
const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
function escapeHtml(text) { return text.replace(/[&<>"']/g, (c) => ESCAPES[c]); }
function renderMarkdown(text) { return markdownBlocks(escapeHtml(text.replace(/\u0000/g, "")).split("\n")); }
function link(url, label) { return `<a href="${url}" target="_blank" rel="noopener noreferrer">${label}</a>`; }
function emphasis(text) {
  return text.replace(/\*\*\*(?=\S)(.*?\S)\*\*\*/g, "<strong><em>$1</em></strong>")
    .replace(/\*\*(?=\S)(.*?\S)\*\*/g, "<strong>$1</strong>")
    .replace(/(^|\W)__(?=\S)(.*?\S)__(?!\w)/g, "$1<strong>$2</strong>")
    .replace(/\*(?=[^\s*])(.*?[^\s*])\*/g, "<em>$1</em>")
    .replace(/(^|\W)_(?=[^\s_])(.*?[^\s_])_(?!\w)/g, "$1<em>$2</em>");
}
// The spans of one escaped line. Code spans and links are set aside first (as \0N\0), so that emphasis does
// not reach into them; an address is only ever http(s), and a link's address is escaped text in quotes.
function inlineMarkdown(line) {
  const kept = [], keep = (html) => "\u0000" + (kept.push(html) - 1) + "\u0000";
  const restore = (s) => s.replace(/\u0000(\d+)\u0000/g, (m, i) => restore(kept[i]));
  line = line.replace(/`([^`]+)`/g, (m, code) => keep(`<code>${code}</code>`))
    .replace(/\[([^\]]+)\]\((https?:\/\/[^\s)\u0000]+)\)/g, (m, label, url) => keep(link(url, emphasis(label))))
    .replace(/https?:\/\/(?:[^\s\u0000&]|&amp;)+/g, (url) => {
      const tail = /[.,:;!?)\]*_]*$/.exec(url)[0];  // the sentence's punctuation after the address
      url = url.slice(0, url.length - tail.length);
      return keep(link(url, url)) + tail;
    });
  return restore(emphasis(line));
}
// The blocks of escaped lines. A list item indented deeper than the one before opens a list inside it; a line
// right after an item (or indented under it after a blank line) continues the item.
function markdownBlocks(lines) {
  let html = "", paragraph = [], lists = [], blank = false;  // lists: the open lists, outermost first
  const closeParagraph = () => {
    if (paragraph.length) html += `<p>${paragraph.map(inlineMarkdown).join("<br>")}</p>`;
    paragraph = [];
  };
  const closeList = () => { html += `</li></${lists.pop().tag}>`; };
  const close = () => { closeParagraph(); while (lists.length) closeList(); };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i], wasBlank = blank;
    blank = false;
    const fence = /^\s*(`{3,}|~{3,})\s*([\w#+.-]*)/.exec(line);
    if (fence) {
      close();
      const marker = fence[1], code = [];
      for (i++; i < lines.length; i++) {
        const end = lines[i].trim();
        if (end.length >= marker.length && end === marker[0].repeat(end.length)) break;
        code.push(lines[i]);
      }
      html += `<pre><code${fence[2] ? ` class="language-${fence[2]}"` : ""}>${code.join("\n")}</code></pre>`;
      continue;
    }
    if (!line.trim()) { closeParagraph(); blank = lists.length > 0; continue; }
    const heading = /^\s{0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$/.exec(line);
    if (heading) { close(); html += `<h${heading[1].length}>${inlineMarkdown(heading[2])}</h${heading[1].length}>`; continue; }
    if (/^\s{0,3}([-*_])(?:\s*\1){2,}\s*$/.test(line)) { close(); html += "<hr>"; continue; }
    if (/^\s{0,3}&gt;/.test(line)) {
      close();
      const quoted = [];
      for (; i < lines.length && /^\s{0,3}&gt;/.test(lines[i]); i++) quoted.push(lines[i].replace(/^\s{0,3}&gt;\s?/, ""));
      i--;
      html += `<blockquote>${markdownBlocks(quoted)}</blockquote>`;
      continue;
    }
    const item = /^(\s*)(?:([-*+])|(\d{1,9})[.)])\s+(.*)$/.exec(line);
    const indent = /^\s*/.exec(line)[0].length;
    if (item) {
      closeParagraph();
      const tag = item[2] ? "ul" : "ol";
      while (lists.length && indent < lists[lists.length - 1].indent) closeList();
      const top = lists[lists.length - 1];
      if (top && indent === top.indent && top.tag === tag) html += "</li>";
      else {
        if (top && indent === top.indent) closeList();
        const start = tag === "ol" && Number(item[3]) !== 1 ? ` start="${Number(item[3])}"` : "";
        html += `<${tag}${start}>`;
        lists.push({ tag, indent });
      }
      html += "<li>" + inlineMarkdown(item[4]);
      continue;
    }
    if (lists.length && (!wasBlank || indent > lists[lists.length - 1].indent)) {
      html += (wasBlank ? "<br><br>" : "<br>") + inlineMarkdown(line.trim());
      continue;
    }
    if (lists.length) close();
    paragraph.push(line);
  }
  close();
  return html;
}

// One request at a time: its controller, and the button (Send or Generate) that stops it meanwhile; the
// conversation's Edit and Regenerate wait for it.
let controller = null;
function setBusy(button) {
  for (const b of [$("send"), $("generate")]) b.disabled = b !== button;
  for (const b of document.querySelectorAll(".actions .when-ready")) b.disabled = true;
  button.textContent = "Stop"; button.classList.add("stop");
}
function setReady() {
  $("send").textContent = "Send"; $("generate").textContent = "Generate";
  for (const b of [$("send"), $("generate")]) { b.disabled = false; b.classList.remove("stop"); }
  for (const b of document.querySelectorAll(".actions .when-ready")) b.disabled = false;
}
// The stats line of a finished request in its mode's words: AR makes a token a forward pass, so its line is
// tokens and speed; diffusion and verify also say their forward passes and the tokens each one kept.
function finalStats(mode, usage, secs) {
  const words = [mode, `${usage.completion_tokens} tokens`];
  if (CANVAS_MODES.has(mode))
    words.push(`${usage.forward_passes} forward passes`, `${usage.tokens_per_forward.toFixed(2)} tokens per forward`);
  words.push(`${secs.toFixed(2)} s`, `${(usage.completion_tokens / secs).toFixed(1)} tokens/s`);
  return words.join(" · ");
}
// Streams one request (chat: `messages`, else `prompt`) to out.show(text so far), out.canvas and out.stats;
// returns how it ended ("1", "stopped" or "error", as document.body.dataset.done tells the tests), the text
// that arrived and the error's message. The canvas is drawn only in a mode that has one, and asked for only
// when the mode may be one of those.
async function stream(chat, body, out, button, follow) {
  Object.assign(body, { stream: true, stream_options: { include_usage: true } }, settings());
  if (body.mode !== "ar") body.canvas_draft = true;
  out.stats.textContent = "waiting…"; out.stats.classList.remove("error");
  out.canvas.textContent = ""; out.canvas.hidden = true;
  delete document.body.dataset.done;
  controller = new AbortController(); setBusy(button);
  const t0 = performance.now(); let text = "", previous = null, draft = null, mode = "", usage = null;
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
      let end, more = "";
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, end); buffer = buffer.slice(end + 2);
        if (!event.startsWith("data: ")) continue;
        const data = event.slice(6); if (data === "[DONE]") continue;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        if (chunk.usage) usage = chunk.usage;
        const c = chunk.choices && chunk.choices[0];
        if (c) more += chat ? (c.delta.content || "") : (c.text || "");
        // Every chunk names its mode in chunk.canvas; drafts (canvas_draft) also carry the tokens.
        if (chunk.canvas) mode = chunk.canvas.mode;
        if (chunk.canvas && chunk.canvas.tokens && CANVAS_MODES.has(mode)) {
          draw(out.canvas, chunk.canvas, previous); previous = chunk.canvas.tokens; draft = chunk.canvas;
        }
      }
      if (more) { text += more; out.show(text); }  // once per delivery: a reply is rendered anew each time
      const secs = (performance.now() - t0) / 1000, kept = committed(draft);
      if (draft) out.stats.textContent = `${mode} · step ${draft.step} · ${draft.passes} forward passes · ` +
        `${(kept / secs).toFixed(1)} tokens/s · ${draft.passes ? (kept / draft.passes).toFixed(2) : 0} tokens per forward`;
      else if (mode) out.stats.textContent = `${mode} · writing · ${secs.toFixed(1)} s`;
      follow();
    }
    if (usage) out.stats.textContent = finalStats(mode, usage, (performance.now() - t0) / 1000);
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

// The conversation: its turns ({role, content, element}), sent as `messages` with each request, and their
// bubbles. A reply carries its canvas (drawn while it streams; earlier replies' canvases fold away), its stats
// line and Copy; the last reply Regenerate; a message of yours Edit.
let turns = [], conversation = 0;
function actionButton(label, title, onClick, whenReady) {
  const b = document.createElement("button");
  b.type = "button"; b.textContent = label; b.title = title; b.className = label.toLowerCase();
  if (whenReady) { b.classList.add("when-ready"); b.disabled = controller !== null; }
  b.addEventListener("click", onClick);
  return b;
}
function addMessage(role, text) {
  const msg = document.createElement("div"), bubble = document.createElement("div");
  msg.className = "msg " + role; bubble.className = "bubble"; bubble.textContent = text;
  msg.setAttribute("aria-label", role === "user" ? "you" : role);
  msg.appendChild(bubble);
  $("conversation").appendChild(msg);
  return msg;
}
function addTurn(role, content, msg) {
  const turn = { role, content, element: msg }, actions = document.createElement("div");
  actions.className = "actions";
  if (role === "user") actions.append(actionButton("Edit", "edit this message and send it again", () => editTurn(turn), true));
  else actions.append(actionButton("Copy", "copy the reply's text", (e) => copyText(turn.content, e.currentTarget)),
                      actionButton("Regenerate", "ask for this reply again", () => regenerate(turn), true));
  msg.appendChild(actions);
  turns.push(turn);
  showRegenerate();
}
// Only the last reply can be asked again: the turns after it would answer the one it replaces.
function showRegenerate() {
  for (const b of $("conversation").querySelectorAll(".actions .regenerate")) b.hidden = true;
  const last = turns[turns.length - 1];
  if (last && last.role === "assistant") last.element.querySelector(".regenerate").hidden = false;
}
// Drops the turn `index` and every turn after it, with their bubbles (and errors said after them).
function dropTurns(index) {
  const first = turns[index].element;
  while (first.nextSibling) first.nextSibling.remove();
  first.remove();
  turns.length = index;
  showRegenerate();
}
// The conversation follows a streaming reply unless the reader has scrolled up.
let following = true;
function followConversation() { if (following) { const c = $("conversation"); c.scrollTop = c.scrollHeight; } }
// Sends the conversation so far (its last turn a message of yours) and streams the reply into a new bubble.
async function reply() {
  const ours = conversation, asked = turns[turns.length - 1];
  const msg = addMessage("assistant", ""), bubble = msg.firstChild;
  const canvas = document.createElement("div"), stats = document.createElement("div");
  bubble.classList.add("markdown");
  canvas.className = "canvas"; canvas.setAttribute("role", "img"); canvas.setAttribute("aria-label", "canvas: the reply being denoised");
  stats.className = "stats";
  msg.append(canvas, stats);
  for (const old of $("conversation").querySelectorAll(".canvas")) if (old !== canvas) old.hidden = true;
  following = true;
  const messages = turns.map(({ role, content }) => ({ role, content }));
  const r = await stream(true, { messages }, { show: (text) => { bubble.innerHTML = renderMarkdown(text); }, canvas, stats },
                         $("send"), followConversation);
  if (ours === conversation) {  // not cleared by New conversation meanwhile
    if (r.ended === "error") {
      // The turn did not happen: the error is said in the conversation, the message goes back to the send box.
      dropTurns(turns.length - 1); msg.remove();
      const error = addMessage("error", "error: " + r.error); error.setAttribute("role", "alert");
      if (!$("message").value) $("message").value = asked.content;
      followConversation();
    } else {
      // Stopped: what arrived is kept, in the history too, so the next turn follows it.
      addTurn("assistant", r.text, msg);
      if (r.ended === "stopped") msg.classList.add("stopped");
    }
  }
  document.body.dataset.done = r.ended;
}
async function ask(said) {
  addTurn("user", said, addMessage("user", said));
  await reply();
}
async function sendMessage() {
  const said = $("message").value;
  if (!said.trim() || controller) return;
  $("message").value = "";
  await ask(said);
  $("message").focus();
}
// Regenerate: the reply is dropped and asked for again with the same history (a fresh seed gives a new one).
function regenerate(turn) {
  const index = turns.indexOf(turn);
  if (controller || index !== turns.length - 1) return;
  dropTurns(index);
  reply();
}
// Edit: the message becomes a box of its text; sending it drops the turns from it on and sends the new text.
function editTurn(turn) {
  const msg = turn.element;
  if (controller || msg.querySelector(".editor")) return;
  const form = document.createElement("form"), area = document.createElement("textarea"), row = document.createElement("div");
  const save = document.createElement("button"), cancel = document.createElement("button");
  form.className = "editor"; area.value = turn.content; area.setAttribute("aria-label", "edited message");
  save.type = "submit"; save.textContent = "Send"; cancel.type = "button"; cancel.textContent = "Cancel";
  row.append(cancel, save); form.append(area, row);
  for (const part of msg.children) part.hidden = true;
  msg.appendChild(form);
  const closeEditor = () => { form.remove(); for (const part of msg.children) part.hidden = false; };
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const index = turns.indexOf(turn);
    if (!area.value.trim() || controller || index < 0) return;
    dropTurns(index);
    ask(area.value);
  });
  cancel.addEventListener("click", closeEditor);
  area.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); form.requestSubmit(); }
    if (e.key === "Escape") closeEditor();
  });
  area.focus();
}
// Copy: the reply's text as the model wrote it (its Markdown); where the page is not a secure context (plain
// http to another host) the clipboard API is absent and the older copy command does it.
async function copyText(text, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch (e) {
    const area = document.createElement("textarea");
    area.value = text; area.style.position = "fixed"; area.style.opacity = "0";
    document.body.appendChild(area); area.select(); document.execCommand("copy"); area.remove();
  }
  button.textContent = "Copied";
  setTimeout(() => { button.textContent = "Copy"; }, 1500);
}
function newConversation() {
  if (controller && !$("send").disabled) controller.abort();  // the running request is a reply (Send is its Stop)
  conversation++; turns = []; $("conversation").textContent = "";
  $("message").focus();
}

// The completion view: the prompt, its text, its canvas and stats line.
async function complete() {
  if (controller) return;
  $("output").textContent = "";
  const r = await stream(false, { prompt: $("prompt").value },
                         { show: (text) => { $("output").textContent = text; }, canvas: $("canvas"), stats: $("stats") },
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
