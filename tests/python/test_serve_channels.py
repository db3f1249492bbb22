# Gemma 4's thinking and tool calls end to end: canvas serve on scripted models (tests/fixtures/make_scripted_gemma.py:
# weights that make greedy decoding write the thinking channel, answers and tool calls in Gemma 4's markers, in
# the release's architecture and in the AR Gemma 4 stack), asked through the official openai client. The thinking
# comes back as reasoning_content apart from content and the calls as tool_calls, whole and streamed, each
# answer checked against the openai package's types; `canvas chat` shows the thinking apart.
# Run by run_tests.sh canvas (ctest ServeCli.ChannelsOfScriptedGemmaModels), which sets CANVAS_BINARY.
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

import openai
import pydantic
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))
import make_scripted_gemma  # noqa: E402

CANVAS = os.environ.get("CANVAS_BINARY", os.path.join(HERE, "..", "..", "build", "canvas"))
REPLIES = make_scripted_gemma.REPLIES
MODELS = ["diffusion-gemma", "gemma4"]  # the models' ids: their folders' names
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Gets the weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}]
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
THINK = {"reasoning_effort": "high"}  # turns the template's enable_thinking on
MARKER = re.compile(r"<\||\|>")  # any part of Gemma's markers


def wait_until(condition, what, seconds=120):
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def healthy(base):
    try:
        with urllib.request.urlopen(base + "/health", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("scripted")
    return {arch: make_scripted_gemma.write(str(root / arch), arch) for arch in MODELS}


@pytest.fixture(scope="module")
def client(model_dirs, tmp_path_factory):
    """canvas serve on both models in AR mode (the release's own mode is diffusion, which no bigram scripts)."""
    log_path = tmp_path_factory.mktemp("serve") / "stderr.log"
    args = [CANVAS, "serve", "--port", "0", "--mode", "ar", "--parallel", "2"]
    for path in model_dirs.values():
        args += ["-m", path]
    with open(log_path, "w") as log:
        server = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log)
    try:
        def port():
            assert server.poll() is None, f"canvas serve exited: {log_path.read_text()}"
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)/", log_path.read_text())
            return found and found.group(1)

        base = f"http://127.0.0.1:{wait_until(port, 'the listening line')}"
        wait_until(lambda: healthy(base), "/health")
        yield openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=120)
    finally:
        server.terminate()
        server.wait(timeout=60)


def create(client, model, **body):
    """A whole answer, checked strictly against ChatCompletion (every field the type requires, of its type);
    returned as the client parses it."""
    raw = client.chat.completions.with_raw_response.create(model=model, max_tokens=64, temperature=0, **body)
    ChatCompletion.model_validate(raw.http_response.json())
    return raw.parse()


def stream(client, model, **body):
    """A streamed answer's pieces: (reasoning, content, tool calls by index, finish reason, kinds of delta in
    order); every chunk checked against ChatCompletionChunk, no delta holding part of a marker."""
    reasoning, content, calls, finish, kinds, role = "", "", {}, None, [], None
    for chunk in client.chat.completions.create(model=model, max_tokens=64, temperature=0, stream=True, **body):
        ChatCompletionChunk.model_validate(chunk.to_dict())
        assert not MARKER.search(json.dumps(chunk.to_dict()["choices"])), chunk
        choice = chunk.choices[0]
        delta = choice.delta
        role = delta.role or role
        finish = choice.finish_reason or finish
        if getattr(delta, "reasoning_content", None):  # an extra field the client keeps
            reasoning += delta.reasoning_content
            kinds.append("reasoning")
        if delta.content:
            content += delta.content
            kinds.append("content")
        for call in delta.tool_calls or []:
            whole = calls.setdefault(call.index, {"id": call.id, "name": "", "arguments": ""})
            whole["name"] += call.function.name or ""
            whole["arguments"] += call.function.arguments or ""
            kinds.append("tool_calls")
    assert role == "assistant"
    return reasoning, content, calls, finish, kinds


def in_order(kinds):
    """The kinds of delta without repeats: reasoning, content and tool calls each come in one run."""
    runs = [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]
    assert len(runs) == len(set(runs)), kinds
    return runs


@pytest.mark.parametrize("model", MODELS)
def test_thinking_comes_apart_from_the_answer(client, model):
    r = create(client, model, messages=QUESTION, **THINK)
    choice = r.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.reasoning_content == REPLIES["thought"]
    assert choice.message.content == REPLIES["answer"]
    assert choice.message.tool_calls is None


