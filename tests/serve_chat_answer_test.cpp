// /v1/chat/completions' message for a chat format with Gemma 4's channels: reasoning_content, content and
// tool_calls, whole and as stream deltas (serve/chat_answer.h); the request fields that reach the template.

#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "decode/text_model.h"
#include "gguf_copy.h"
#include "serve_process.h"
#include "serve/chat_answer.h"
#include "serve/openai.h"

using canvas::ChatFormat;
using canvas::serve::ChatDeltas;
using canvas::serve::chat_answer;
using json = nlohmann::ordered_json;

namespace {

ChatFormat with_channels() {
  ChatFormat f;
  f.name = "gemma4-template";
  f.jinja = "{{ bos_token }}<|turn>model\n<|channel>thought\n<channel|>";
  return f;
}

ChatFormat without_channels() {
  ChatFormat f;
  f.name = "chatml";
  f.jinja = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";
  return f;
}

const std::string kThinkingAndCall =
    "<|channel>thought\nThe user wants the weather.<channel|>Let me look.<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,"
    "days:3}<tool_call|><|tool_response>";

// The deltas of `text` streamed in pieces cut at `cuts` (byte offsets), then finished.
std::vector<json> stream(const ChatFormat& format, const std::string& text, const std::vector<size_t>& cuts) {
  ChatDeltas deltas(&format);
  std::vector<json> out;
  for (size_t cut : cuts)
    for (json& d : deltas.next(text.substr(0, cut), false)) out.push_back(std::move(d));
  for (json& d : deltas.next(text, true)) out.push_back(std::move(d));
  return out;
}

}  // namespace

TEST(ServeChatAnswer, ToolCallIsOpenaiToolCallsWithItsFinishReason) {
  const ChatFormat f = with_channels();
  const auto a = chat_answer(&f, kThinkingAndCall, "stop");
  EXPECT_EQ(a.finish_reason, "tool_calls");
  const json& m = a.message;
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["reasoning_content"], "The user wants the weather.");
  EXPECT_EQ(m["content"], "Let me look.");
  ASSERT_EQ(m["tool_calls"].size(), 1u) << m.dump();
  const json& call = m["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_FALSE(call["id"].get<std::string>().empty());
  EXPECT_EQ(call["function"]["name"], "get_weather");
  ASSERT_TRUE(call["function"]["arguments"].is_string());
  EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()), json::parse(R"({"city": "Paris", "days": 3})"));
  // Cut by max_tokens: the calls are there, the reason stays "length".
  EXPECT_EQ(chat_answer(&f, kThinkingAndCall, "length").finish_reason, "length");
  // Only a call: content is null, as OpenAI writes it.
  const auto only = chat_answer(&f, "<|tool_call>call:now{}<tool_call|>", "stop");
  EXPECT_TRUE(only.message["content"].is_null()) << only.message.dump();
  EXPECT_EQ(only.message["tool_calls"][0]["function"]["arguments"], "{}");
}

TEST(ServeChatAnswer, ThinkingComesApartFromTheAnswer) {
  const ChatFormat f = with_channels();
  const auto a = chat_answer(&f, "<|channel>thought\n2 and 2 make 4.<channel|>It is 4.<turn|>", "stop");
  EXPECT_EQ(a.finish_reason, "stop");
  EXPECT_EQ(a.message["reasoning_content"], "2 and 2 make 4.");
  EXPECT_EQ(a.message["content"], "It is 4.");
  EXPECT_FALSE(a.message.contains("tool_calls"));
  // No thinking: no reasoning_content field.
  const auto plain = chat_answer(&f, "Hello.", "stop");
  EXPECT_EQ(plain.message, json::parse(R"({"role": "assistant", "content": "Hello."})"));
}

