// What a client gets wrong is a 4xx in OpenAI's error shape, never a 500 with a library's text: values of
// every wrong type in every field of every endpoint, empty Host headers; and what it may spell either way
// (the Authorization scheme) is accepted.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf_copy.h"
#include "serve/http_connections.h"
#include "serve_process.h"
#include "test_util.h"

namespace canvas {
namespace {

using nlohmann::json;
using test::ServerProcess;

// Values of every JSON type (and edge values of some).
std::vector<json> confusing_values() {
  return {json(5),     json(-1),         json(1.5),        json(1e300),  json(uint64_t(1) << 63),
          json("yes"), json(""),         json(true),       json(nullptr), json::array(),
          json::array({1, "a"}), json::object(), json({{"type", 5}, {"text", "hi"}})};
}

struct Endpoint {
  std::string path;
  json base;                        // a valid body
  std::vector<std::string> fields;  // fields to confuse (a '/' path for a nested one)
};

// Sets `path` ("a/0/b") in `body` to `value`.
void set_at(json& body, const std::string& path, const json& value) {
  json* at = &body;
  size_t from = 0;
  while (true) {
    const size_t slash = path.find('/', from);
    const std::string part = path.substr(from, slash == std::string::npos ? std::string::npos : slash - from);
    json& next = at->is_array() ? (*at)[std::stoul(part)] : (*at)[part];
    if (slash == std::string::npos) {
      next = value;
      return;
    }
    if (!next.is_object() && !next.is_array()) next = json::object();
    at = &next;
    from = slash + 1;
  }
}

// 16 of 880 type-confused bodies answered 500 with nlohmann's text (e.g. {"content":"x","add_special":"yes"}
// to /tokenize, a chat message part {"type":5,"text":"hi"}); every one is now a 4xx (or a success) and every
// error is OpenAI's {"error": {message, type, param, code}} without the library's words.
TEST(ServeClientErrors, TypeConfusedBodiesAreNever5xx) {
  ServerProcess server("--parallel 1");
  ASSERT_NE(server.port(), 0) << server.log();
  const std::vector<std::string> common = {
      "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "stop/0", "n", "stream",
      "stream_options", "stream_options/include_usage", "user", "frequency_penalty", "presence_penalty", "steps",
      "block_length", "threshold", "entropy_bound", "cache", "mode", "canvas_draft", "repeat_penalty",
      "draft_length", "draft_steps", "draft_lookup", "draft_lookup_length", "draft_tree", "draft_tree_depth", "overlap",
      "response_format",
      "response_format/type", "response_format/json_schema", "response_format/json_schema/schema", "logit_bias",
      "tools", "tool_choice", "parallel_tool_calls", "metadata", "store", "service_tier", "parse_special", "logprobs", "unknown_field"};
  auto with = [&](std::vector<std::string> own) {
    own.insert(own.end(), common.begin(), common.end());
    return own;
  };
  const json settings = {{"max_tokens", 1}, {"steps", 1}};
  json completion = settings;
  completion["prompt"] = "In the beginning";
  json chat = settings;
  chat["messages"] = json::array({{{"role", "user"}, {"content", "Hi"}}});
  json infill = {{"input_prefix", "In the "}, {"input_suffix", " beginning"}, {"n_predict", 1}, {"steps", 1}};
  const std::vector<Endpoint> endpoints = {
      {"/v1/completions", completion, with({"prompt", "prompt/0", "suffix", "echo"})},
      {"/v1/chat/completions", chat,
       with({"messages", "messages/0", "messages/0/role", "messages/0/content", "messages/0/content/0",
             "messages/0/content/0/type", "messages/0/content/0/text", "max_completion_tokens", "top_logprobs"})},
      {"/infill", infill,
       with({"input_prefix", "input_suffix", "n_predict", "prompt", "input_extra", "input_extra/0"})},
      {"/tokenize", {{"content", "In the beginning"}}, {"content", "add_special", "model", "with_pieces"}},
      {"/detokenize", {{"tokens", {1, 2}}}, {"tokens", "tokens/0", "model"}},
      {"/completion", completion, {"prompt"}},
      {"/v1/embeddings", {{"input", "x"}}, {"input"}},
  };
  int sent = 0, failures = 0;
  auto client = server.client();
  for (const Endpoint& e : endpoints) {
    std::vector<json> bodies = {e.base, json::array(), json("x"), json(5), json(nullptr)};
    for (const std::string& field : e.fields)
      for (const json& value : confusing_values()) {
        json body = e.base;
        set_at(body, field, value);
        bodies.push_back(body);
      }
    for (const json& body : bodies) {
      const auto res = client.Post(e.path, body.dump(), "application/json");
      ++sent;
      ASSERT_TRUE(res) << e.path << " " << body.dump() << "\n" << server.log();
      if (res->status >= 500 || res->status < 200) {
        ADD_FAILURE() << e.path << " " << body.dump() << " -> " << res->status << " " << res->body;
        if (++failures > 20) return;
        continue;
      }
      if (res->status < 400) continue;
      const json answer = json::parse(res->body, nullptr, false);
      ASSERT_TRUE(answer.is_object() && answer.contains("error")) << res->body;
      const json& error = answer["error"];
      EXPECT_TRUE(error["message"].is_string() && error.contains("type") && error.contains("param") &&
                  error.contains("code"))
          << res->body;
      EXPECT_EQ(res->body.find("json.exception"), std::string::npos) << e.path << " " << body.dump() << " -> "
                                                                     << res->body;
    }
  }
  EXPECT_GT(sent, 1000);
  // The two the report named: the field is named.
  const auto special = client.Post("/tokenize", R"({"content":"x","add_special":"yes"})", "application/json");
  ASSERT_TRUE(special);
  EXPECT_EQ(special->status, 400);
  EXPECT_EQ(json::parse(special->body)["error"]["param"], "add_special") << special->body;
  const auto part = client.Post(
      "/v1/chat/completions", R"({"messages":[{"role":"user","content":[{"type":5,"text":"hi"}]}],"max_tokens":1})",
      "application/json");
  ASSERT_TRUE(part);
  EXPECT_EQ(part->status, 400);
  EXPECT_EQ(json::parse(part->body)["error"]["param"], "messages[0].content") << part->body;
}

// A model's chat template that writes far more than the context holds ({{ m.content * 65536 }} made a 2 KB
// message a 131M-token prompt) is a 400 context_length_exceeded naming the template, answered at once.
TEST(ServeClientErrors, ChatTemplatePastTheContextIsRefused) {
  test::TempDir dir;
  const std::string model =
      test::with_chat_template(dir, "repeat.gguf", "{% for m in messages %}{{ m.content * 300 }}{% endfor %}");
  ServerProcess server("-m " + model + " --parallel 1", "");
  ASSERT_NE(server.port(), 0) << server.log();
  const json body = {{"messages", json::array({{{"role", "user"}, {"content", std::string(2048, 'a')}}})},
                     {"max_tokens", 1}};
  const auto start = std::chrono::steady_clock::now();
  const auto res = server.client().Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(res->status, 400) << res->body;
  const json error = json::parse(res->body)["error"];
  EXPECT_EQ(error["code"], "context_length_exceeded") << res->body;
  EXPECT_NE(error["message"].get<std::string>().find("repeat.gguf's tokenizer.chat_template"), std::string::npos)
      << res->body;
}

// An empty Host header is refused as a missing one is (RFC 9112 3.2): it was answered 200.
TEST(ServeClientErrors, EmptyHostIsRefused) {
  for (const std::string request : {"GET /health HTTP/1.1\r\nHost: \r\n\r\n", "GET /health HTTP/1.1\r\nHost:\r\n\r\n",
                                    "GET /health HTTP/1.0\r\nHost:  \r\n\r\n"}) {
    const serve::ConnectionLimits limits;
    serve::RequestReader reader(limits);
    std::string in = request;
    EXPECT_EQ(reader.advance(in), serve::RequestReader::Status::Failed) << request;
    EXPECT_EQ(reader.failure().status, 400) << request;
  }
  const serve::ConnectionLimits limits;
  serve::RequestReader reader(limits);
  std::string ok = "GET /health HTTP/1.1\r\nHost: a\r\n\r\n";
  EXPECT_EQ(reader.advance(ok), serve::RequestReader::Status::Ready);
}

// The Authorization scheme is case-insensitive (RFC 9110 11.1): "bearer KEY" is accepted; the key is not.
TEST(ServeClientErrors, BearerSchemeIsCaseInsensitive) {
  ServerProcess server("--parallel 1 --api-key sesame");
  ASSERT_NE(server.port(), 0) << server.log();
  auto client = server.client();
  for (const char* value : {"Bearer sesame", "bearer sesame", "BEARER sesame", "bEaReR  sesame"}) {
    const auto res = client.Get("/v1/models", {{"Authorization", value}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << value << ": " << res->body;
  }
  for (const char* value : {"bearer SESAME", "Basic sesame", "bearer", "sesame", "Bearer sesame2"}) {
    const auto res = client.Get("/v1/models", {{"Authorization", value}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 401) << value;
  }
}

// A draft-and-verify pass's rows grow with the square of an overlapped draft: a draft too long for the
// model's context and the logits bound is refused before anything is allocated, naming the longest that fits
// (it reached 23 GB before the kernel killed it), in the CLI and over HTTP.
TEST(ServeClientErrors, VerifyDraftsAreBoundedBeforeTheyAreComputed) {
  const auto start = std::chrono::steady_clock::now();
  const auto r = test::run_canvas("generate -p 'And God said' -n 1000 --mode verify --overlap --draft-length 1024");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--draft-length 1024 with --overlap computes 1051650 rows per pass"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("at most --draft-length"), std::string::npos) << r.output;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  ServerProcess server("--parallel 1", "models/text-dg.gguf");
  ASSERT_NE(server.port(), 0) << server.log();
  const auto res = server.client().Post(
      "/v1/completions",
      R"({"prompt": "And God said", "mode": "verify", "overlap": true, "draft_length": 1024, "max_tokens": 400})",
      "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400) << res->body;
  EXPECT_NE(res->body.find("rows per pass"), std::string::npos) << res->body;
  // What fits still runs.
  const auto ok = server.client().Post(
      "/v1/completions", R"({"prompt": "And God said", "mode": "verify", "overlap": true, "draft_length": 3, "max_tokens": 8})",
      "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

// Issue 61 L: "mode": "verify" to an AR-only model was refused with "--mode diffusion: ...", naming a mode
// the request never asked for; the refusal names verify, why it cannot run here, and the mode that can.
TEST(ServeClientErrors, VerifyOnAnArModelIsRefusedAsVerify) {
  const auto cli = test::run_canvas("generate -m " + test::source_path("models/text-ar.gguf") +
                                    " -p 'And' -n 4 --mode verify");
  EXPECT_NE(cli.exit_code, 0);
  EXPECT_NE(cli.output.find("--mode verify needs a diffusion decoder"), std::string::npos) << cli.output;
  EXPECT_NE(cli.output.find("use --mode ar"), std::string::npos) << cli.output;
  EXPECT_EQ(cli.output.find("--mode diffusion"), std::string::npos) << cli.output;
  ServerProcess server("--parallel 1", "models/text-ar.gguf");
  ASSERT_NE(server.port(), 0) << server.log();
  const auto res = server.client().Post("/v1/completions", R"({"prompt": "And", "mode": "verify", "max_tokens": 4})",
                                        "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400) << res->body;
  const json error = json::parse(res->body)["error"];
  const std::string message = error["message"];
  EXPECT_NE(message.find("'mode': 'verify'"), std::string::npos) << message;
  EXPECT_NE(message.find("use 'mode': 'ar'"), std::string::npos) << message;
  EXPECT_EQ(message.find("diffusion:"), std::string::npos) << message;
  EXPECT_EQ(error["param"], "mode");
}

// Issue 61 L: a config may claim any context length (2^62 is a valid GGUF number), and a request's max_tokens
// sized the KV cache from it: max_tokens 2^20 asked for gigabytes and got a 500 bad_alloc. A context past
// kMaxContextLength is refused at load naming the file and key; within it, what one request's KV cache may
// take is bounded by the memory the process may use, and past that the request is a 400 naming the limit,
// before anything is allocated (in the CLI and over HTTP).
TEST(ServeClientErrors, ContextAndKvCacheAreBoundedBeforeAllocating) {
  test::TempDir dir;
  const std::string huge = test::gguf_with_keys(dir, "huge-context.gguf", test::source_path("models/text-ar.gguf"),
                                                {{"llama.context_length", GgufValue::u64(uint64_t(1) << 62)}});
  const auto refused = test::run_canvas("generate -m " + huge + " -p 'And' -n 4");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find(huge + ": llama.context_length 4611686018427387904 is not a context length canvas "
                                       "can hold (1..16777216 tokens)"),
            std::string::npos)
      << refused.output;
#ifdef CANVAS_TEST_SANITIZED
  GTEST_SKIP() << "the sanitizer's shadow memory does not fit an address-space limit";
#endif
  // 2^22 tokens: a valid context, whose whole KV cache (6 KiB a token on this model) is 24 GiB.
  const std::string longer = test::gguf_with_keys(dir, "long-context.gguf", test::source_path("models/text-ar.gguf"),
                                                  {{"llama.context_length", GgufValue::u32(uint32_t(1) << 22)}});
  const std::string limit = "ulimit -v 4194304;";  // 4 GiB of address space: 2 GiB for one request's KV cache
  const auto cli = test::run_canvas("generate -m " + longer + " -p 'And' -n 1048576 --mode ar", true, limit);
  EXPECT_NE(cli.exit_code, 0);
  EXPECT_NE(cli.output.find("MiB of KV cache (6148 bytes a token on this model); one request may take 2048 MiB"),
            std::string::npos)
      << cli.output;
  ServerProcess server("--parallel 1 -m " + longer, "", limit);
  ASSERT_NE(server.port(), 0) << server.log();
  auto client = server.client();
  const auto res = client.Post("/v1/completions", R"({"prompt": "And", "mode": "ar", "max_tokens": 1048576})",
                               "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400) << res->body;
  const json error = json::parse(res->body)["error"];
  EXPECT_EQ(error["param"], "max_tokens");
  EXPECT_NE(error["message"].get<std::string>().find("one request may take 2048 MiB"), std::string::npos) << res->body;
  const auto ok = client.Post("/v1/completions", R"({"prompt": "And", "mode": "ar", "max_tokens": 8})",
                              "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

}  // namespace
}  // namespace canvas