@pytest.mark.parametrize("model", MODELS)
def test_thinking_streamed_comes_before_the_answer(client, model):
    reasoning, content, calls, finish, kinds = stream(client, model, messages=QUESTION, **THINK)
    assert (reasoning, content, calls, finish) == (REPLIES["thought"], REPLIES["answer"], {}, "stop")
    assert in_order(kinds) == ["reasoning", "content"]


@pytest.mark.parametrize("model", MODELS)
def test_without_thinking_there_is_no_reasoning_content(client, model):
    raw = client.chat.completions.with_raw_response.create(model=model, messages=QUESTION, max_tokens=64,
                                                            temperature=0)
    body = raw.http_response.json()
    ChatCompletion.model_validate(body)
    assert body["choices"][0]["message"] == {"role": "assistant", "content": REPLIES["answer"]}
    _, content, _, finish, kinds = stream(client, model, messages=QUESTION)
    assert (content, finish, in_order(kinds)) == (REPLIES["answer"], "stop", ["content"])


def expect_the_call(name, arguments):
    assert name == REPLIES["call"]["name"]
    assert json.loads(arguments) == REPLIES["call"]["arguments"]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("thinking", [True, False])
def test_tools_get_a_tool_call(client, model, thinking):
    r = create(client, model, messages=QUESTION, tools=TOOLS, **(THINK if thinking else {}))
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert getattr(choice.message, "reasoning_content", None) == (REPLIES["thought"] if thinking else None)
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id == "call_0"
    expect_the_call(call.function.name, call.function.arguments)


@pytest.mark.parametrize("model", MODELS)
def test_tool_call_streamed(client, model):
    reasoning, content, calls, finish, kinds = stream(client, model, messages=QUESTION, tools=TOOLS, **THINK)
    assert (reasoning, content, finish) == (REPLIES["thought"], "", "tool_calls")
    assert in_order(kinds) == ["reasoning", "tool_calls"]
    assert list(calls) == [0] and calls[0]["id"] == "call_0"
    expect_the_call(calls[0]["name"], calls[0]["arguments"])


@pytest.mark.parametrize("model", MODELS)
def test_the_tools_answer_goes_back_and_the_model_answers(client, model):
    """The assistant message as the client got it (its thinking and call) and the tool's answer go back through
    the template; the model then answers."""
    first = create(client, model, messages=QUESTION, tools=TOOLS, **THINK).choices[0].message
    turn = first.model_dump(exclude_none=True)
    assert turn["reasoning_content"] == REPLIES["thought"]
    messages = QUESTION + [turn, {"role": "tool", "tool_call_id": first.tool_calls[0].id,
                                  "content": json.dumps({"temperature": 21, "sky": "clear"})}]
    r = create(client, model, messages=messages, tools=TOOLS, **THINK)
    choice = r.choices[0]
    assert (choice.message.content, choice.finish_reason) == (REPLIES["weather"], "stop")
    assert choice.message.tool_calls is None and getattr(choice.message, "reasoning_content", None) is None
    _, content, calls, finish, _ = stream(client, model, messages=messages, tools=TOOLS, **THINK)
    assert (content, calls, finish) == (REPLIES["weather"], {}, "stop")


@pytest.mark.parametrize("model", MODELS)
def test_responses_api_gives_the_thinking_as_a_reasoning_item(client, model):
    body = dict(model=model, input="What is the weather in Paris?", reasoning={"effort": "high"},
                max_output_tokens=64, temperature=0)
    raw = client.responses.with_raw_response.create(**body)
    whole = Response.model_validate(raw.http_response.json())
    thought, message = whole.output
    assert thought.type == "reasoning" and [c.text for c in thought.content] == [REPLIES["thought"]]
    assert message.type == "message" and whole.output_text == REPLIES["answer"]
    reasoning, text = "", ""
    for event in client.responses.create(**body, stream=True):
        pydantic.TypeAdapter(ResponseStreamEvent).validate_python(event.to_dict())
        reasoning += event.delta if event.type == "response.reasoning_text.delta" else ""
        text += event.delta if event.type == "response.output_text.delta" else ""
    assert (reasoning, text) == (REPLIES["thought"], REPLIES["answer"])


@pytest.mark.parametrize("model", MODELS)
def test_canvas_chat_shows_the_thinking_apart(model_dirs, model):
    args = [CANVAS, "chat", "-m", model_dirs[model], "--mode", "ar", "--think", "-n", "64", "--temp", "0"]
    out = subprocess.run(args, input="What is the weather in Paris?\n", capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"[thinking]\n{REPLIES['thought']}\n[/thinking]\n{REPLIES['answer']}\n", out.stdout
