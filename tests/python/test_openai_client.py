# canvas serve through the official `openai` Python client: models, completions and chat, streamed and not,
# determinism, concurrent clients, logprobs, json_schema output, errors in OpenAI's shape, the Responses API
# (whole and streamed) and the embeddings refusal.
# Run by run_tests.sh (ctest ServeCli.OpenaiPythonClient), which starts the server and sets CANVAS_SERVE_URL.
import concurrent.futures
import json
import os

import openai
import pydantic
import pytest
from openai.types.responses import Response, ResponseStreamEvent

BASE = os.environ.get("CANVAS_SERVE_URL")


@pytest.fixture(scope="module")
def client():
    assert BASE, "set CANVAS_SERVE_URL (http://127.0.0.1:PORT)"
    return openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused", max_retries=0, timeout=60)


def extra(obj, name):
    """A field canvas adds to OpenAI's shape (the client keeps unknown fields as extras)."""
    value = getattr(obj, name, None)
    assert value is not None, f"{type(obj).__name__} has no field {name!r}"
    return value


def test_models_lists_the_served_model_and_a_request_names_it(client):
    models = client.models.list().data
    assert len(models) == 1
    assert models[0].object == "model"
    model_id = models[0].id
    assert not model_id.endswith(".gguf"), f"the id is the file's stem: {model_id}"
    r = client.completions.create(model=model_id, prompt="And", max_tokens=4, extra_body={"mode": "ar"})
    assert r.model == model_id
    assert extra(r, "canvas")["mode"] == "ar"


def test_completion_not_streamed(client):
    r = client.completions.create(model="canvas", prompt="And God said", max_tokens=16, extra_body={"mode": "diffusion"})
    assert r.object == "text_completion"
    assert isinstance(r.choices[0].text, str)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert extra(r.usage, "forward_passes") == 16
    assert extra(r.usage, "tokens_per_pass") > 0
    assert extra(r.usage, "tokens_per_forward") == extra(r.usage, "tokens_per_pass")


def test_completion_streamed_deltas_add_up_to_the_whole_text(client):
    body = dict(model="canvas", prompt="And God said", max_tokens=16, extra_body={"mode": "diffusion"})
    whole = client.completions.create(**body)
    text, usage, chunks = "", None, 0
    for chunk in client.completions.create(**body, stream=True, stream_options={"include_usage": True}):
        chunks += 1
        if chunk.usage:
            usage = chunk.usage
        if chunk.choices:
            text += chunk.choices[0].text
    assert text == whole.choices[0].text
    assert chunks >= 2
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens


def test_a_seed_gives_the_same_text_and_another_seed_another(client):
    def sample(seed):
        return client.completions.create(model="canvas", prompt="And God said", max_tokens=24, temperature=1.0,
                                         seed=seed, extra_body={"mode": "ar"}).choices[0].text
    first = sample(7)
    assert sample(7) == first
    assert any(sample(seed) != first for seed in (8, 9, 10)), "three other seeds all wrote the same sampled text"


def test_concurrent_clients_get_what_each_would_get_alone(client):
    prompts = ["And God said", "In the beginning", "Blessed are the", "And the LORD spake", "Let there be",
               "The earth was"]

    def complete(prompt, mode):
        r = client.completions.create(model="canvas", prompt=prompt, max_tokens=12, temperature=0,
                                      extra_body={"mode": mode})
        return r.choices[0].text

    jobs = [(p, mode) for p in prompts for mode in ("ar", "diffusion")]
    alone = [complete(p, mode) for p, mode in jobs]
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        together = list(pool.map(lambda job: complete(*job), jobs))
    assert together == alone


def test_chat_not_streamed(client):
    r = client.chat.completions.create(
        model="canvas", messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        max_tokens=8, extra_body={"mode": "ar"})
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert isinstance(r.choices[0].message.content, str)


def test_chat_streamed(client):
    body = dict(model="canvas", messages=[{"role": "user", "content": "Hi"}], max_tokens=8, seed=1,
                extra_body={"mode": "ar"})
    whole = client.chat.completions.create(**body)
    text, role, finish = "", None, None
    for chunk in client.chat.completions.create(**body, stream=True):
        assert chunk.object == "chat.completion.chunk"
        c = chunk.choices[0]
        role = c.delta.role or role
        text += c.delta.content or ""
        finish = c.finish_reason or finish
    assert role == "assistant"
    assert text == whole.choices[0].message.content
    assert finish in ("stop", "length")


def test_logprobs_chat_top_logprobs_and_completions_legacy_shape(client):
    chat = client.chat.completions.create(
        model="canvas", messages=[{"role": "user", "content": "Hi"}], max_tokens=6, temperature=0, logprobs=True,
        top_logprobs=3, extra_body={"mode": "ar"})
    content = chat.choices[0].logprobs.content
    assert len(content) == chat.usage.completion_tokens
    for entry in content:
        assert len(entry.top_logprobs) == 3
        assert entry.logprob == entry.top_logprobs[0].logprob  # greedy: the most likely token
        assert entry.bytes == list(entry.token.encode("utf-8"))
    r = client.completions.create(model="canvas", prompt="And God said", max_tokens=6, temperature=0, logprobs=2,
                                  echo=True, extra_body={"mode": "ar"})
    lp = r.choices[0].logprobs
    assert r.choices[0].text.startswith("And God said")
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.text_offset)
    assert lp.token_logprobs[0] is None  # an echoed prompt token
    assert len(lp.tokens) == r.usage.prompt_tokens + r.usage.completion_tokens


