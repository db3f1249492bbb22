# The web page of canvas serve (a masked model) in headless Chromium: the model picker lists the served model;
# a prompt is submitted, drafts of the canvas are drawn with masked cells, the final text and the speed line
# appear; a long generation is stopped with the Stop button and the page is ready again. With
# CANVAS_SCREENSHOT=FILE.png it also saves a mid-decode frame for the docs.
# Run by run_tests.sh (ctest ServeCli.WebPageInChromium).
import os
import re
import time

from page_util import open_page, page, run  # noqa: F401 (page is a fixture)


def test_page_draws_the_canvas_and_stops(page):
    sent = []
    models = open_page(page, sent)
    assert len(models) == 1, f"models: {models}"

    page.fill("#prompt", "And God said")
    page.fill("#max_tokens", "64")
    page.select_option("#mode", "diffusion")
    # Record how many masked cells each drawn draft had, as it is drawn.
    page.evaluate("""() => {
      window.maskedPerDraft = [];
      new MutationObserver(() => {
        const cells = document.querySelectorAll("#canvas .cell");
        if (cells.length) window.maskedPerDraft.push(document.querySelectorAll("#canvas .cell.masked").length);
      }).observe(document.getElementById("canvas"), {childList: true});
    }""")
    assert run(page) == "1", page.text_content("#stats")
    assert sent[-1]["model"] == models[0]
    # The page counts the drafts it draws; the observer sees batches of them (a batch per delivery of stream
    # chunks, which the network may group), so only the page's count is exact.
    drawn = int(page.evaluate("() => document.body.dataset.drafts"))
    assert drawn >= 8, f"drafts drawn: {drawn}"
    masked = page.evaluate("() => window.maskedPerDraft")
    assert len(masked) >= 1, "the canvas was drawn"
    assert masked[0] > 0, "the first draft shows masked positions"
    assert masked[-1] == 0, "the last draft is fully committed"
    cells = page.locator("#canvas .cell").count()
    assert 0 < cells <= 64, f"cells: {cells}"
    stats = page.text_content("#stats")
    assert re.search(r"tokens/s", stats) and re.search(r"tokens per forward", stats), stats
    assert len(page.text_content("#output")) > 0, "the final text is shown"

    # Stop: an AR generation slowed by a throttled network (this model writes its 100 tokens in well under a
    # second), stopped once text has arrived; the page is ready again at once.
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.emulateNetworkConditions",
             {"offline": False, "latency": 0, "downloadThroughput": 3000, "uploadThroughput": -1})
    page.select_option("#mode", "ar")
    page.fill("#max_tokens", "100")
    page.evaluate("() => { delete document.body.dataset.done; }")
    page.click("#go")
    page.wait_for_function("() => document.getElementById('output').textContent.length > 20", timeout=60_000)
    assert page.is_disabled("#go")
    t0 = time.monotonic()
    page.click("#stop")
    page.wait_for_function("() => document.body.dataset.done", timeout=10_000)
    assert page.evaluate("() => document.body.dataset.done") == "stopped"
    assert time.monotonic() - t0 < 5, "stopped within 5 s"
    assert not page.is_disabled("#go")
    assert page.is_disabled("#stop")
    assert "stopped" in page.text_content("#stats")
    cdp.send("Network.emulateNetworkConditions",
             {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})

    screenshot = os.environ.get("CANVAS_SCREENSHOT")
    if screenshot:
        # A mid-decode frame for the docs: run again and capture while positions are still masked.
        page.select_option("#mode", "diffusion")
        page.fill("#max_tokens", "96")
        page.fill("#block_length", "32")
        page.evaluate("() => { delete document.body.dataset.done; }")
        page.click("#go")
        page.wait_for_function("""() => {
          const m = document.querySelectorAll("#canvas .cell.masked").length;
          return m > 20 && m < 60;
        }""", timeout=60_000, polling=5)
        page.screenshot(path=screenshot, full_page=True)
        page.wait_for_function("() => document.body.dataset.done", timeout=60_000)
    print(f"page test passed: {drawn} drafts drawn, masked cells {masked[0]} -> 0; {stats}; stop works")
