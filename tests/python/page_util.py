# Shared by the web page tests: Debian's Chromium driven by Playwright for Python (no browser download), and
# one request of the page run to its end.
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


def run(page):
    """Clicks Go and waits for the page to say the request is done; returns how it ended."""
    page.evaluate("() => { delete document.body.dataset.done; }")
    page.click("#go")
    page.wait_for_function("() => document.body.dataset.done", timeout=60_000)
    return page.evaluate("() => document.body.dataset.done")


def open_page(page, sent):
    """Loads the page, records every POST body it sends into `sent`, and returns the picker's models."""
    import json
    page.on("request", lambda r: sent.append(json.loads(r.post_data)) if r.method == "POST" else None)
    page.goto(BASE + "/")
    assert page.title() == "canvas serve"
    page.wait_for_function("() => document.body.dataset.models", timeout=10_000)
    return page.locator("#model option").all_text_contents()
