// Gemma 4's channels in generated text: thinking apart from the answer, tool calls as OpenAI tool calls,
// markers cut at the end of a stream held back, malformed calls left as text.
#include "decode/gemma_channels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "decode/generation.h"
#include "decode/text_model.h"
#include "io/json.h"
#include "model/model.h"
#include "test_util.h"

namespace canvas {
namespace {

TEST(GemmaChannels, ThinkingContentAndToolCalls) {
  const ChatReply plain = parse_gemma_channels("Paris.");
  EXPECT_EQ(plain.content, "Paris.");
  EXPECT_EQ(plain.reasoning_content, "");
  EXPECT_TRUE(plain.tool_calls.empty());

  const ChatReply thought =
      parse_gemma_channels("<|channel>thought\nThe capital.\n<channel|>Paris.<turn|>ignored");
  EXPECT_EQ(thought.reasoning_content, "The capital.\n");
  EXPECT_EQ(thought.content, "Paris.");
  EXPECT_EQ(thought.final_bytes,
            std::string("<|channel>thought\nThe capital.\n<channel|>Paris.<turn|>ignored").size());

  const ChatReply calls = parse_gemma_channels(
      "<|channel>thought\nUse tools.<channel|><|tool_call>call:get_weather{city:<|\"|>Paris, "
      "\"FR\"<|\"|>,days:2,"
      "area:{lat:48.85,lon:-2.5e-1,label:null},exact:true,stops:[<|\"|>a<|\"|>,{name:<|\"|>b<|\"|>}],none:[]}"
      "<tool_call|><|tool_call>call:now{}<tool_call|><|tool_response>");
  EXPECT_EQ(calls.reasoning_content, "Use tools.");
  EXPECT_EQ(calls.content, "");
  ASSERT_EQ(calls.tool_calls.size(), 2u);
  EXPECT_EQ(calls.tool_calls[0].id, "call_0");
  EXPECT_EQ(calls.tool_calls[0].name, "get_weather");
  EXPECT_EQ(calls.tool_calls[0].arguments,
            R"({"city":"Paris, \"FR\"","days":2,"area":{"lat":48.85,"lon":-0.25,"label":null},"exact":true,)"
            R"("stops":["a",{"name":"b"}],"none":[]})");
  EXPECT_EQ(parse_json(calls.tool_calls[0].arguments, "arguments")["city"], "Paris, \"FR\"");
  EXPECT_EQ(calls.tool_calls[1].name, "now");
  EXPECT_EQ(calls.tool_calls[1].arguments, "{}");
  EXPECT_EQ(
      calls.message_json().dump(),
      R"({"role":"assistant","content":null,"reasoning_content":"Use tools.","tool_calls":[{"id":"call_0",)"
      R"("type":"function","function":{"name":"get_weather","arguments":)" +
          nlohmann::ordered_json(calls.tool_calls[0].arguments).dump() +
          R"(}},{"id":"call_1","type":"function","function":{"name":"now","arguments":"{}"}}]})");
  EXPECT_EQ(plain.message_json().dump(), R"({"role":"assistant","content":"Paris."})");
}

// An unclosed thought is all reasoning so far; a stream holds back a marker cut at its end and a tool call
// not closed yet, so that each longer text's reply only appends to the shorter one's.
TEST(GemmaChannels, StreamingHoldsBackPartialMarkers) {
  const ChatReply open = parse_gemma_channels("<|channel>thought\nStill thinking", true);
  EXPECT_EQ(open.reasoning_content, "Still thinking");
  EXPECT_EQ(open.content, "");
  EXPECT_EQ(parse_gemma_channels("<|channel>thought\nStill thinking", false).reasoning_content,
            "Still thinking");

  const ChatReply cut = parse_gemma_channels("Hello <|chan", true);
  EXPECT_EQ(cut.content, "Hello ");
  EXPECT_EQ(cut.final_bytes, 6u);
  EXPECT_EQ(parse_gemma_channels("Hello <|chan", false).content, "Hello <|chan");  // the end: it was text

  const ChatReply name_cut = parse_gemma_channels("<|channel>thou", true);
  EXPECT_EQ(name_cut.final_bytes, 0u);
  EXPECT_EQ(name_cut.reasoning_content, "");

  const ChatReply call_open = parse_gemma_channels("Let me check.<|tool_call>call:now{", true);
  EXPECT_EQ(call_open.content, "Let me check.");
  EXPECT_TRUE(call_open.tool_calls.empty());
  EXPECT_EQ(call_open.final_bytes, std::string("Let me check.").size());

  const ChatReply close_cut = parse_gemma_channels("<|channel>thought\nhm<chan", true);
  EXPECT_EQ(close_cut.reasoning_content, "hm");

  // Every prefix of a whole reply gives a reply that the next prefix's only extends.
  const std::string whole =
      "<|channel>thought\nweather?\n<channel|>Checking.<|tool_call>call:w{city:<|\"|>Oslo<|\"|>}<tool_call|>"
      "Done.";
  ChatReply before;
  for (size_t n = 0; n <= whole.size(); ++n) {
    const ChatReply now = parse_gemma_channels(std::string_view(whole).substr(0, n), true);
    EXPECT_EQ(now.reasoning_content.compare(0, before.reasoning_content.size(), before.reasoning_content), 0)
        << n;
    EXPECT_EQ(now.content.compare(0, before.content.size(), before.content), 0) << n;
    EXPECT_GE(now.tool_calls.size(), before.tool_calls.size()) << n;
    EXPECT_GE(now.final_bytes, before.final_bytes) << n;
    EXPECT_LE(now.final_bytes, n) << n;
    before = now;
  }
  EXPECT_EQ(before.reasoning_content, "weather?\n");
  EXPECT_EQ(before.content, "Checking.Done.");
  ASSERT_EQ(before.tool_calls.size(), 1u);
  EXPECT_EQ(before.tool_calls[0].arguments, R"({"city":"Oslo"})");
}

// A call that is not Gemma's format stays in the content as the model wrote it; nothing throws.
TEST(GemmaChannels, MalformedCallsStayText) {
  for (const std::string bad : {
           "<|tool_call>call:f{a:}<tool_call|>",
           "<|tool_call>call:f{a:<|\"|>x}<tool_call|>",
           "<|tool_call>call:f{a:1,}<tool_call|>",
           "<|tool_call>call:f{{}}<tool_call|>",
           "<|tool_call>call:{a:1}<tool_call|>",
           "<|tool_call>f{a:1}<tool_call|>",
           "<|tool_call>call:f{a:[1,2}<tool_call|>",
           "<|tool_call>call:f{a:1.2.3}<tool_call|>",
           "<|tool_call>call:f{a:tru}<tool_call|>",
           "<|tool_call>call:bad name{a:1}<tool_call|>",
           "<|tool_call>call:f{a:1}x<tool_call|>",
       }) {
    const ChatReply r = parse_gemma_channels("ok " + bad);
    EXPECT_TRUE(r.tool_calls.empty()) << bad;
    EXPECT_EQ(r.content, "ok " + bad);
  }
  const ChatReply unclosed = parse_gemma_channels("<|tool_call>call:f{a:1}", false);
  EXPECT_EQ(unclosed.content, "<|tool_call>call:f{a:1}");
  // Nesting past the bound is malformed, not a stack overflow.
  const std::string deep =
      "<|tool_call>call:f{a:" + std::string(100000, '[') + std::string(100000, ']') + "}<tool_call|>";
  EXPECT_TRUE(parse_gemma_channels(deep).tool_calls.empty());
  std::string json;
  EXPECT_TRUE(gemma_arguments_to_json(" a : 1 , b:<|\"|>x<|\"|> ", json));
  EXPECT_EQ(json, R"({"a":1,"b":"x"})");
}

TEST(GemmaChannels, OnlyFormatsWithChannelsAreSplit) {
  ChatFormat gemma4;
  gemma4.name = "gemma4";
  ChatFormat chatml;
  chatml.name = "chatml";
  ChatFormat own;
  own.name = "the model's";
  own.jinja = "{{ '<|turn>model\\n<|channel>thought\\n<channel|>' }}";
  EXPECT_FALSE(chat_format_has_channels(gemma4));  // the built-in format opens no thinking channel
  EXPECT_FALSE(chat_format_has_channels(chatml));
  EXPECT_TRUE(chat_format_has_channels(own));
  EXPECT_EQ(chat_reply(own, "<|channel>thought\nhm<channel|>Yes").reasoning_content, "hm");
  own.jinja = "{{ messages }}";
  EXPECT_FALSE(chat_format_has_channels(own));
  EXPECT_EQ(chat_reply(own, "<|channel>thought\nhm<channel|>Yes").content,
            "<|channel>thought\nhm<channel|>Yes");
}

// A growing reply gives each piece once: the thinking, then the answer, a tool call when it closes, and a
// marker cut at the end of the text only once the text decides it. Without channels all of it is content.
TEST(GemmaChannels, ReplyDeltasGiveEachPieceOnce) {
  ChatFormat own;
  own.jinja = "{{ '<|channel>' }}";
  ReplyDeltas deltas(&own);
  ReplyDelta d = deltas.next("<|channel>thought\nhm", false);
  EXPECT_EQ(d.reasoning_content, "hm");
  EXPECT_EQ(d.content, "");
  d = deltas.next("<|channel>thought\nhm.<channel|>Yes<|tool", false);
  EXPECT_EQ(d.reasoning_content, ".");
  EXPECT_EQ(d.content, "Yes");  // "<|tool" may begin a marker: held back
  d = deltas.next("<|channel>thought\nhm.<channel|>Yes<|tool_call>call:f{a:1}<tool_call|>", false);
  EXPECT_EQ(d.content, "");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.first_call, 0u);
  EXPECT_EQ(d.tool_calls[0].name, "f");
  d = deltas.next("<|channel>thought\nhm.<channel|>Yes<|tool_call>call:f{a:1}<tool_call|><|tool_call>call:g{}<tool_call|>", true);
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.first_call, 1u);
  EXPECT_EQ(d.tool_calls[0].name, "g");
  EXPECT_EQ(deltas.reply().tool_calls.size(), 2u);
  EXPECT_EQ(deltas.reply().reasoning_content, "hm.");

  ReplyDeltas plain(nullptr);
  EXPECT_EQ(plain.next("<|channel>a", false).content, "<|channel>a");
  EXPECT_EQ(plain.next("<|channel>ab", true).content, "b");
}

