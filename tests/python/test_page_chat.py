# The web page as a chat application in headless Chromium, against a base and a chat model (in that order): it
# opens in the chat view on the chat model with the knobs folded; a two-turn conversation in bubbles whose
# second request carries the first exchange, each reply drawing its canvas while it streams (a box per token
# of the text at the end, none for the end of turn or padding) with its stats line; Stop during a reply
# keeps what arrived, marked stopped, as history; an error (chat with the base model) is said in the
# conversation and the page goes on; New conversation clears it; the completion view is one click away.
# With CANVAS_SCREENSHOT=FILE.png it also saves a frame of a conversation whose reply is being denoised.
# Run by run_tests.sh (ctest ServeCli.WebPageConversationInChromium).
import os
import re
import time

import pytest

from page_util import open_page, open_settings, page, run, send, start, throttle, wait_done  # noqa: F401


@pytest.fixture(scope="module")
def served(page):
    sent = []
    models = open_page(page, sent)
    assert len(models) == 2, f"models: {models}"
    return sent, models


def bubbles(page):
    """The conversation as (role, text) pairs."""
    return page.evaluate("""() => [...document.querySelectorAll("#conversation .msg")].map(
        (m) => [m.classList[1], m.querySelector(".bubble").textContent])""")


def last_reply(page, part):
    return page.locator("#conversation .msg.assistant").last.locator(part)


def test_opens_on_chat_with_the_knobs_folded(page, served):
    sent, models = served
    assert page.evaluate("() => document.body.dataset.view") == "chat"
    assert page.get_attribute("#tab-chat", "aria-selected") == "true"
    assert page.input_value("#model") == models[1], "the chat model is picked at first"
    assert page.is_visible("#message") and page.is_visible("#send") and page.is_hidden("#prompt")
    assert page.text_content("#send") == "Send"
    open_settings(page)
    # Shift+Enter starts a new line in the send box; it sends nothing.
    page.fill("#message", "one")
    page.press("#message", "Shift+Enter")
    page.type("#message", "two")
    assert page.input_value("#message") == "one\ntwo" and not sent
    page.fill("#message", "")


def test_two_turn_conversation(page, served):
    sent, models = served
    page.select_option("#mode", "ar")
    page.fill("#max_tokens", "24")
    assert send(page, "Who made the light?") == "1", page.text_content("#conversation")
    said = bubbles(page)
    assert [role for role, _ in said] == ["user", "assistant"] and said[0][1] == "Who made the light?"
    first = said[1][1]
    assert len(first) > 0, "the first reply is shown in its bubble"
    assert re.search(r"^ar · \d+ tokens · \d+ forward passes", last_reply(page, ".stats").text_content())
    assert page.input_value("#message") == "", "the send box is cleared for the next turn"

    # The second turn, in diffusion: the reply's canvas is drawn while it streams (the cells of a
    # uniform-state model's noise drafts are tinted) and folds away the first reply's.
    page.select_option("#mode", "diffusion")  # its answers end within the canvas, then padding
    page.evaluate("""() => {
      window.cellsWhileStreaming = [];
      new MutationObserver(() => {
        const replies = document.querySelectorAll("#conversation .msg.assistant");
        const canvas = replies.length === 2 && replies[1].querySelector(".canvas");
        if (canvas && !document.body.dataset.done)
          window.cellsWhileStreaming.push([canvas.querySelectorAll(".cell").length, canvas.querySelectorAll(".cell.noise").length]);
      }).observe(document.getElementById("conversation"), {childList: true, subtree: true});
    }""")
    # Unslowed, the whole reply may arrive in one delivery and be drawn at once: the observer would see only
    # the last draft.
    throttle(page, 20000)
    assert send(page, "And then?") == "1", page.text_content("#conversation")
    throttle(page, -1)
    streaming = page.evaluate("() => window.cellsWhileStreaming")
    assert any(cells > 0 and noise == cells for cells, noise in streaming), f"noise drafts drawn: {streaming[:5]}"
    # The last draft: a box per token of the text, none for the end of turn or the padding after it.
    stats = last_reply(page, ".stats").text_content()
    tokens = int(re.search(r"^diffusion · (\d+) tokens ·", stats).group(1))
    assert last_reply(page, ".canvas .cell").count() == tokens, stats
    assert tokens < 24, f"the answer ended before max_tokens: {stats}"
    assert page.locator("#conversation .canvas:visible").count() == 1, "earlier canvases fold away"
    assert [role for role, _ in bubbles(page)] == ["user", "assistant", "user", "assistant"]
    second = sent[-1]
    assert second["model"] == models[1] and second["stream"] is True and second["canvas_draft"] is True
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert second["messages"][0]["content"] == "Who made the light?"
    assert second["messages"][1]["content"] == first, "the second request carries the first reply"
    print(f"two turns: first reply {first!r}; {stats}")


