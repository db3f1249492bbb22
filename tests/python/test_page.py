# The web page of canvas serve on a model without a chat format (a masked model) in headless Chromium: it
# opens in the completion view, its knobs folded under Settings, the model picker listing the served model;
# a prompt is generated, drafts of the canvas are drawn with masked cells, the final text and the speed line
# appear; a long AR generation (no canvas asked for or drawn) is stopped with the Generate button turned Stop
# and the page is ready again.
# Run by run_tests.sh (ctest ServeCli.WebPageInChromium).
import re
import time

from page_util import open_page, open_settings, page, run, start, throttle, wait_done  # noqa: F401 (page: a fixture)


def test_page_draws_the_canvas_and_stops(page):
    sent = []
    models = open_page(page, sent)
    assert len(models) == 1, f"models: {models}"
    assert page.evaluate("() => document.body.dataset.view") == "completion", "no chat model: the completion view"
    assert page.is_visible("#prompt") and page.is_hidden("#message")
    assert page.get_attribute("#tab-completion", "aria-selected") == "true"
    open_settings(page)

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
    # Unslowed, the whole stream (well under a second) may arrive in one delivery and be drawn at once: the
    # observer would see only the last draft.
    throttle(page, 50000)
    assert run(page) == "1", page.text_content("#stats")
    throttle(page, -1)
    assert sent[-1]["model"] == models[0]
    assert sent[-1]["prompt"] == "And God said" and sent[-1]["mode"] == "diffusion" and sent[-1]["max_tokens"] == 64
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
    assert re.search(r"^diffusion · \d+ tokens · \d+ forward passes", stats), stats
    assert re.search(r"tokens/s", stats) and re.search(r"tokens per forward", stats), stats
    assert len(page.text_content("#output")) > 0, "the final text is shown"

    # Stop: an AR generation slowed by a throttled network (this model writes its 100 tokens in well under a
    # second; an AR chunk carries no canvas, some 170 bytes), stopped once text has arrived; the page is ready
    # again at once. AR draws no canvas.
    throttle(page, 1000)
    page.select_option("#mode", "ar")
    page.fill("#max_tokens", "100")
    start(page)
    page.click("#generate")
    page.wait_for_function("() => document.getElementById('output').textContent.length > 20", timeout=60_000)
    assert page.text_content("#generate") == "Stop", "Generate turns Stop while the text streams"
    t0 = time.monotonic()
    page.click("#generate")
    assert wait_done(page) == "stopped"
    assert time.monotonic() - t0 < 5, "stopped within 5 s"
    assert page.text_content("#generate") == "Generate" and not page.is_disabled("#generate")
    assert len(page.text_content("#output")) > 20, "what arrived is kept"
    assert "stopped" in page.text_content("#stats")
    assert page.is_hidden("#canvas") and page.locator("#canvas .cell").count() == 0 and "canvas_draft" not in sent[-1]
    throttle(page, -1)
    print(f"page test passed: {drawn} drafts drawn, masked cells {masked[0]} -> 0; {stats}; stop works")