// A format with channels ends the reply at the model's hand-over to the tools, as at the end of its turn,
// whatever EOS ids the model lists (an AR model's are its config's one EOS id): a Gemma 4 model's tool call
// would otherwise run on into a tool response it makes up. Not so the built-in format (no channels).
TEST(GemmaChannels, AFormatWithChannelsStopsAtTheHandOverToTheTools) {
  const std::string path = test::source_path("models/text-dg-chat.gguf");
  const TextModel m = TextModel::from(Model::load(path), path);
  SamplerDefaults defaults = m.defaults;
  defaults.params.eos_ids.clear();
  const std::vector<int32_t> handover = m.tokenizer.encode(std::string(kGemmaToolHandover), false),
                             turn_end = m.tokenizer.encode("<turn|>", false);
  ASSERT_EQ(handover.size(), 1u);
  ASSERT_EQ(turn_end.size(), 1u);
  const auto stops_at = [&](const ChatFormat& format, int32_t id) {
    const Generator generator(m.model, &m.tokenizer, defaults, &format);
    return std::ranges::find(generator.stop_ids(), id) != generator.stop_ids().end();
  };
  ChatFormat own = m.chat;
  own.jinja = "{{ '<|turn>model\\n<|channel>thought\\n<channel|>' }}";
  EXPECT_TRUE(stops_at(own, handover[0]));
  EXPECT_TRUE(stops_at(own, turn_end[0]));
  EXPECT_EQ(m.chat.name, "gemma4");
  EXPECT_FALSE(stops_at(m.chat, handover[0]));
  EXPECT_TRUE(stops_at(m.chat, turn_end[0]));
}

}  // namespace
}  // namespace canvas
