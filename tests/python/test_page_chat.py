# The web page as a chat application in headless Chromium, against a base and a chat model (in that order): it
# opens in the chat view on the chat model with the knobs folded; a two-turn conversation in bubbles whose
# second request carries the first exchange, an AR reply with no canvas and its stats line in AR's words, a
# diffusion reply drawing its canvas while it streams (a box per token of the text at the end, none for the
# end of turn or padding), a verify reply with its canvas; replies rendered as Markdown (the renderer fed
# directly, and replies whose stream the test serves: bold, lists, fenced code, raw HTML escaped, an AR
# stream's drafts not drawn), Copy putting the reply's own text on the clipboard, Regenerate asking again with
# the same history, Edit of a message of yours dropping the turns after it and sending it anew; Stop during a
# reply keeps what arrived, marked stopped, as history; an error (chat with the base model) is said in the
# conversation and the page goes on; New conversation clears it; the completion view is one click away.
# With CANVAS_SCREENSHOT=FILE.png it also saves a frame of a conversation whose reply is being denoised, and
# FILE-markdown.png: a conversation with a reply in Markdown and the buttons under the bubbles.
# Run by run_tests.sh (ctest ServeCli.WebPageConversationInChromium).
import json
import os
import re
import time

import pytest

from page_util import BASE, open_page, open_settings, page, run, send, start, throttle, wait_done  # noqa: F401


@pytest.fixture(scope="module")
def served(page):
    sent = []
    models = open_page(page, sent)
    assert len(models) == 2, f"models: {models}"
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=BASE)
    return sent, models


def bubbles(page):
    """The conversation as (role, text) pairs."""
    return page.evaluate("""() => [...document.querySelectorAll("#conversation .msg")].map(
        (m) => [m.classList[1], m.querySelector(".bubble").textContent])""")


def said(page):
    """The conversation's turns as the page keeps them (and sends them): (role, text as written) pairs."""
    return [tuple(t) for t in page.evaluate("() => turns.map((t) => [t.role, t.content])")]


def last_reply(page, part):
    return page.locator("#conversation .msg.assistant").last.locator(part)


def serve_next_reply(page, pieces, mode="ar"):
    """Answers the page's next chat request with a stream of `pieces` (in `mode`, each chunk also carrying an
    AR-style draft of the text so far, as `"mode": "auto"` streams do), so that a test knows the reply's text."""
    chunks, text = [], ""
    for piece in pieces:
        text += piece
        chunks.append({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}],
                       "canvas": {"mode": mode, "step": len(chunks) + 1, "passes": len(chunks) + 1,
                                  "tokens": list(text), "pad": [], "noise": False}})
    chunks.append({"choices": [], "canvas": {"mode": mode},
                   "usage": {"prompt_tokens": 5, "completion_tokens": len(pieces), "total_tokens": 5 + len(pieces),
                             "forward_passes": len(pieces), "tokens_per_forward": 1.0}})
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    page.route("**/v1/chat/completions",
               lambda route: route.fulfill(status=200, content_type="text/event-stream", body=body), times=1)
    return text


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
    assert [role for role, _ in bubbles(page)] == ["user", "assistant"] and bubbles(page)[0][1] == "Who made the light?"
    first = said(page)[1][1]
    assert len(first) > 0 and len(bubbles(page)[1][1]) > 0, "the first reply is shown in its bubble"
    # A real reply goes through the Markdown renderer (this model writes none: no raw ** is left either way).
    assert page.evaluate("() => turns[1].element.querySelector('.bubble').innerHTML === renderMarkdown(turns[1].content)")
    assert "**" not in bubbles(page)[1][1]
    # AR has no canvas: none asked for, none drawn, and its stats line says no draft and no forward passes.
    assert "canvas_draft" not in sent[-1] and sent[-1]["mode"] == "ar"
    assert last_reply(page, ".canvas .cell").count() == 0 and last_reply(page, ".canvas").is_hidden()
    stats = last_reply(page, ".stats").text_content()
    assert re.fullmatch(r"ar · \d+ tokens · [\d.]+ s · [\d.]+ tokens/s", stats), stats
    assert page.input_value("#message") == "", "the send box is cleared for the next turn"

    # The second turn, in diffusion: the reply's canvas is drawn while it streams (the cells of a
    # uniform-state model's noise drafts are tinted).
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
    # The last draft: a box per token of the text, none for the end of turn or the padding after it; the
    # stats line in diffusion's words, drafts not among them.
    stats = last_reply(page, ".stats").text_content()
    match = re.fullmatch(r"diffusion · (\d+) tokens · \d+ forward passes · [\d.]+ tokens per forward · [\d.]+ s · "
                         r"[\d.]+ tokens/s", stats)
    assert match, stats
    tokens = int(match.group(1))
    assert last_reply(page, ".canvas .cell").count() == tokens, stats
    assert tokens < 24, f"the answer ended before max_tokens: {stats}"
    assert page.locator("#conversation .canvas:visible").count() == 1, "only the latest canvas is open"
    assert [role for role, _ in bubbles(page)] == ["user", "assistant", "user", "assistant"]
    second = sent[-1]
    assert second["model"] == models[1] and second["stream"] is True and second["canvas_draft"] is True
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert second["messages"][0]["content"] == "Who made the light?"
    assert second["messages"][1]["content"] == first, "the second request carries the first reply"
    print(f"two turns: first reply {first!r}; {stats}")