// Every cut of the text, markers split anywhere: no delta holds part of a marker, the deltas come in the
// text's order and add up to the whole answer's fields, the call whole in one delta.
TEST(ServeChatAnswer, StreamNeverSendsAPartialMarker) {
  const ChatFormat f = with_channels();
  const auto whole = chat_answer(&f, kThinkingAndCall, "stop");
  for (size_t step : {1, 2, 3, 5, 7, 11}) {
    std::vector<size_t> cuts;
    for (size_t c = step; c < kThinkingAndCall.size(); c += step) cuts.push_back(c);
    ChatDeltas deltas(&f);
    std::string reasoning, content;
    json calls = json::array();
    int stage = 0;  // 0 reasoning, 1 content, 2 calls: never goes back
    auto take = [&](const std::vector<json>& ds) {
      for (const json& d : ds) {
        ASSERT_EQ(d.size(), 1u) << d.dump();
        if (d.contains("reasoning_content")) {
          const std::string s = d["reasoning_content"];
          EXPECT_EQ(s.find('<'), std::string::npos) << "step " << step << ": " << s;
          EXPECT_LE(stage, 0);
          reasoning += s;
        } else if (d.contains("content")) {
          const std::string s = d["content"];
          EXPECT_EQ(s.find('<'), std::string::npos) << "step " << step << ": " << s;
          EXPECT_LE(stage, 1);
          stage = 1;
          content += s;
        } else {
          ASSERT_TRUE(d.contains("tool_calls")) << d.dump();
          stage = 2;
          for (const json& c : d["tool_calls"]) calls.push_back(c);
        }
      }
    };
    for (size_t cut : cuts) take(deltas.next(kThinkingAndCall.substr(0, cut), false));
    take(deltas.next(kThinkingAndCall, true));
    EXPECT_EQ(reasoning, whole.message["reasoning_content"]);
    EXPECT_EQ(content, whole.message["content"]);
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0]["index"], 0);
    EXPECT_EQ(calls[0]["id"], whole.message["tool_calls"][0]["id"]);
    EXPECT_EQ(calls[0]["function"], whole.message["tool_calls"][0]["function"]);
    EXPECT_EQ(deltas.finish_reason("stop"), "tool_calls");
  }
  // A chunk that ends inside "<|channel>": nothing is sent until the marker is whole.
  ChatDeltas deltas(&f);
  EXPECT_TRUE(deltas.next("<|chan", false).empty());
  const auto ds = deltas.next("<|channel>thought\nhm", false);
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0], json::parse(R"({"reasoning_content": "hm"})"));
  // The answer cut inside "<channel|>": the thinking goes on, the answer waits.
  EXPECT_TRUE(deltas.next("<|channel>thought\nhm<chann", false).empty());
  EXPECT_EQ(deltas.next("<|channel>thought\nhm<channel|>Yes", false)[0], json::parse(R"({"content": "Yes"})"));
  EXPECT_EQ(deltas.finish_reason("stop"), "stop");
}

TEST(ServeChatAnswer, FormatWithoutChannelsIsUnchanged) {
  const ChatFormat f = without_channels();
  const std::string text = "<|channel>thought\nnot a channel here<channel|>text";
  for (const ChatFormat* format : {&f, static_cast<const ChatFormat*>(nullptr)}) {
    const auto a = chat_answer(format, text, "stop");
    EXPECT_EQ(a.message, json({{"role", "assistant"}, {"content", text}}));
    EXPECT_EQ(a.finish_reason, "stop");
    std::string streamed;
    for (const json& d : stream(format ? *format : f, text, {3, 9})) streamed += d["content"].get<std::string>();
    EXPECT_EQ(streamed, text);
  }
}

