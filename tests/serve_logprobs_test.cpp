// canvas serve as a process: logprobs on /v1/completions (OpenAI's legacy shape) and /v1/chat/completions,
// streamed and not, and echo.

#include <cmath>
#include <nlohmann/json.hpp>

#include "serve_process.h"
#include "test_util.h"

using nlohmann::json;

namespace {

using canvas::test::ServerProcess;
using canvas::test::post;
using canvas::test::post_json;

// The JSON chunks of an SSE body (without [DONE]).
std::vector<json> sse_chunks(const std::string& body) {
  std::vector<json> chunks;
  for (const std::string& event : canvas::test::sse_events(body))
    if (event != "[DONE]") chunks.push_back(json::parse(event));
  return chunks;
}

}  // namespace

// AR at temperature 0: each token is its row's most likely one (logprob = the top alternative's), the
// alternatives hold at most all the probability, and streaming gives the same entries in pieces.
TEST(ServeCli, LogprobsCompletionsAndChat) {
  ServerProcess server("--parallel 2");
  ASSERT_NE(server.port(), 0) << server.log();
  const std::string body = R"({"prompt": "And God said", "max_tokens": 8, "mode": "ar", "logprobs": 3})";
  const json j = post_json(server, "/v1/completions", body);
  const json& lp = j["choices"][0]["logprobs"];
  ASSERT_TRUE(lp.is_object()) << j.dump();
  const size_t n = j["usage"]["completion_tokens"].get<size_t>();
  ASSERT_GT(n, 0u);
  ASSERT_EQ(lp["tokens"].size(), n);
  ASSERT_EQ(lp["token_logprobs"].size(), n);
  ASSERT_EQ(lp["top_logprobs"].size(), n);
  ASSERT_EQ(lp["text_offset"].size(), n);
  std::string joined;
  for (size_t i = 0; i < n; ++i) {
    const double chosen = lp["token_logprobs"][i];
    double best = -INFINITY, mass = 0;
    EXPECT_EQ(lp["top_logprobs"][i].size(), 3u);
    for (const auto& [token, value] : lp["top_logprobs"][i].items()) {
      best = std::max(best, value.get<double>());
      mass += std::exp(value.get<double>());
    }
    EXPECT_EQ(chosen, best) << i;
    EXPECT_LE(mass, 1.0 + 1e-6);
    EXPECT_EQ(lp["text_offset"][i].get<size_t>(), joined.size()) << i;
    joined += lp["tokens"][i].get<std::string>();
  }
  EXPECT_EQ(joined, j["choices"][0]["text"]);
  // Each top_logprobs object lists its tokens most likely first (read in the order they were written).
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(post(server, "/v1/completions", body)->body);
  bool alphabetical_everywhere = true;
  for (const auto& top : ordered["choices"][0]["logprobs"]["top_logprobs"]) {
    double previous = INFINITY;
    std::string previous_token;
    for (const auto& [token, value] : top.items()) {
      EXPECT_LE(value.get<double>(), previous) << top.dump();
      if (!previous_token.empty() && token < previous_token) alphabetical_everywhere = false;
      previous = value.get<double>(), previous_token = token;
    }
  }
  EXPECT_FALSE(alphabetical_everywhere) << "the tokens are in alphabetical order: " << ordered.dump();

  // Streamed: the chunks' entries, in order, are the non-streamed ones.
  json streamed_body = json::parse(body);
  streamed_body["stream"] = true;
  auto stream = post(server, "/v1/completions", streamed_body.dump());
  ASSERT_TRUE(stream);
  json tokens = json::array(), values = json::array(), offsets = json::array();
  for (const json& c : sse_chunks(stream->body)) {
    if (c["choices"].empty()) continue;
    const json& l = c["choices"][0]["logprobs"];
    ASSERT_TRUE(l.is_object()) << c.dump();
    for (const json& t : l["tokens"]) tokens.push_back(t);
    for (const json& v : l["token_logprobs"]) values.push_back(v);
    for (const json& o : l["text_offset"]) offsets.push_back(o);
  }
  EXPECT_EQ(tokens, lp["tokens"]);
  EXPECT_EQ(values, lp["token_logprobs"]);
  EXPECT_EQ(offsets, lp["text_offset"]);

  // Chat: logprobs true with top_logprobs.
  const std::string chat_body =
      R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "mode": "ar", "logprobs": true,
          "top_logprobs": 2})";
  const json c = post_json(server, "/v1/chat/completions", chat_body);
  const json& content = c["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), c["usage"]["completion_tokens"].get<size_t>()) << c.dump();
  std::string text;
  for (const json& e : content) {
    ASSERT_EQ(e["top_logprobs"].size(), 2u);
    EXPECT_EQ(e["logprob"], e["top_logprobs"][0]["logprob"]);
    EXPECT_GE(e["top_logprobs"][0]["logprob"].get<double>(), e["top_logprobs"][1]["logprob"].get<double>());
    const std::string token = e["token"];
    json bytes = json::array();
    for (unsigned char ch : token) bytes.push_back(int(ch));
    EXPECT_EQ(e["bytes"], bytes);
    text += token;
  }
  EXPECT_EQ(text, c["choices"][0]["message"]["content"]);
  json chat_stream = json::parse(chat_body);
  chat_stream["stream"] = true;
  auto cs = post(server, "/v1/chat/completions", chat_stream.dump());
  ASSERT_TRUE(cs);
  json streamed_content = json::array();
  for (const json& chunk : sse_chunks(cs->body))
    for (const json& e : chunk["choices"][0]["logprobs"]["content"]) streamed_content.push_back(e);
  EXPECT_EQ(streamed_content, content);
  // Without logprobs the field is null, as before.
  const json plain = post_json(server, "/v1/chat/completions",
                               R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})");
  EXPECT_TRUE(plain["choices"][0]["logprobs"].is_null());

  // Diffusion: an entry per token, each its committing pass's probability.
  const json d = post_json(server, "/v1/completions",
                           R"({"prompt": "And God said", "max_tokens": 8, "mode": "diffusion", "logprobs": 1})");
  EXPECT_EQ(d["choices"][0]["logprobs"]["token_logprobs"].size(), d["usage"]["completion_tokens"].get<size_t>());

  // Bad requests: 400 naming the field.
  for (const auto& [bad, field] : std::vector<std::pair<std::string, std::string>>{
           {R"({"prompt": "a", "logprobs": 21})", "logprobs"},
           {R"({"prompt": "a", "logprobs": true})", "logprobs"},
           {R"({"prompt": "a", "logprobs": 2, "suffix": "b", "mode": "diffusion"})", "logprobs"},
           {R"({"prompt": "a", "echo": true, "suffix": "b", "mode": "diffusion"})", "echo"}}) {
    auto res = post(server, "/v1/completions", bad);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << bad << " " << res->body;
    EXPECT_EQ(json::parse(res->body)["error"]["param"], field) << bad;
  }
  auto top_alone = post(server, "/v1/chat/completions",
                        R"({"messages": [{"role": "user", "content": "Hi"}], "top_logprobs": 2})");
  ASSERT_TRUE(top_alone);
  EXPECT_EQ(top_alone->status, 400);
}

