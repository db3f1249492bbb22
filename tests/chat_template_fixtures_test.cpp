// Chat templates against jinja2: the Gemma 4 style fixture template (tests/fixtures/chat/gemma4-style.jinja)
// rendered over the conversations of conversations.json must give the texts make_chat_fixtures.py made
// with jinja2, byte for byte. CANVAS_CHAT_TEMPLATE and CANVAS_CHAT_EXPECTED point the same test at another
// template and its jinja2 renders (a model's own chat_template.jinja, checked locally).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "text/chat_template.h"
#include "io/json.h"
#include "test_util.h"

namespace canvas {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The inputs transformers' apply_chat_template would get for one case of conversations.json.
ChatTemplateInputs inputs_of(const nlohmann::ordered_json& c) {
  ChatTemplateInputs in;
  for (const auto& m : c.at("messages"))
    in.messages.push_back(ChatMessage::from_json(m, c.at("name").get<std::string>()));
  in.bos_token = "<bos>";
  in.eos_token = "<eos>";
  in.add_generation_prompt = c.value("add_generation_prompt", true);
  if (c.contains("tools")) in.tools = c.at("tools");
  if (c.contains("enable_thinking")) in.enable_thinking = c.at("enable_thinking").get<bool>();
  return in;
}

TEST(ChatTemplateFixtures, Gemma4StyleRendersAsJinja2) {
  const char* template_override = std::getenv("CANVAS_CHAT_TEMPLATE");
  const char* expected_override = std::getenv("CANVAS_CHAT_EXPECTED");
  const std::string source =
      read_text(template_override ? template_override : test::fixture("chat/gemma4-style.jinja"));
  const std::string expected_dir = expected_override ? expected_override : test::fixture("chat/gemma4-style");
  const nlohmann::ordered_json cases =
      parse_json_ordered(read_text(test::fixture("chat/conversations.json")), "conversations.json");
  ASSERT_GE(cases.size(), 8u);
  for (const auto& c : cases) {
    const std::string name = c.at("name").get<std::string>();
    const std::string expected = read_text(expected_dir + "/" + name + ".txt");
    std::string rendered;
    try {
      rendered = render_chat_template(source, inputs_of(c));
    } catch (const Error& e) {
      ADD_FAILURE() << name << ": " << e.what();
      continue;
    }
    EXPECT_EQ(rendered, expected) << name;
  }
}

// The release's own format, as transformers' DiffusionGemma test expects it for one user turn.
TEST(ChatTemplateFixtures, OneUserTurnOpensAnEmptyThinkingChannel) {
  ChatTemplateInputs in;
  in.messages = {{"user", "Hello!"}};
  in.bos_token = "<bos>";
  const std::string source = read_text(test::fixture("chat/gemma4-style.jinja"));
  EXPECT_EQ(render_chat_template(source, in),
            "<bos><|turn>user\nHello!<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
  in.enable_thinking = true;
  EXPECT_EQ(render_chat_template(source, in),
            "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHello!<turn|>\n<|turn>model\n");
}

TEST(ChatTemplateFixtures, MessagesRoundTripThroughJson) {
  const nlohmann::ordered_json call = nlohmann::ordered_json::parse(
      R"({"role": "assistant", "content": "", "reasoning_content": "hmm",
          "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]})");
  const ChatMessage m = ChatMessage::from_json(call, "test");
  EXPECT_EQ(m.reasoning_content, "hmm");
  EXPECT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.to_json().dump(), call.dump());
  const ChatMessage parts = ChatMessage::from_json(
      nlohmann::ordered_json::parse(
          R"({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image"}]})"),
      "test");
  EXPECT_EQ(parts.content, "a");
  EXPECT_TRUE(parts.content_parts.is_array());
  for (const char* bad :
       {R"([1])", R"({"content": "x"})", R"({"role": 3})", R"({"role": "user", "tool_calls": 1})"}) {
    EXPECT_THROW(ChatMessage::from_json(nlohmann::ordered_json::parse(bad), "test"), Error) << bad;
  }
}

}  // namespace
}  // namespace canvas
