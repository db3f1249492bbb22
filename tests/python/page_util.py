# Shared by the web page tests: Debian's Chromium driven by Playwright for Python (no browser download), the
# page loaded with its requests recorded, and one request of either view run to its end.
import json
import os

import pytest
from playwright.sync_api import sync_playwright

BASE = os.environ.get("CANVAS_SERVE_URL")


@pytest.fixture(scope="module")
def page():
    assert BASE, "set CANVAS_SERVE_URL (http://127.0.0.1:PORT)"
    executable = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])
        try:
            yield browser.new_page(viewport={"width": 1000, "height": 720})
        finally:
            browser.close()


def open_page(page, sent):
    """Loads the page, records every POST body it sends into `sent`, and returns the picker's models."""
    page.on("request", lambda r: sent.append(json.loads(r.post_data)) if r.method == "POST" else None)
    page.goto(BASE + "/")
    assert page.title() == "canvas serve"
    page.wait_for_function("() => document.body.dataset.models", timeout=10_000)
    return page.locator("#model option").all_text_contents()


def open_settings(page):
    """Unfolds Settings (the knobs are hidden, so not fillable, until then)."""
    assert page.is_hidden("#max_tokens"), "the knobs start folded away"
    page.click("#settings summary")
    assert page.is_visible("#max_tokens")


def wait_done(page):
    page.wait_for_function("() => document.body.dataset.done", timeout=60_000)
    return page.evaluate("() => document.body.dataset.done")


def start(page):
    page.evaluate("() => { delete document.body.dataset.done; }")


def run(page):
    """Completion view: clicks Generate and waits for the page to say the request is done; returns how it ended."""
    start(page)
    page.click("#generate")
    return wait_done(page)


def send(page, text):
    """Chat view: types `text` into the send box, presses Enter and waits for the reply; returns how it ended."""
    start(page)
    page.fill("#message", text)
    page.press("#message", "Enter")
    return wait_done(page)


_devtools = {}


def throttle(page, bytes_per_second):
    """Slows the page's downloads (-1: no limit), so that a stream is still arriving when a test acts on it."""
    if page not in _devtools:  # one DevTools session a page, so that -1 lifts the limit it set
        _devtools[page] = page.context.new_cdp_session(page)
    _devtools[page].send("Network.emulateNetworkConditions",
             {"offline": False, "latency": 0, "downloadThroughput": bytes_per_second, "uploadThroughput": -1})