TEST(ServeOpenaiChat, ToolsThinkingAndMessageFieldsReachTheTemplate) {
  using canvas::serve::parse_api_request;
  const std::string body = R"({"messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "reasoning_content": "Look it up.",
       "tool_calls": [{"id": "call_0", "type": "function",
                       "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_0", "name": "get_weather", "content": "sunny"}],
    "tools": [{"type": "function", "function": {"name": "get_weather",
               "parameters": {"type": "object", "properties": {"zcity": {"type": "string"}, "adays": {"type": "integer"}}}}}],
    "chat_template_kwargs": {"enable_thinking": true}})";
  const auto r = parse_api_request(body, true);
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1].reasoning_content, "Look it up.");
  EXPECT_EQ(r.messages[1].content, "");
  // The arguments reach the template as the object (the template writes them in the model's own form).
  EXPECT_EQ(r.messages[1].tool_calls[0]["function"]["arguments"], json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_call_id, "call_0");
  EXPECT_EQ(r.messages[2].name, "get_weather");
  ASSERT_TRUE(r.chat_extras.tools.is_array());
  // In the client's member order.
  EXPECT_EQ(r.chat_extras.tools[0]["function"]["parameters"]["properties"].begin().key(), "zcity");
  EXPECT_EQ(r.chat_extras.enable_thinking, std::optional<bool>(true));

  auto thinking = [&](const std::string& fields) {
    return parse_api_request(R"({"messages": [{"role": "user", "content": "hi"}])" + fields + "}", true)
        .chat_extras.enable_thinking;
  };
  EXPECT_EQ(thinking(""), std::nullopt);
  EXPECT_EQ(thinking(R"(, "reasoning_effort": "high")"), std::optional<bool>(true));
  EXPECT_EQ(thinking(R"(, "reasoning_effort": "none")"), std::optional<bool>(false));
  // The template's own switch wins over reasoning_effort.
  EXPECT_EQ(thinking(R"(, "reasoning_effort": "high", "chat_template_kwargs": {"enable_thinking": false})"),
            std::optional<bool>(false));
  EXPECT_THROW(thinking(R"(, "reasoning_effort": "max")"), canvas::serve::ApiError);
  EXPECT_THROW(thinking(R"(, "chat_template_kwargs": {"enable_thinking": "yes"})"), canvas::serve::ApiError);
  // tool_choice none: the model is not offered the tools.
  const auto none = parse_api_request(
      R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "none",
          "tools": [{"type": "function", "function": {"name": "f"}}]})", true);
  EXPECT_TRUE(none.chat_extras.tools.is_null());
  // A tool message without content, an assistant message without content or calls: 400.
  EXPECT_THROW(parse_api_request(R"({"messages": [{"role": "tool", "tool_call_id": "x"}]})", true),
               canvas::serve::ApiError);
  EXPECT_THROW(parse_api_request(R"({"messages": [{"role": "assistant"}]})", true), canvas::serve::ApiError);
}

// The JSON a client parses, written for tests/python/test_chat_answer_types.py (which checks it with the
// openai client's own types) when CANVAS_CHAT_ANSWER_JSON names a file: a whole answer and a stream's deltas.
TEST(ServeChatAnswer, WritesTheJsonForTheOpenaiTypesCheck) {
  const char* path = std::getenv("CANVAS_CHAT_ANSWER_JSON");
  if (!path) GTEST_SKIP() << "run by tests/python/test_chat_answer_types.py";
  const ChatFormat f = with_channels();
  const auto whole = chat_answer(&f, kThinkingAndCall, "stop");
  json out = {{"message", whole.message}, {"finish_reason", whole.finish_reason}, {"deltas", json::array()}};
  ChatDeltas deltas(&f);
  for (size_t cut = 4; cut < kThinkingAndCall.size(); cut += 4)
    for (json& d : deltas.next(kThinkingAndCall.substr(0, cut), false)) out["deltas"].push_back(std::move(d));
  for (json& d : deltas.next(kThinkingAndCall, true)) out["deltas"].push_back(std::move(d));
  out["stream_finish_reason"] = deltas.finish_reason("stop");
  std::ofstream(path) << out.dump();
}

