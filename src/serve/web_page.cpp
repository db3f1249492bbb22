// The web page canvas serve shows at "/": a prompt box (or a conversation, in chat mode), a model picker,
// the decoding knobs, Generate / Stop / New conversation, and the canvas drawn live from the stream's
// drafts (self-contained: no CDN, no build step).
#include "serve/http_server.h"

namespace canvas::serve {

const char* web_page_html() {
  return R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>canvas serve</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 60em; color: #222; background: #fafafa; }
h1 { font-size: 1.3em; } textarea { width: 100%; height: 5em; font: inherit; }
fieldset { border: 1px solid #ccc; margin: .8em 0; } label { margin-right: 1em; white-space: nowrap; }
input[type=number] { width: 5em; } #canvas { display: flex; flex-wrap: wrap; gap: 2px; margin: .8em 0; min-height: 2em; }
.cell { font: 14px/1.6 monospace; min-width: .9em; padding: 0 2px; text-align: center; border-radius: 2px; background: #fff; border: 1px solid #ddd; white-space: pre; }
.cell.masked { background: #9aa5b1; color: #9aa5b1; } .cell.noise { background: #f3e6c4; color: #8a6d1f; }
.cell.new { background: #c7f0c2; } .cell.drafted { background: #f4f4f4; color: #888; border-style: dashed; } #stats { color: #555; font-size: .9em; } #output { white-space: pre-wrap; background: #fff; border: 1px solid #ddd; padding: .6em; min-height: 2em; }
#conversation:empty { display: none; } #conversation { margin: .8em 0; }
.turn { white-space: pre-wrap; padding: .5em .7em; margin: .4em 0; border-radius: 6px; border: 1px solid #ddd; }
.turn.user { background: #eef4ff; margin-left: 4em; } .turn.assistant { background: #fff; margin-right: 4em; }
.turn.stopped::after { content: " [stopped]"; color: #b00; font-size: .85em; }
button { font: inherit; padding: .3em 1.2em; } .error { color: #b00; }
</style></head><body>
<h1>canvas serve</h1>
<div id="conversation" aria-label="conversation"></div>
<textarea id="prompt" placeholder="Prompt">And God said</textarea>
<fieldset><legend>Decoding</legend>
<label>model <select id="model"></select></label>
<label><input type="checkbox" id="chat"> chat</label>
<label>mode <select id="mode"><option>auto</option><option>diffusion</option><option>ar</option><option>verify</option></select></label>
<label>max_tokens <input type="number" id="max_tokens" value="64" min="1"></label>
<label>steps <input type="number" id="steps" min="1" placeholder="auto"></label>
<label>block_length <input type="number" id="block_length" min="1" placeholder="auto"></label>
<label>threshold <input type="number" id="threshold" min="0" max="1" step="0.05" placeholder="0"></label>
<label>temperature <input type="number" id="temperature" value="0" min="0" step="0.1"></label>
<label>cache <select id="cache"><option>prefix</option><option>none</option><option>dual</option></select></label>
<label>API key <input type="password" id="key" size="10"></label>
</fieldset>
<button id="go">Generate</button> <button id="stop" disabled>Stop</button> <button id="reset">New conversation</button>
<div id="canvas" aria-label="canvas"></div>
<div id="stats"></div>
<h2 style="font-size:1em">Text</h2><div id="output"></div>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
function num(id) { const v = $(id).value; return v === "" ? undefined : Number(v); }
function headers() {
  const h = { "Content-Type": "application/json" };
  if ($("key").value) h.Authorization = "Bearer " + $("key").value;
  return h;
}
// The models the server serves (GET /v1/models), in the picker; the request names the one chosen.
// Chat models (canvas.chat) are marked; ticking "chat" picks the first of them, unticking it the first
// other model, as the server does for requests that name none.
async function loadModels() {
  try {
    const res = await fetch("/v1/models", { headers: headers() });
    if (res.status === 503) setTimeout(loadModels, 1000);  // still loading the models
    if (!res.ok) return;
    const list = await res.json(), picker = $("model"), chosen = picker.value;
    picker.textContent = "";
    for (const m of list.data || []) {
      const o = document.createElement("option"); o.value = o.textContent = m.id;
      o.dataset.chat = m.canvas && m.canvas.chat ? "1" : ""; picker.appendChild(o);
    }
    if (chosen) picker.value = chosen; else suitModel();
    document.body.dataset.models = String(picker.options.length);
  } catch (e) { /* the page still works without the list: the server's default model answers */ }
}
function suitModel() {
  const picker = $("model"), want = $("chat").checked ? "1" : "", selected = picker.selectedOptions[0];
  if (!selected || selected.dataset.chat === want) return;
  const suited = [...picker.options].find((o) => o.dataset.chat === want);
  if (suited) $("model").value = suited.value;
}
// The conversation so far (chat mode): the messages sent with each request, and their view.
let messages = [];
function addTurn(role, text) {
  const div = document.createElement("div");
  div.className = "turn " + role; div.textContent = text;
  $("conversation").appendChild(div);
  return div;
}
function resetConversation() { messages = []; $("conversation").textContent = ""; $("output").textContent = ""; }
// Padding and end-of-text positions (draft.pad) get no box: only text the model keeps is drawn. In verify
// mode the positions from draft.drafts on are the drafts being checked (dashed), the ones before kept.
function draw(draft, previous) {
  const box = $("canvas"); box.textContent = "";
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
let controller = null;
async function generate() {
  const chat = $("chat").checked, body = { stream: true, canvas_draft: true, stream_options: { include_usage: true } };
  let turn = null;
  if (chat) {
    const said = $("prompt").value;
    messages.push({ role: "user", content: said });
    addTurn("user", said);
    turn = addTurn("assistant", "");
    $("prompt").value = "";
    body.messages = messages.slice();
  } else {
    body.prompt = $("prompt").value;
  }
  for (const k of ["max_tokens", "steps", "block_length", "threshold", "temperature"]) if (num(k) !== undefined) body[k] = num(k);
  body.mode = $("mode").value; body.cache = $("cache").value;
  if ($("model").value) body.model = $("model").value;
  $("output").textContent = ""; $("stats").textContent = "waiting…"; $("stats").className = "";
  $("go").disabled = true; $("stop").disabled = false;
  delete document.body.dataset.done;
  controller = new AbortController();
  const t0 = performance.now(); let text = "", previous = null, draft = null, usage = null, drafts = 0;
  const show = () => { $("output").textContent = text; if (turn) turn.textContent = text; };
  try {
    const res = await fetch(chat ? "/v1/chat/completions" : "/v1/completions",
                            { method: "POST", headers: headers(), body: JSON.stringify(body), signal: controller.signal });
    if (!res.ok) { const e = await res.json(); throw new Error(e.error ? e.error.message : res.statusText); }
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
        if (c) { text += chat ? (c.delta.content || "") : (c.text || ""); show(); }
        // Every chunk names its mode in chunk.canvas; drafts (canvas_draft) also carry the tokens.
        if (chunk.canvas && chunk.canvas.tokens) { draw(chunk.canvas, previous); previous = chunk.canvas.tokens; draft = chunk.canvas; drafts++; }
        const secs = (performance.now() - t0) / 1000, kept = committed(draft);
        if (draft) $("stats").textContent = `${draft.mode} · step ${draft.step} · ${draft.passes} forward passes · ` +
          `${(kept / secs).toFixed(1)} tokens/s · ${draft.passes ? (kept / draft.passes).toFixed(2) : 0} tokens per forward`;
      }
    }
    const secs = (performance.now() - t0) / 1000;
    if (usage) $("stats").textContent = `${draft ? draft.mode : ""} · done in ${secs.toFixed(2)} s · ${usage.completion_tokens} tokens · ` +
      `${(usage.completion_tokens / secs).toFixed(1)} tokens/s · ${usage.forward_passes} forward passes · ` +
      `${usage.tokens_per_forward.toFixed(2)} tokens per forward · ${drafts} drafts drawn`;
    if (chat) messages.push({ role: "assistant", content: text });
    document.body.dataset.done = "1";
  } catch (e) {
    if (e.name === "AbortError") {
      // Stopped: what arrived is kept, in the conversation too, so the next turn follows it.
      if (chat) { messages.push({ role: "assistant", content: text }); turn.classList.add("stopped"); }
      $("stats").textContent = `stopped after ${((performance.now() - t0) / 1000).toFixed(2)} s · ${text.length} characters kept`;
      document.body.dataset.done = "stopped";
    } else {
      if (chat) {  // the turn did not happen: its message goes back to the prompt box
        turn.remove(); $("conversation").lastChild.remove(); $("prompt").value = messages.pop().content;
      }
      $("stats").textContent = "error: " + e.message; $("stats").className = "error"; document.body.dataset.done = "error";
    }
  } finally { $("go").disabled = false; $("stop").disabled = true; controller = null; }
}
$("go").addEventListener("click", generate);
$("stop").addEventListener("click", () => { if (controller) controller.abort(); });
$("reset").addEventListener("click", resetConversation);
$("key").addEventListener("change", loadModels);
$("chat").addEventListener("change", suitModel);
$("prompt").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && $("chat").checked && !$("go").disabled) { e.preventDefault(); generate(); }
});
loadModels();
</script></body></html>
)HTML";
}

}  // namespace canvas::serve
