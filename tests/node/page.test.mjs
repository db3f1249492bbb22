// The web page of canvas serve in headless Chromium (Debian's chromium, driven by playwright-core): the
// page loads, a prompt is submitted, drafts of the canvas are drawn with masked cells, the final text and
// the speed line appear. Usage: node page.test.mjs http://127.0.0.1:PORT [SCREENSHOT.png]
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

const [base, screenshot] = process.argv.slice(2);
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const browser = await chromium.launch({ executablePath, headless: true, args: ["--no-sandbox"] });
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 720 } });
  await page.goto(base + "/");
  assert.equal(await page.title(), "canvas serve");
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
  await page.click("#go");
  await page.waitForFunction(() => document.body.dataset.done, null, { timeout: 60_000 });
  assert.equal(await page.evaluate(() => document.body.dataset.done), "1", await page.textContent("#stats"));
  // The page counts the drafts it draws; the observer sees batches of them (a batch per delivery of
  // stream chunks, which the network may group), so only the page's count is exact.
  const drawn = Number(await page.evaluate(() => document.body.dataset.drafts));
  assert.ok(drawn >= 8, `drafts drawn: ${drawn}`);
  const masked = await page.evaluate(() => window.maskedPerDraft);
  assert.ok(masked.length >= 1, "the canvas was drawn");
  assert.ok(masked[0] > 0, "the first draft shows masked positions");
  assert.equal(masked[masked.length - 1], 0, "the last draft is fully committed");
  const cells = await page.locator("#canvas .cell").count();
  assert.equal(cells, 64);
  const stats = await page.textContent("#stats");
  assert.match(stats, /tokens\/s/);
  assert.match(stats, /tokens per forward/);
  const text = await page.textContent("#output");
  assert.ok(text.length > 0, "the final text is shown");
  if (screenshot) {
    // A mid-decode frame for the docs: run again and capture while positions are still masked.
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
  console.log(`page test passed: ${drawn} drafts drawn, masked cells ${masked[0]} -> 0; ${stats}`);
} finally {
  await browser.close();
}
