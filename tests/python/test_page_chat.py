# The web page's conversation in headless Chromium, against a base and a chat model (in that order): ticking
# "chat" picks the chat model; a two-turn conversation, whose drafts draw a box for each token of the text and
# none for the end of turn or padding; the second request carries the first exchange, and "New conversation"
# clears it; unticking "chat" picks the base model again.
# Run by run_tests.sh (ctest ServeCli.WebPageConversationInChromium).
import re

from page_util import open_page, page, run  # noqa: F401 (page is a fixture)


def test_page_two_turn_conversation(page):
    sent = []
    models = open_page(page, sent)
    assert len(models) == 2, f"models: {models}"
    assert page.input_value("#model") == models[0], "the base model is picked at first"
    page.check("#chat")
    assert page.input_value("#model") == models[1], "chat picks the chat model"
    page.select_option("#mode", "ar")
    page.fill("#max_tokens", "24")
    page.fill("#prompt", "Who made the light?")
    assert run(page) == "1", page.text_content("#stats")
    assert page.locator("#conversation .turn").count() == 2
    first = page.text_content("#conversation .turn.assistant")
    assert len(first) > 0, "the first reply is shown in the conversation"
    assert page.input_value("#prompt") == "", "the prompt box is cleared for the next turn"
    page.fill("#prompt", "And then?")
    page.select_option("#mode", "diffusion")  # its answers end within the canvas, then padding
    assert run(page) == "1", page.text_content("#stats")
    # The last draft: a box per token of the text, none for the end of turn or the padding after it.
    stats = page.text_content("#stats")
    tokens = int(re.search(r"· (\d+) tokens ·", stats).group(1))
    assert page.locator("#canvas .cell").count() == tokens, stats
    assert tokens < 24, f"the answer ended before max_tokens: {stats}"
    assert page.locator("#conversation .turn").count() == 4
    second = sent[-1]
    assert second["model"] == models[1]
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert second["messages"][1]["content"] == first, "the second request carries the first reply"
    page.click("#reset")
    assert page.locator("#conversation .turn").count() == 0
    page.uncheck("#chat")
    assert page.input_value("#model") == models[0], "unticking chat picks the base model"
    print(f"page chat test passed: two turns; first reply {first!r}")
