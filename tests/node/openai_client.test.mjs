// canvas serve through the official `openai` npm client: completion and chat, streaming and not, and
// errors in OpenAI's shape. Usage: node openai_client.test.mjs http://127.0.0.1:PORT
import assert from "node:assert/strict";
import { test } from "node:test";
import OpenAI from "openai";

const base = process.argv[2] || process.env.CANVAS_SERVE_URL;
assert.ok(base, "give the server's URL (http://127.0.0.1:PORT)");
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60_000 });

test("models lists the served model, and a request names it by its id", async () => {
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].object, "model");
  const id = models.data[0].id;
  assert.ok(!id.endsWith(".gguf"), `the id is the file's stem: ${id}`);
  const r = await client.completions.create({ model: id, prompt: "And", max_tokens: 4, mode: "ar" });
  assert.equal(r.model, id);
  assert.equal(r.canvas.mode, "ar");
});

test("completion, not streamed", async () => {
  const r = await client.completions.create({ model: "canvas", prompt: "And God said", max_tokens: 16, mode: "diffusion" });
  assert.equal(r.object, "text_completion");
  assert.equal(typeof r.choices[0].text, "string");
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  assert.equal(r.usage.forward_passes, 16);
  assert.ok(r.usage.tokens_per_pass > 0);
  assert.equal(r.usage.tokens_per_forward, r.usage.tokens_per_pass);
});

test("completion, streamed: deltas add up to the non-streamed text", async () => {
  const body = { model: "canvas", prompt: "And God said", max_tokens: 16, mode: "diffusion" };
  const whole = await client.completions.create(body);
  const stream = await client.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let text = "", usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices.length) text += chunk.choices[0].text;
  }
  assert.equal(text, whole.choices[0].text);
  assert.ok(chunks >= 2);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
});

test("chat, not streamed", async () => {
  const r = await client.chat.completions.create({
    model: "canvas", messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hi" }],
    max_tokens: 8, mode: "ar",
  });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(typeof r.choices[0].message.content, "string");
});

test("chat, streamed", async () => {
  const body = { model: "canvas", messages: [{ role: "user", content: "Hi" }], max_tokens: 8, mode: "ar", seed: 1 };
  const whole = await client.chat.completions.create(body);
  const stream = await client.chat.completions.create({ ...body, stream: true });
  let text = "", role = null, finish = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, "chat.completion.chunk");
    const c = chunk.choices[0];
    if (c.delta.role) role = c.delta.role;
    text += c.delta.content || "";
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.equal(role, "assistant");
  assert.equal(text, whole.choices[0].message.content);
  assert.ok(finish === "stop" || finish === "length");
});

test("logprobs: chat (top_logprobs) and completions (legacy shape), AR at temperature 0", async () => {
  const chat = await client.chat.completions.create({
    model: "canvas", messages: [{ role: "user", content: "Hi" }], max_tokens: 6, mode: "ar", temperature: 0,
    logprobs: true, top_logprobs: 3,
  });
  const content = chat.choices[0].logprobs.content;
  assert.equal(content.length, chat.usage.completion_tokens);
  for (const entry of content) {
    assert.equal(entry.top_logprobs.length, 3);
    assert.equal(entry.logprob, entry.top_logprobs[0].logprob);  // greedy: the most likely token
    assert.deepEqual(entry.bytes, [...Buffer.from(entry.token, "utf8")]);
  }
  const r = await client.completions.create({
    model: "canvas", prompt: "And God said", max_tokens: 6, mode: "ar", temperature: 0, logprobs: 2, echo: true,
  });
  const lp = r.choices[0].logprobs;
  assert.ok(r.choices[0].text.startsWith("And God said"));
  assert.equal(lp.tokens.length, lp.token_logprobs.length);
  assert.equal(lp.tokens.length, lp.text_offset.length);
  assert.equal(lp.token_logprobs[0], null);  // an echoed prompt token
  assert.equal(lp.tokens.length, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test("errors come back as OpenAI errors", async () => {
  await assert.rejects(
    client.completions.create({ model: "canvas", prompt: "a", max_tokens: 0 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /max_tokens/.test(e.message) && e.param === "max_tokens",
  );
  await assert.rejects(
    client.chat.completions.create({ model: "canvas", messages: [{ role: "user", content: "a" }], colour: "blue" }),
    (e) => e instanceof OpenAI.BadRequestError && /unknown field 'colour'/.test(e.message),
  );
  await assert.rejects(
    client.completions.create({ model: "canvas", prompt: "a".repeat(400) }),
    (e) => e.status === 400 && e.code === "context_length_exceeded",
  );
});