// Through the server: a model whose chat template has channels (tiny-dream writes no markers, so its reply is
// all content) answers whole and streamed alike, the stream's first delta with the role and the last chunk
// with the finish reason; the request's tools, thinking switch and message fields reach the template (the
// prompt grows by what the template writes for them).
TEST(ServeChatAnswer, ServerWithAChannelTemplate) {
  canvas::test::TempDir dir;
  const std::string model = canvas::test::with_chat_template(
      dir, "channels.gguf",
      "{%- if tools %}Tools: {{ tools[0].function.name }}\n{% endif %}{% if enable_thinking %}Think.\n{% endif %}"
      "{%- for m in messages %}{{ m.role }}: {{ m.content }}{% if m.reasoning_content %} ({{ m.reasoning_content }})"
      "{% endif %}{% if m.tool_calls %} call {{ m.tool_calls[0].function.name }} {{ m.tool_calls[0].function.arguments.city }}"
      "{% endif %}{% if m.tool_call_id %} for {{ m.tool_call_id }}{% endif %}\n{% endfor %}model:"
      "{% if not enable_thinking %}<|channel>thought\n<channel|>{% endif %}");
  canvas::test::ServerProcess server("-m " + model + " --parallel 1", "");
  ASSERT_NE(server.port(), 0) << server.log();
  json body = {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})},
               {"max_tokens", 6}, {"temperature", 0}, {"seed", 1}};
  const json plain = json::parse(canvas::test::post_json(server, "/v1/chat/completions", body.dump()).dump());
  ASSERT_TRUE(plain.contains("choices")) << plain.dump();
  const json& message = plain["choices"][0]["message"];
  EXPECT_EQ(message["role"], "assistant");
  ASSERT_TRUE(message["content"].is_string()) << plain.dump();
  const std::string text = message["content"];
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(text.find("<|"), std::string::npos) << text;
  const int64_t prompt_tokens = plain["usage"]["prompt_tokens"];

  json streamed = body;
  streamed["stream"] = true;
  const auto res = canvas::test::post(server, "/v1/chat/completions", streamed.dump());
  ASSERT_TRUE(res);
  std::vector<json> chunks;
  for (const std::string& e : canvas::test::sse_events(res->body))
    if (e != "[DONE]") chunks.push_back(json::parse(e));
  ASSERT_GE(chunks.size(), 2u) << res->body;
  EXPECT_EQ(chunks.front()["choices"][0]["delta"]["role"], "assistant");
  std::string joined;
  for (size_t i = 0; i + 1 < chunks.size(); ++i) {
    EXPECT_TRUE(chunks[i]["choices"][0]["finish_reason"].is_null());
    joined += chunks[i]["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(joined, text);
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], plain["choices"][0]["finish_reason"]);

  // Each of tools, enable_thinking (or reasoning_effort), a reasoning_content, a tool call and a tool
  // message changes the prompt the template writes.
  auto prompt_of = [&](const json& extra) {
    json b = body;
    for (const auto& [k, v] : extra.items()) b[k] = v;
    const json r = canvas::test::post_json(server, "/v1/chat/completions", b.dump());
    EXPECT_TRUE(r.contains("usage")) << r.dump();
    return r["usage"]["prompt_tokens"].get<int64_t>();
  };
  const json tools = json::array({{{"type", "function"}, {"function", {{"name", "get_weather"}}}}});
  EXPECT_GT(prompt_of({{"tools", tools}}), prompt_tokens);
  EXPECT_EQ(prompt_of({{"tools", tools}, {"tool_choice", "none"}}), prompt_tokens);
  const int64_t thinking = prompt_of({{"chat_template_kwargs", {{"enable_thinking", true}}}});
  EXPECT_NE(thinking, prompt_tokens);
  EXPECT_EQ(prompt_of({{"reasoning_effort", "low"}}), thinking);
  const json turns = json::array(
      {{{"role", "user"}, {"content", "Hi"}},
       {{"role", "assistant"}, {"content", nullptr}, {"reasoning_content", "Weather first."},
        {"tool_calls", json::array({{{"id", "call_7"}, {"type", "function"},
                                     {"function", {{"name", "get_weather"}, {"arguments", R"({"city": "Oslo"})"}}}}})}},
       {{"role", "tool"}, {"tool_call_id", "call_7"}, {"name", "get_weather"}, {"content", "rain"}}});
  const int64_t with_turns = prompt_of({{"messages", turns}});
  json bare = turns;
  bare[1].erase("reasoning_content");
  EXPECT_GT(with_turns, prompt_of({{"messages", bare}}));
}
