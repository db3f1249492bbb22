# The chat answer of a model with Gemma 4's channels (serve/chat_answer.h) as the official openai client parses
# it: reasoning_content apart, tool_calls as its ChatCompletionMessageToolCall, and the stream's chunks
# accumulated into the same message. canvas_tests writes the JSON (ServeChatAnswer.WritesTheJsonForTheOpenaiTypesCheck);
# the envelope around it is the one canvas serve writes (id, object, created, model, choices, usage).
# Run by run_tests.sh unit (ctest ServeCli.ChatAnswerOpenaiTypes).
import json
import os
import subprocess

from openai.types.chat import ChatCompletion, ChatCompletionChunk


def answer_json(tmp_path):
    binary = os.environ.get("CANVAS_TESTS_BINARY", "build/canvas_tests")
    out = tmp_path / "answer.json"
    subprocess.run([binary, "--gtest_filter=ServeChatAnswer.WritesTheJsonForTheOpenaiTypesCheck"], check=True,
                   env={**os.environ, "CANVAS_CHAT_ANSWER_JSON": str(out)}, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def envelope(obj, choices):
    return {"id": "chatcmpl-1", "object": obj, "created": 1, "model": "m", "choices": choices,
            "canvas": {"mode": "diffusion"}}


def test_whole_answer_parses_with_tool_calls_and_reasoning(tmp_path):
    a = answer_json(tmp_path)
    body = envelope("chat.completion", [{"index": 0, "finish_reason": a["finish_reason"], "message": a["message"],
                                         "logprobs": None}])
    body["usage"] = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    r = ChatCompletion.model_validate(body)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me look."
    assert choice.message.reasoning_content == "The user wants the weather."  # an extra the client keeps
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris", "days": 3}


def test_stream_chunks_parse_and_add_up_to_the_answer(tmp_path):
    a = answer_json(tmp_path)
    chunks = []
    for i, delta in enumerate(a["deltas"]):
        if i == 0:
            delta = {**delta, "role": "assistant"}
        chunks.append(envelope("chat.completion.chunk", [{"index": 0, "finish_reason": None, "delta": delta}]))
    chunks.append(envelope("chat.completion.chunk",
                           [{"index": 0, "finish_reason": a["stream_finish_reason"], "delta": {}}]))
    reasoning, content, calls = "", "", {}
    for c in map(ChatCompletionChunk.model_validate, chunks):
        d = c.choices[0].delta
        reasoning += getattr(d, "reasoning_content", None) or ""
        content += d.content or ""
        for t in d.tool_calls or []:
            calls.setdefault(t.index, {"id": t.id, "name": "", "arguments": ""})
            calls[t.index]["name"] += t.function.name or ""
            calls[t.index]["arguments"] += t.function.arguments or ""
    assert c.choices[0].finish_reason == "tool_calls"
    assert reasoning == a["message"]["reasoning_content"]
    assert content == a["message"]["content"]
    whole = a["message"]["tool_calls"][0]
    assert calls == {0: {"id": whole["id"], "name": whole["function"]["name"],
                         "arguments": whole["function"]["arguments"]}}
    assert all("<|" not in json.dumps(d) and "|>" not in json.dumps(d) for d in a["deltas"])