def test_verify_reply_draws_its_canvas(page, served):
    sent, models = served
    page.click("#new-conversation")
    page.select_option("#mode", "verify")
    page.fill("#max_tokens", "16")
    assert send(page, "Who made the light?") == "1", page.text_content("#conversation")
    assert sent[-1]["mode"] == "verify" and sent[-1]["canvas_draft"] is True
    stats = last_reply(page, ".stats").text_content()
    assert re.fullmatch(r"verify · \d+ tokens · \d+ forward passes · [\d.]+ tokens per forward · [\d.]+ s · "
                        r"[\d.]+ tokens/s", stats), stats
    assert last_reply(page, ".canvas").is_visible() and last_reply(page, ".canvas .cell").count() > 0


def test_markdown_renderer(page, served):
    # The renderer fed directly: each case's HTML parsed into a detached element and read back.
    def render(text):
        return page.evaluate("""(text) => {
          const box = document.createElement("div"); box.innerHTML = renderMarkdown(text);
          const all = (css) => [...box.querySelectorAll(css)];
          return {html: box.innerHTML, strong: all("strong").map((e) => e.textContent), em: all("em").map((e) => e.textContent),
                  li: all("li").map((e) => e.textContent), ol: all("ol").map((e) => e.getAttribute("start")),
                  nested: all("li > ul > li").map((e) => e.textContent), h: all("h1, h2, h3").map((e) => e.tagName + " " + e.textContent),
                  code: all("pre > code").map((e) => [e.className, e.textContent]), inline: all(":not(pre) > code").map((e) => e.textContent),
                  a: all("a").map((e) => [e.getAttribute("href"), e.getAttribute("rel"), e.textContent]),
                  p: all("p").length, br: all("br").length, elements: all("*").map((e) => e.tagName.toLowerCase()), text: box.textContent};
        }""", text)

    r = render("## Steps\n\nFirst **bold** and *italic*, `x = *y*` inline.\nA new line.\n\n"
               "- one\n- two with __strong__\n  - inside\n\n3. three\n4. four\n\n```python\nprint('<b>')\n```\nafter")
    assert r["h"] == ["H2 Steps"] and r["strong"] == ["bold", "strong"] and r["em"] == ["italic"]
    assert r["inline"] == ["x = *y*"], "no emphasis inside code"
    assert r["li"][:2] == ["one", "two with stronginside"] and r["nested"] == ["inside"]
    assert r["li"][3:] == ["three", "four"] and r["ol"] == ["3"]
    assert r["code"] == [["language-python", "print('<b>')"]], r["html"]
    assert r["p"] == 2 and r["br"] == 1, r["html"]
    # An unclosed fence (a reply still streaming) is an open code block holding the rest.
    r = render("Here:\n```js\nlet a = 1;\n**not bold**")
    assert r["code"] == [["language-js", "let a = 1;\n**not bold**"]] and r["strong"] == []
    # Raw HTML is text, never markup; links are http(s) only, opened apart (noopener).
    r = render('<img src=x onerror="window.pwned=1"> <script>window.pwned=2</script> [bad](javascript:alert(1)) '
               '[good](https://example.org/a?b=1&c=2) and https://example.org/x.')
    assert set(r["elements"]) == {"p", "a"}, r["html"]
    assert '<img src=x onerror="window.pwned=1">' in r["text"] and "[bad](javascript:alert(1))" in r["text"]
    assert r["a"] == [["https://example.org/a?b=1&c=2", "noopener noreferrer", "good"],
                      ["https://example.org/x", "noopener noreferrer", "https://example.org/x"]]
    assert page.evaluate("() => window.pwned") is None


MARKDOWN_REPLY = ["Here is **the plan**:\n\n", "1. Read the *verse*\n", "2. Count its words\n\n",
                  "```python\n", "words = verse.split()\n", "print(len(words))\n", "```\n", "\nThat is `len`.",
                  ' <img src=x onerror="window.pwned=1">']


