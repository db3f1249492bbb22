// The web page of canvas serve in headless Chromium (Debian's chromium, driven by playwright-core).
// Usage: node page.test.mjs http://127.0.0.1:PORT [SCREENSHOT.png] [--chat]
// - default (a masked model): the model picker lists the served model; a prompt is submitted, drafts of
//   the canvas are drawn with masked cells, the final text and the speed line appear; a long generation is
//   stopped with the Stop button and the page is ready again.
// - --chat (a base and a chat model, in that order): ticking "chat" picks the chat model in the picker; a
//   two-turn conversation, whose drafts draw a box for each token of the text and none for the end of
//   turn or padding (draft.pad); the second request carries the first exchange, and "New conversation"
//   clears it; unticking "chat" picks the base model again.
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

const args = process.argv.slice(2);
const chatMode = args.includes("--chat");
const [base, screenshot] = args.filter((a) => a !== "--chat");
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const browser = await chromium.launch({ executablePath, headless: true, args: ["--no-sandbox"] });

async function run(page) {
  await page.evaluate(() => { delete document.body.dataset.done; });
  await page.click("#go");
  await page.waitForFunction(() => document.body.dataset.done, null, { timeout: 60_000 });
  return page.evaluate(() => document.body.dataset.done);
}

try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 720 } });
  const sent = [];
  page.on("request", (r) => { if (r.method() === "POST") sent.push(JSON.parse(r.postData())); });
  await page.goto(base + "/");
  assert.equal(await page.title(), "canvas serve");
  await page.waitForFunction(() => document.body.dataset.models, null, { timeout: 10_000 });
  const models = await page.locator("#model option").allTextContents();
  assert.equal(models.length, chatMode ? 2 : 1, `models: ${models}`);

  if (chatMode) {
    assert.equal(await page.inputValue("#model"), models[0], "the base model is picked at first");
    await page.check("#chat");
    assert.equal(await page.inputValue("#model"), models[1], "chat picks the chat model");
    await page.selectOption("#mode", "ar");
    await page.fill("#max_tokens", "24");
    await page.fill("#prompt", "Who made the light?");
    assert.equal(await run(page), "1", await page.textContent("#stats"));
    assert.equal(await page.locator("#conversation .turn").count(), 2);
    const first = await page.textContent("#conversation .turn.assistant");
    assert.ok(first.length > 0, "the first reply is shown in the conversation");
    assert.equal(await page.inputValue("#prompt"), "", "the prompt box is cleared for the next turn");
    await page.fill("#prompt", "And then?");
    await page.selectOption("#mode", "diffusion");  // its answers end within the canvas, then padding
    assert.equal(await run(page), "1", await page.textContent("#stats"));
    // The last draft: a box per token of the text, none for the end of turn or the padding after it.
    const stats = await page.textContent("#stats");
    const tokens = Number(stats.match(/· (\d+) tokens ·/)[1]);
    assert.equal(await page.locator("#canvas .cell").count(), tokens, stats);
    assert.ok(tokens < 24, `the answer ended before max_tokens: ${stats}`);
    assert.equal(await page.locator("#conversation .turn").count(), 4);
    const second = sent[sent.length - 1];
    assert.equal(second.model, models[1]);
    assert.deepEqual(second.messages.map((m) => m.role), ["user", "assistant", "user"]);
    assert.equal(second.messages[1].content, first, "the second request carries the first reply");
    await page.click("#reset");
    assert.equal(await page.locator("#conversation .turn").count(), 0);
    await page.uncheck("#chat");
    assert.equal(await page.inputValue("#model"), models[0], "unticking chat picks the base model");
    console.log(`page chat test passed: two turns; first reply ${JSON.stringify(first)}`);
  } else {
    await page.fill("#prompt", "And God said");
    await page.fill("#max_tokens", "64");
    await page.selectOption("#mode", "diffusion");
    // Record how many masked cells each drawn draft had, as it is drawn.
    await page.evaluate(() => {
      window.maskedPerDraft = [];
      new MutationObserver(() => {
        const cells = document.querySelectorAll("#canvas .cell");
        if (cells.length) window.maskedPerDraft.push(document.querySelectorAll("#canvas .cell.masked").length);
      }).observe(document.getElementById("canvas"), { childList: true });
    });
    assert.equal(await run(page), "1", await page.textContent("#stats"));
    assert.equal(sent[sent.length - 1].model, models[0]);
    // The page counts the drafts it draws; the observer sees batches of them (a batch per delivery of
    // stream chunks, which the network may group), so only the page's count is exact.
    const drawn = Number(await page.evaluate(() => document.body.dataset.drafts));
    assert.ok(drawn >= 8, `drafts drawn: ${drawn}`);
    const masked = await page.evaluate(() => window.maskedPerDraft);
    assert.ok(masked.length >= 1, "the canvas was drawn");
    assert.ok(masked[0] > 0, "the first draft shows masked positions");
    assert.equal(masked[masked.length - 1], 0, "the last draft is fully committed");
    const cells = await page.locator("#canvas .cell").count();
    assert.ok(cells > 0 && cells <= 64, `cells: ${cells}`);
    const stats = await page.textContent("#stats");
    assert.match(stats, /tokens\/s/);
    assert.match(stats, /tokens per forward/);
    const text = await page.textContent("#output");
    assert.ok(text.length > 0, "the final text is shown");

    // Stop: an AR generation slowed by a throttled network (this model writes its 100 tokens in well
    // under a second), stopped once text has arrived; the page is ready again at once.
    const cdp = await page.context().newCDPSession(page);
    await cdp.send("Network.emulateNetworkConditions",
                   { offline: false, latency: 0, downloadThroughput: 3000, uploadThroughput: -1 });
    await page.selectOption("#mode", "ar");
    await page.fill("#max_tokens", "100");
    await page.evaluate(() => { delete document.body.dataset.done; });
    await page.click("#go");
    await page.waitForFunction(() => document.getElementById("output").textContent.length > 20, null, { timeout: 60_000 });
    assert.equal(await page.isDisabled("#go"), true);
    const t0 = Date.now();
    await page.click("#stop");
    await page.waitForFunction(() => document.body.dataset.done, null, { timeout: 10_000 });
    assert.equal(await page.evaluate(() => document.body.dataset.done), "stopped");
    assert.ok(Date.now() - t0 < 5000, "stopped within 5 s");
    assert.equal(await page.isDisabled("#go"), false);
    assert.equal(await page.isDisabled("#stop"), true);
    assert.match(await page.textContent("#stats"), /stopped/);
    await cdp.send("Network.emulateNetworkConditions",
                   { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 });

    if (screenshot) {
      // A mid-decode frame for the docs: run again and capture while positions are still masked.
      await page.selectOption("#mode", "diffusion");
      await page.fill("#max_tokens", "96");
      await page.fill("#block_length", "32");
      await page.evaluate(() => { delete document.body.dataset.done; });
      await page.click("#go");
      await page.waitForFunction(() => {
        const m = document.querySelectorAll("#canvas .cell.masked").length;
        return m > 20 && m < 60;
      }, null, { timeout: 60_000, polling: 5 });
      await page.screenshot({ path: screenshot, fullPage: true });
      await page.waitForFunction(() => document.body.dataset.done, null, { timeout: 60_000 });
    }
    console.log(`page test passed: ${drawn} drafts drawn, masked cells ${masked[0]} -> 0; ${stats}; stop works`);
  }
} finally {
  await browser.close();
}