def test_stop_keeps_the_reply(page, served):
    sent, models = served
    page.click("#new-conversation")
    assert page.locator("#conversation .msg").count() == 0
    page.select_option("#mode", "ar")
    page.fill("#max_tokens", "200")
    throttle(page, 1500)  # each chunk carries the canvas: the reply trickles in
    requests = len(sent)
    start(page)
    page.fill("#message", "Tell me of the flood.")
    page.press("#message", "Enter")
    page.wait_for_function("""() => {
      const r = document.querySelectorAll("#conversation .msg.assistant .bubble");
      return r.length === 1 && r[0].textContent.length > 0;
    }""", timeout=60_000)
    assert page.text_content("#send") == "Stop", "Send turns Stop while the reply streams"
    # Enter while a reply streams neither sends nor stops.
    page.fill("#message", "ignored")
    page.press("#message", "Enter")
    t0 = time.monotonic()
    page.click("#send")
    assert wait_done(page) == "stopped"
    assert time.monotonic() - t0 < 5, "stopped within 5 s"
    throttle(page, -1)
    kept = bubbles(page)[1][1]
    assert len(kept) > 0 and page.locator("#conversation .msg.assistant.stopped").count() == 1
    assert "stopped" in last_reply(page, ".stats").text_content()
    assert page.text_content("#send") == "Send" and not page.is_disabled("#send")
    assert len(sent) == requests + 1, "Enter sent nothing while the reply streamed"
    # The page is ready again, and the stopped reply is the history of the next turn.
    page.fill("#max_tokens", "8")
    assert send(page, "Go on.") == "1"
    assert [m["content"] for m in sent[-1]["messages"]] == ["Tell me of the flood.", kept, "Go on."]
    assert page.locator("#conversation .msg").count() == 4


def test_error_in_the_conversation(page, served):
    sent, models = served
    page.click("#new-conversation")
    page.select_option("#model", models[0])
    assert "no chat format" in page.text_content("#model-note")
    assert send(page, "Hello?") == "error"
    said = bubbles(page)
    assert len(said) == 1 and said[0][0] == "error" and "chat" in said[0][1], said
    assert page.input_value("#message") == "Hello?", "the message goes back to the send box"
    assert page.text_content("#send") == "Send" and not page.is_disabled("#send")
    page.select_option("#model", models[1])
    assert page.text_content("#model-note") == ""
    assert send(page, "Hello?") == "1", "the page goes on after the error"
    assert [m["role"] for m in sent[-1]["messages"]] == ["user"], "the failed turn is not history"
    assert [role for role, _ in bubbles(page)] == ["error", "user", "assistant"]
    page.click("#new-conversation")
    assert page.locator("#conversation .msg").count() == 0


def test_completion_view_one_click_away(page, served):
    sent, models = served
    page.click("#tab-completion")
    assert page.get_attribute("#tab-completion", "aria-selected") == "true"
    assert page.is_visible("#prompt") and page.is_hidden("#message")
    assert page.input_value("#model") == models[0], "the completion view picks the base model"
    page.fill("#prompt", "And God said")
    page.select_option("#mode", "diffusion")
    page.fill("#max_tokens", "16")
    assert run(page) == "1", page.text_content("#stats")
    assert sent[-1]["prompt"] == "And God said" and "messages" not in sent[-1] and sent[-1]["model"] == models[0]
    assert len(page.text_content("#output")) > 0 and page.locator("#canvas .cell").count() > 0
    assert re.search(r"^diffusion · \d+ tokens", page.text_content("#stats"))
    page.click("#tab-chat")
    assert page.input_value("#model") == models[1], "the chat view picks the chat model again"
    assert page.is_visible("#message")


def test_screenshot(page, served):
    screenshot = os.environ.get("CANVAS_SCREENSHOT")
    if not screenshot:
        pytest.skip("CANVAS_SCREENSHOT is not set")
    # A conversation whose second reply is being denoised: captured while its canvas is noise.
    page.fill("#max_tokens", "48")
    page.click("#settings summary")  # folded, as a user first sees it
    assert send(page, "Who made the light?") == "1"
    throttle(page, 4000)
    start(page)
    page.fill("#message", "And what did he call the darkness?")
    page.press("#message", "Enter")
    page.wait_for_function("""() => {
      const r = document.querySelectorAll("#conversation .msg.assistant");
      const step = /step ([0-9]+)/.exec(r.length === 2 ? r[1].querySelector(".stats").textContent : "");
      return step && Number(step[1]) >= 4 && r[1].querySelectorAll(".cell.noise").length > 10;
    }""", timeout=60_000, polling=5)
    page.screenshot(path=screenshot)
    throttle(page, -1)
    wait_done(page)