// echo: the prompt before the completion; with logprobs the prompt's tokens come first, with null values.
TEST(ServeCli, EchoPrependsThePrompt) {
  ServerProcess server("");
  ASSERT_NE(server.port(), 0) << server.log();
  const json plain = post_json(server, "/v1/completions", R"({"prompt": "And God said", "max_tokens": 6, "mode": "ar"})");
  const json j = post_json(server, "/v1/completions",
                           R"({"prompt": "And God said", "max_tokens": 6, "mode": "ar", "echo": true, "logprobs": 1})");
  EXPECT_EQ(j["choices"][0]["text"], "And God said" + plain["choices"][0]["text"].get<std::string>());
  const json& lp = j["choices"][0]["logprobs"];
  const size_t P = j["usage"]["prompt_tokens"], n = j["usage"]["completion_tokens"];
  ASSERT_EQ(lp["tokens"].size(), P + n);
  for (size_t i = 0; i < P; ++i) {
    EXPECT_TRUE(lp["token_logprobs"][i].is_null());
    EXPECT_TRUE(lp["top_logprobs"][i].is_null());
  }
  for (size_t i = P; i < P + n; ++i) EXPECT_TRUE(lp["token_logprobs"][i].is_number());
  EXPECT_EQ(lp["text_offset"][P], 12);  // the completion starts after the 12-byte prompt
  // Streamed: the first chunk starts with the prompt (and its entries).
  auto stream = post(server, "/v1/completions",
                     R"({"prompt": "And God said", "max_tokens": 6, "mode": "ar", "echo": true, "logprobs": 1,
                         "stream": true})");
  ASSERT_TRUE(stream);
  std::string text;
  json values = json::array();
  for (const json& c : sse_chunks(stream->body)) {
    text += c["choices"][0]["text"].get<std::string>();
    for (const json& v : c["choices"][0]["logprobs"]["token_logprobs"]) values.push_back(v);
  }
  EXPECT_EQ(text, j["choices"][0]["text"]);
  EXPECT_EQ(values, lp["token_logprobs"]);
}

// Special tokens among the alternatives are shown by name ("<turn|>"), never as an empty token: the chat
// model's reply ends at its end-of-turn token, which the alternatives of the steps before it hold.
TEST(ServeCli, LogprobsNameSpecialTokens) {
  ServerProcess server("--parallel 1", "models/text-dg-chat.gguf");
  ASSERT_NE(server.port(), 0) << server.log();
  const json ended = post_json(server, "/v1/chat/completions",
                               R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 100, "mode": "ar",
                                   "logprobs": true, "top_logprobs": 5})");
  ASSERT_TRUE(ended.contains("choices")) << ended.dump();
  EXPECT_EQ(ended["choices"][0]["finish_reason"], "stop") << ended.dump();
  bool special_named = false;
  for (const json& e : ended["choices"][0]["logprobs"]["content"])
    for (const json& alt : e["top_logprobs"]) {
      EXPECT_NE(alt["token"], "") << e.dump();
      special_named = special_named || alt["token"] == "<turn|>";
    }
  EXPECT_TRUE(special_named) << ended.dump();
}