def test_markdown_reply_is_rendered(page, served):
    sent, models = served
    page.click("#new-conversation")
    page.select_option("#mode", "auto")
    text = serve_next_reply(page, MARKDOWN_REPLY)
    assert send(page, "How do I count the words of a verse?") == "1"
    bubble = last_reply(page, ".bubble")
    assert bubble.locator("strong").all_text_contents() == ["the plan"]
    assert bubble.locator("ol > li").all_text_contents() == ["Read the verse", "Count its words"]
    assert bubble.locator("pre > code.language-python").text_content() == "words = verse.split()\nprint(len(words))"
    assert bubble.locator("img, script").count() == 0 and page.evaluate("() => window.pwned") is None
    assert '<img src=x onerror="window.pwned=1">' in bubble.text_content() and "**" not in bubble.text_content()
    # The stream's chunks carried AR drafts: an AR reply draws none, and its stats line has AR's words.
    assert last_reply(page, ".canvas .cell").count() == 0 and last_reply(page, ".canvas").is_hidden()
    stats = last_reply(page, ".stats").text_content()
    assert stats.startswith(f"ar · {len(MARKDOWN_REPLY)} tokens · ") and "draft" not in stats and "forward" not in stats
    assert said(page) == [("user", "How do I count the words of a verse?"), ("assistant", text)]


def test_copy_puts_the_reply_text_on_the_clipboard(page, served):
    # The reply of the test before: its text as written (the Markdown), not as shown.
    text = said(page)[-1][1]
    assert text.startswith("Here is **the plan**")
    page.evaluate("() => navigator.clipboard.writeText('something else')")
    copy = last_reply(page, ".actions button.copy")
    copy.click()
    page.wait_for_function("(button) => button.textContent === 'Copied'", arg=copy.element_handle(), timeout=10_000)
    assert page.evaluate("() => navigator.clipboard.readText()") == text


def test_regenerate_asks_again_with_the_same_history(page, served):
    sent, models = served
    page.click("#new-conversation")
    page.select_option("#mode", "ar")
    page.fill("#max_tokens", "8")
    assert send(page, "Who made the light?") == "1" and send(page, "And the waters?") == "1"
    replies = page.locator("#conversation .msg.assistant")
    assert replies.nth(0).locator(".regenerate").is_hidden(), "only the last reply can be asked again"
    assert replies.nth(1).locator(".regenerate").is_visible()
    before, asked = said(page), sent[-1]["messages"]
    page.evaluate("() => { window.replaced = document.querySelectorAll('#conversation .msg.assistant')[1]; }")
    start(page)
    replies.nth(1).locator(".regenerate").click()
    assert wait_done(page) == "1"
    assert sent[-1]["messages"] == asked, "the same history is sent again"
    after = said(page)
    assert after[:3] == before[:3] and after[3][0] == "assistant" and len(after) == 4
    assert [role for role, _ in bubbles(page)] == ["user", "assistant", "user", "assistant"]
    assert page.evaluate("() => !document.contains(window.replaced)"), "the reply's bubble is replaced"
    assert replies.nth(1).locator(".regenerate").is_visible() and replies.nth(0).locator(".copy").is_visible()


def test_edit_and_resend_drops_the_turns_after(page, served):
    sent, models = served
    before = said(page)
    assert len(before) == 4, "the conversation of the test before"
    first = page.locator("#conversation .msg.user").first
    # Escape leaves the message as it was.
    first.locator(".edit").click()
    assert first.locator(".editor textarea").input_value() == "Who made the light?"
    first.locator(".editor textarea").press("Escape")
    assert first.locator(".editor").count() == 0 and first.locator(".bubble").is_visible() and said(page) == before
    requests = len(sent)
    first.locator(".edit").click()
    first.locator(".editor textarea").fill("Who made the waters?")
    start(page)
    page.locator("#conversation .editor textarea").press("Enter")
    assert wait_done(page) == "1"
    assert len(sent) == requests + 1
    assert sent[-1]["messages"] == [{"role": "user", "content": "Who made the waters?"}]
    assert [role for role, _ in said(page)] == ["user", "assistant"] and said(page)[0][1] == "Who made the waters?"
    assert [role for role, _ in bubbles(page)] == ["user", "assistant"] and bubbles(page)[0][1] == "Who made the waters?"


def test_stop_keeps_the_reply(page, served):
    sent, models = served
    page.click("#new-conversation")
    assert page.locator("#conversation .msg").count() == 0
    page.select_option("#mode", "ar")
    page.fill("#max_tokens", "200")
    throttle(page, 250)  # an AR chunk (no canvas) is some 170 bytes: the reply trickles in
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
    kept = said(page)[1][1]
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
    # A conversation with a reply in Markdown (its stream served by the test: these small models write none),
    # the buttons under the bubbles: FILE-markdown.png beside FILE.png.
    page.click("#new-conversation")
    page.click("#settings summary")
    page.select_option("#mode", "ar")
    page.fill("#max_tokens", "24")
    page.click("#settings summary")
    assert send(page, "Who made the light?") == "1"
    serve_next_reply(page, MARKDOWN_REPLY[:-1] + [" It prints **4** for *Jesus wept.*"])
    assert send(page, "How do I count the words of a verse?") == "1"
    last_reply(page, ".bubble").hover()
    root, ext = os.path.splitext(screenshot)
    page.screenshot(path=f"{root}-markdown{ext}")