@pytest.mark.parametrize("mode", ["ar", "diffusion"])
def test_json_schema_output_is_valid_json_of_the_schema(client, mode):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 120}},
              "required": ["name", "age"], "additionalProperties": False}
    r = client.chat.completions.create(
        model="canvas", messages=[{"role": "user", "content": "Who was Adam?"}], max_tokens=48,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema}},
        extra_body={"mode": mode})
    doc = json.loads(r.choices[0].message.content)
    assert set(doc) == {"name", "age"}
    assert isinstance(doc["name"], str) and len(doc["name"]) <= 12
    assert isinstance(doc["age"], int) and 0 <= doc["age"] <= 120


def test_errors_come_back_as_openai_errors(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="canvas", prompt="a", max_tokens=0)
    assert e.value.status_code == 400 and "max_tokens" in e.value.message and e.value.param == "max_tokens"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="canvas", messages=[{"role": "user", "content": "a"}],
                                       presence_penalty=5)
    assert e.value.status_code == 400 and e.value.param == "presence_penalty"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="canvas", prompt="a" * 400)
    assert e.value.status_code == 400 and e.value.code == "context_length_exceeded"


def test_what_clients_send_is_accepted(client):
    """The fields an SDK or an agent framework sends beside the prompt: penalties, logit_bias, tools, fields of
    newer APIs and another server's model name. A one-model server answers them all, and honours the
    penalties and the bias: +100 on a token makes greedy AR write it at every position, -100 keeps it out."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    text = dict(model="canvas", prompt="And God said", max_tokens=4, temperature=0, extra_body={"mode": "ar"})
    plain = extra(client.completions.create(**text), "canvas")["tokens"]
    forced, banned = plain[1], plain[0]  # words of the text: neither ends it
    r = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "And God said"}], max_tokens=4, temperature=0,
        presence_penalty=0.5, frequency_penalty=0.2, logit_bias={str(forced): 100}, tools=tools,
        tool_choice="auto", extra_body={"reasoning_effort": "low", "mode": "ar"})
    assert r.model == "gpt-4o"
    assert isinstance(r.choices[0].message.content, str)
    assert extra(r, "canvas")["tokens"] == [forced] * 4
    r = client.completions.create(**text, logit_bias={str(banned): -100})
    assert banned not in extra(r, "canvas")["tokens"]
    r = client.completions.create(model="default", prompt="And", max_tokens=2, extra_body={"colour": "blue"})
    assert r.choices[0].finish_reason in ("stop", "length")


def test_penalties_in_a_diffusion_mode_are_a_400_naming_it(client):
    """Masked diffusion commits positions in parallel: no left-to-right history for the penalties to count."""
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="canvas", prompt="And", max_tokens=4, presence_penalty=0.5,
                                  extra_body={"mode": "diffusion"})
    assert e.value.status_code == 400 and "masked diffusion" in str(e.value)
    assert e.value.param == "presence_penalty"


def test_without_max_tokens_a_reply_runs_to_its_end(client):
    """OpenAI's API ends a reply at the end of its turn, not after a fixed count (canvas had 64)."""
    r = client.chat.completions.create(model="canvas", messages=[{"role": "user", "content": "And God said"}],
                                       extra_body={"mode": "ar", "ignore_eos": True})
    assert r.usage.completion_tokens > 64


def test_responses_whole_and_streamed(client):
    """client.responses.create, whole and with stream=True: the Response object and the typed events parse,
    and the stream's deltas add up to the whole answer's output_text."""
    body = dict(model="canvas", input="And God said", instructions="Be brief.", max_output_tokens=12, temperature=0,
                extra_body={"mode": "ar", "seed": 1})
    raw = client.responses.with_raw_response.create(**body)
    whole = Response.model_validate(raw.http_response.json())  # strictly: every field the type requires
    assert whole.object == "response" and whole.id.startswith("resp_")
    assert whole.status in ("completed", "incomplete")
    assert whole.instructions == "Be brief."
    (message,) = whole.output
    assert message.type == "message" and message.role == "assistant"
    assert message.content[0].type == "output_text"
    assert whole.output_text and whole.output_text == message.content[0].text
    assert whole.usage.total_tokens == whole.usage.input_tokens + whole.usage.output_tokens
    types, text, final = [], "", None
    for event in client.responses.create(**body, stream=True):
        types.append(event.type)
        pydantic.TypeAdapter(ResponseStreamEvent).validate_python(event.to_dict())
        if event.type == "response.output_text.delta":
            text += event.delta
        if event.type in ("response.completed", "response.incomplete"):
            final = event.response
    assert types[0] == "response.created" and types[-1] in ("response.completed", "response.incomplete")
    assert "response.output_item.added" in types and "response.content_part.done" in types
    assert text == whole.output_text
    assert final.output_text == whole.output_text and final.status == whole.status


def test_responses_with_messages_and_the_length_cap(client):
    r = client.responses.create(
        model="gpt-4o", max_output_tokens=3,
        input=[{"role": "user", "content": [{"type": "input_text", "text": "And God said"}]}],
        extra_body={"mode": "ar", "ignore_eos": True})
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3 and r.model == "gpt-4o"


def test_embeddings_say_the_model_has_none(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model="canvas", input="And God said")
    assert e.value.status_code == 400 and e.value.code == "embeddings_not_supported"
    assert "no embedding head" in e.value.message
