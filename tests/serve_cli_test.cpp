// canvas serve as a process: endpoints, OpenAI error shapes, limits, API key, full queue, client
// disconnects, SIGTERM. Each test starts its own server on a free port of 127.0.0.1.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "serve_process.h"
#include "test_util.h"

using nlohmann::json;

namespace {

using canvas::test::ServerProcess;


using canvas::test::post;

// The error JSON OpenAI's clients parse: {"error": {"message": string, "type": string, ...}}.
void expect_error(const httplib::Result& res, int status, const std::string& message_part = "") {
  ASSERT_TRUE(res) << "no response";
  EXPECT_EQ(res->status, status) << res->body;
  const json j = json::parse(res->body);
  ASSERT_TRUE(j.contains("error")) << res->body;
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_TRUE(j["error"]["type"].is_string());
  EXPECT_TRUE(j["error"].contains("param") && j["error"].contains("code"));
  if (!message_part.empty()) {
    EXPECT_NE(j["error"]["message"].get<std::string>().find(message_part), std::string::npos) << res->body;
  }
}

using canvas::test::sse_events;

}  // namespace

TEST(ServeCli, EndpointsAndCompletions) {
  ServerProcess server("--parallel 2");
  ASSERT_NE(server.port(), 0) << server.log();
  auto health = server.client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(json::parse(health->body)["status"], "ok");
  auto models = server.client().Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "text-masked");  // the file's stem
  auto page = server.client().Get("/");
  ASSERT_TRUE(page);
  EXPECT_NE(page->body.find("<textarea id=\"prompt\""), std::string::npos);

  auto res = post(server, "/v1/completions", R"({"prompt": "And God said", "max_tokens": 16, "mode": "diffusion"})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json j = json::parse(res->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_TRUE(j["choices"][0]["text"].is_string());
  EXPECT_EQ(j["usage"]["prompt_tokens"], 12);  // byte-level: 12 bytes (the model adds no BOS)
  EXPECT_EQ(j["usage"]["forward_passes"], 16);  // one token per step by default
  EXPECT_EQ(j["canvas"]["mode"], "diffusion");
  // auto with threshold decoding (masked diffusion's) is checked as the mode the router picks, diffusion (it
  // was also checked as AR, and refused).
  auto threshold = post(server, "/v1/completions", R"({"prompt": "And God said", "max_tokens": 16, "threshold": 0.9})");
  ASSERT_TRUE(threshold);
  ASSERT_EQ(threshold->status, 200) << threshold->body;
  EXPECT_EQ(json::parse(threshold->body)["canvas"]["mode"], "diffusion");

  // The same request decoded by `canvas generate` gives the same text (temperature 0).
  const auto generated = canvas::test::run_canvas("generate -m " + canvas::test::source_path("models/text-masked.gguf") +
                                                    " -p 'And God said' -n 16 --block-length 16 --json", false);
  ASSERT_EQ(generated.exit_code, 0);
  const json g = json::parse(generated.output);
  std::string expected = g["text"];
  EXPECT_EQ(j["choices"][0]["text"], expected);

  auto chat = post(server, "/v1/chat/completions",
                   R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "mode": "ar"})");
  ASSERT_TRUE(chat);
  ASSERT_EQ(chat->status, 200) << chat->body;
  const json c = json::parse(chat->body);
  EXPECT_EQ(c["object"], "chat.completion");
  EXPECT_EQ(c["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(c["canvas"]["mode"], "ar");

  // Streaming: deltas in order, whose concatenation is the non-streamed text; drafts; usage; [DONE].
  auto stream = post(server, "/v1/completions",
                     R"({"prompt": "And God said", "max_tokens": 16, "mode": "diffusion", "stream": true,
                         "canvas_draft": true, "stream_options": {"include_usage": true}})");
  ASSERT_TRUE(stream);
  ASSERT_EQ(stream->status, 200);
  EXPECT_NE(stream->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  const auto events = sse_events(stream->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  int drafts = 0, masked_in_first = 0;
  json usage;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json e = json::parse(events[i]);
    if (e.contains("usage")) usage = e["usage"];
    if (!e["choices"].empty()) text += e["choices"][0]["text"].get<std::string>();
    // Every chunk has canvas.mode; drafts also the tokens (none in the one sent before the first step).
    if (e["canvas"].contains("tokens") && !e["canvas"]["tokens"].empty()) {
      if (drafts++ == 0)  // the first step's draft: most positions still masked
        for (const json& t : e["canvas"]["tokens"]) masked_in_first += t.is_null();
    }
  }
  EXPECT_EQ(text, expected);
  // A draft goes out for the canvas as it is when the stream wakes: steps that finish while a chunk is being
  // written are seen together (a live view skips frames rather than falling behind), so the count of
  // drafts depends on the scheduler (one loaded CI run saw 5 of the 16 steps); at least one before the end.
  EXPECT_GE(drafts, 2);
  EXPECT_GT(masked_in_first, 0);
  EXPECT_EQ(usage["forward_passes"], 16);
}

TEST(ServeCli, BadInputGivesOpenAiErrors) {
  ServerProcess server("--parallel 1");
  ASSERT_NE(server.port(), 0) << server.log();
  expect_error(post(server, "/v1/completions", "{\"prompt\": "), 400, "malformed JSON");
  // A body nested far deeper than any request: refused before parsing, the server stays up.
  expect_error(post(server, "/v1/completions", std::string(100000, '[')), 400, "nested more than");
  expect_error(post(server, "/v1/completions", R"({"prompt": 5})"), 400, "'prompt'");
  // Unknown fields are ignored, as llama-server does (the log names each once); a known field's bad value is not.
  {
    auto res = post(server, "/v1/completions", R"({"prompt": "a", "colour": "blue", "max_tokens": 2})");
    ASSERT_TRUE(res && res->status == 200) << (res ? res->body : "no response");
  }
  expect_error(post(server, "/v1/completions", R"({"prompt": "a", "presence_penalty": 3})"), 400, "presence_penalty");
  expect_error(post(server, "/v1/completions", R"({"prompt": "a", "logit_bias": {"x": 1}})"), 400, "logit_bias");
  // Masked diffusion (this model's mode) commits positions in parallel: no history for the penalties to count.
  {
    auto res = post(server, "/v1/completions", R"({"prompt": "a", "presence_penalty": 0.5})");
    expect_error(res, 400, "masked diffusion (--mode diffusion) has no such order");
    EXPECT_EQ(json::parse(res->body)["error"]["param"], "presence_penalty") << res->body;
    res = post(server, "/v1/completions", R"({"prompt": "a", "frequency_penalty": 0.5})");
    expect_error(res, 400, "masked diffusion (--mode diffusion) has no such order");
    EXPECT_EQ(json::parse(res->body)["error"]["param"], "frequency_penalty") << res->body;
    res = post(server, "/v1/completions", R"({"prompt": "a", "logit_bias": {"999999": 1}})");
    expect_error(res, 400, "token id 999999 is outside the vocabulary");
    EXPECT_EQ(json::parse(res->body)["error"]["param"], "logit_bias") << res->body;
  }
  expect_error(post(server, "/v1/completions", R"({"prompt": "a", "tools": 5})"), 400, "'tools'");
  expect_error(post(server, "/v1/completions", R"({"prompt": "a", "max_tokens": 0})"), 400, "max_tokens");
  expect_error(post(server, "/v1/completions", R"({"prompt": "a", "max_tokens": 1000000})"), 400, "context length");
  expect_error(post(server, "/v1/completions", "{\"prompt\": \"" + std::string(300, 'a') + "\"}"), 400,
               "context length");
  expect_error(post(server, "/v1/chat/completions", R"({"messages": "hi"})"), 400, "'messages'");
  // Any max_tokens: a masked canvas is padded to whole blocks and cut back, as canvas generate does.
  {
    auto res = post(server, "/v1/completions", R"({"prompt": "a", "max_tokens": 12, "block_length": 8, "mode": "diffusion"})");
    ASSERT_TRUE(res && res->status == 200) << (res ? res->body : "no response");
    EXPECT_LE(json::parse(res->body)["usage"]["completion_tokens"].get<int>(), 12);
  }
  expect_error(server.client().Get("/v1/nothing"), 404);
  // Bodies over the limit (1 MiB) are refused before they are parsed.
  expect_error(post(server, "/v1/completions", "{\"prompt\": \"" + std::string(2 << 20, 'a') + "\"}"), 413);
}

TEST(ServeCli, ApiKeyIsRequiredWhenSet) {
  ServerProcess server("--parallel 1 --api-key sesame");
  ASSERT_NE(server.port(), 0) << server.log();
  const std::string body = R"({"prompt": "a", "max_tokens": 4, "mode": "ar"})";
  expect_error(post(server, "/v1/completions", body), 401, "API key");
  expect_error(post(server, "/v1/completions", body, {{"Authorization", "Bearer wrong"}}), 401);
  auto ok = post(server, "/v1/completions", body, {{"Authorization", "Bearer sesame"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  auto health = server.client().Get("/health");  // load balancers probe without a key
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body), json({{"status", "ok"}}));  // the details are for key holders
  health = server.client().Get("/health", {{"Authorization", "Bearer sesame"}});
  ASSERT_TRUE(health);
  EXPECT_TRUE(json::parse(health->body).contains("running")) << health->body;
  // With a key, any Host name may reach the server (a proxy's name, say): the key guards it.
  auto proxied = server.client().Get("/health", {{"Host", "canvas.internal"}});
  ASSERT_TRUE(proxied);
  EXPECT_EQ(proxied->status, 200);
}

// One slot, no queue: while a long stream holds the slot, another request gets 503 + Retry-After; when
// the streaming client disconnects, its generation is cancelled and the slot is free again.
TEST(ServeCli, FullQueueRefusesAndDisconnectFreesTheSlot) {
  ServerProcess server("--parallel 1 --queue 0");
  ASSERT_NE(server.port(), 0) << server.log();
  std::atomic<bool> got_chunk{false};
  std::thread streamer([&] {
    httplib::Client c = server.client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = R"({"prompt": "And", "max_tokens": 120, "mode": "diffusion", "cache": "none", "stream": true,
                   "canvas_draft": true})";
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      got_chunk = true;
      return false;  // disconnect after the first chunk
    };
    c.send(req);
  });
  for (int i = 0; i < 400 && !got_chunk; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(got_chunk);
  streamer.join();
  // The disconnect may or may not have been seen yet: either the request is refused (busy) or served.
  auto busy = post(server, "/v1/completions", R"({"prompt": "a", "max_tokens": 4, "mode": "ar"})");
  ASSERT_TRUE(busy);
  if (busy->status == 503) {
    EXPECT_EQ(busy->get_header_value("Retry-After"), "1");
    expect_error(busy, 503, "busy");
  }
  // Within a few steps the cancelled generation leaves its slot.
  bool freed = false;
  for (int i = 0; i < 200 && !freed; ++i) {
    auto h = server.client().Get("/health");
    freed = h && json::parse(h->body)["running"] == 0;
    if (!freed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(freed);
  auto ok = post(server, "/v1/completions", R"({"prompt": "a", "max_tokens": 4, "mode": "ar"})");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

TEST(ServeCli, FullQueueGives503WithRetryAfter) {
  ServerProcess server("--parallel 1 --queue 0");
  ASSERT_NE(server.port(), 0) << server.log();
  std::thread slow([&] {
    post(server, "/v1/completions", R"({"prompt": "And", "max_tokens": 120, "mode": "diffusion", "cache": "none"})");
  });
  bool running = false;
  for (int i = 0; i < 500 && !running; ++i) {
    auto h = server.client().Get("/health");
    running = h && json::parse(h->body)["running"] == 1;
    if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(running);
  auto busy = post(server, "/v1/completions", R"({"prompt": "a", "max_tokens": 4, "mode": "ar"})");
  expect_error(busy, 503, "busy");
  EXPECT_EQ(busy->get_header_value("Retry-After"), "1");
  slow.join();
}

// A prompt is encoded and checked before its request is queued: with the slot taken and the queue full, a
// prompt longer than the context is answered 400 at once (not the full queue's 503, nor after a wait for
// a slot), and a good request meanwhile gets the 503.
TEST(ServeCli, PromptOverTheContextGets400WithTheQueueFull) {
  ServerProcess server("--parallel 1 --queue 1");
  ASSERT_NE(server.port(), 0) << server.log();
  const std::string slow_body = R"({"prompt": "And", "max_tokens": 120, "mode": "diffusion", "cache": "none"})";
  // Waits (up to 2.5 s) until /health says `count` requests are `state` (running or queued).
  auto health_says = [&](const char* state, int count) {
    for (int i = 0; i < 500; ++i) {
      auto h = server.client().Get("/health");
      if (h && json::parse(h->body)[state] == count) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  };
  std::thread running_request([&] { post(server, "/v1/completions", slow_body); });
  ASSERT_TRUE(health_says("running", 1));
  std::thread queued_request([&] { post(server, "/v1/completions", slow_body); });
  ASSERT_TRUE(health_says("queued", 1));
  std::string long_prompt;
  for (int i = 0; i < 4000; ++i) long_prompt += "And God said, Let there be light. ";
  const auto t0 = std::chrono::steady_clock::now();
  auto bad = post(server, "/v1/completions", json{{"prompt", long_prompt}, {"max_tokens", 4}}.dump());
  auto chat = post(server, "/v1/chat/completions",
                   json{{"messages", {{{"role", "user"}, {"content", long_prompt}}}}, {"max_tokens", 4}}.dump());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  expect_error(bad, 400, "context length");
  EXPECT_EQ(json::parse(bad->body)["error"]["code"], "context_length_exceeded") << bad->body;
  expect_error(chat, 400);
  auto busy = post(server, "/v1/completions", R"({"prompt": "a", "max_tokens": 4, "mode": "ar"})");
  expect_error(busy, 503, "busy");
  // Answered while both slow requests still held the slot and the queue.
  auto h = server.client().Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(json::parse(h->body)["queued"], 1) << h->body << " (the 400s took " << seconds << " s)";
  running_request.join();
  queued_request.join();
}

TEST(ServeCli, SigtermFinishesRunningRequestsAndExitsZero) {
  ServerProcess server("--parallel 2");
  ASSERT_NE(server.port(), 0) << server.log();
  int status = 0;
  std::string body;
  std::thread client([&] {
    auto result = post(server, "/v1/completions", R"({"prompt": "And", "max_tokens": 32, "mode": "diffusion"})");
    if (result) {
      status = result->status;
      body = result->body;
    }
  });
  bool running = false;
  for (int i = 0; i < 500 && !running; ++i) {
    auto h = server.client().Get("/health");
    running = h && json::parse(h->body)["running"] == 1;
    if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(server.terminate(), 0) << server.log();
  client.join();
  EXPECT_EQ(status, 200) << body;  // it finished rather than being dropped
  EXPECT_NE(server.log().find("stopped"), std::string::npos);
}

// What llama-server and OpenAI clients send beyond the basics: /tokenize, /detokenize, /props, /infill,
// suffix, response_format, top_k and min_p, and a fresh seed (reported) when none is given.
TEST(ServeCli, LlamaServerHelpersInfillAndStructuredOutput) {
  ServerProcess server("--parallel 2");
  ASSERT_NE(server.port(), 0) << server.log();
  auto res = post(server, "/tokenize", R"({"content": "And God said"})");
  ASSERT_TRUE(res && res->status == 200) << (res ? res->body : "");
  const json ids = json::parse(res->body)["tokens"];
  ASSERT_FALSE(ids.empty());
  res = post(server, "/detokenize", json{{"tokens", ids}}.dump());
  ASSERT_TRUE(res && res->status == 200);
  EXPECT_EQ(json::parse(res->body)["content"], "And God said");
  expect_error(post(server, "/detokenize", R"({"tokens": [-1]})"), 400, "tokens");
  auto props = server.client().Get("/props");
  ASSERT_TRUE(props && props->status == 200);
  EXPECT_EQ(json::parse(props->body)["n_ctx"], 128);

  res = post(server, "/infill", R"({"input_prefix": "And God said, ", "input_suffix": " and it was so.", "n_predict": 8})");
  ASSERT_TRUE(res && res->status == 200) << (res ? res->body : "");
  EXPECT_TRUE(json::parse(res->body)["content"].is_string());
  res = post(server, "/v1/completions",
             R"({"prompt": "And God said, ", "suffix": " and it was so.", "max_tokens": 8, "seed": 2})");
  ASSERT_TRUE(res && res->status == 200) << (res ? res->body : "");
  const std::string fill = json::parse(res->body)["choices"][0]["text"];
  EXPECT_EQ(fill.find("And God said"), std::string::npos) << "the completion is the inserted text only: " << fill;
  EXPECT_EQ(json::parse(res->body)["usage"]["completion_tokens"], 8);

  res = post(server, "/v1/completions",
             R"({"prompt": "Record: ", "max_tokens": 40, "response_format": {"type": "json_schema", "json_schema":
                 {"schema": {"type": "object", "properties": {"ok": {"type": "boolean"}, "age": {"type": "integer", "minimum": 0, "maximum": 999}},
                             "required": ["ok", "age"]}}}})");
  ASSERT_TRUE(res && res->status == 200) << (res ? res->body : "");
  const std::string doc_text = json::parse(res->body)["choices"][0]["text"].get<std::string>();
  const json doc = json::parse(doc_text);
  EXPECT_TRUE(doc["age"].is_number_integer() && doc["ok"].is_boolean()) << doc;
  EXPECT_EQ(doc_text.rfind("{\"ok\":", 0), 0u) << "properties in the schema's order, unpadded: " << doc_text;
  EXPECT_EQ(doc_text.find(' '), std::string::npos) << doc_text;
  EXPECT_EQ(json::parse(res->body)["choices"][0]["finish_reason"], "stop") << "the schema ended the document";
  // A schema that cannot fit max_tokens: a 400 naming response_format and max_tokens (not suffix, not -n).
  res = post(server, "/v1/completions",
             R"({"prompt": "Record: ", "max_tokens": 4, "response_format": {"type": "json_schema", "json_schema":
                 {"schema": {"type": "object", "properties": {"ok": {"type": "boolean"}, "age": {"type": "integer"}},
                             "required": ["ok", "age"]}}}})");
  ASSERT_TRUE(res && res->status == 400) << (res ? res->body : "");
  EXPECT_EQ(json::parse(res->body)["error"]["param"], "response_format") << res->body;
  EXPECT_NE(res->body.find("max_tokens is 4"), std::string::npos) << res->body;
  EXPECT_EQ(res->body.find("-n"), std::string::npos) << res->body;
  expect_error(post(server, "/v1/completions", R"({"prompt": "a", "response_format": {"type": "json_schema",
                 "json_schema": {"schema": {"type": "object", "patternProperties": {}}}}})"), 400, "patternProperties");

  res = post(server, "/v1/completions", R"({"prompt": "And", "max_tokens": 4, "temperature": 1, "top_k": 5, "min_p": 0.05})");
  ASSERT_TRUE(res && res->status == 200) << (res ? res->body : "");
  auto again = post(server, "/v1/completions", R"({"prompt": "And", "max_tokens": 4, "temperature": 1, "top_k": 5})");
  ASSERT_TRUE(again && again->status == 200);
  EXPECT_NE(json::parse(res->body)["canvas"]["seed"], json::parse(again->body)["canvas"]["seed"]);
  EXPECT_NE(server.log().find("canvas serve: request mode="), std::string::npos) << "one log line per request";
}

namespace canvas {
namespace {

// --cost-model: the first start measures the routing cost model and writes it; a restart reads the same
// line back (so auto routes as before), and a file measured for another model is measured again.
TEST(ServeCli, CostModelIsStoredAndReadBackAcrossRestarts) {
  test::TempDir dir;
  const std::string file = dir.path("cost.json");
  std::string first_line;
  {
    test::ServerProcess server("--cost-model " + file);
    ASSERT_NE(server.port(), 0) << server.log();
    EXPECT_NE(server.log().find("measured and written to " + file), std::string::npos) << server.log();
    const nlohmann::json stored = nlohmann::json::parse(test::read_text(file));
    EXPECT_GT(stored["per_row_ms"].get<double>() + stored["fixed_ms"].get<double>(), 0.0);
    EXPECT_NE(stored["key"].get<std::string>().find("text-masked.gguf"), std::string::npos);
    const std::string log = server.log();
    first_line = log.substr(log.find("cost model: "), log.find('\n', log.find("cost model: ")) - log.find("cost model: "));
  }
  {
    test::ServerProcess server("--cost-model " + file);
    ASSERT_NE(server.port(), 0) << server.log();
    EXPECT_NE(server.log().find("read from " + file), std::string::npos) << server.log();
    EXPECT_NE(server.log().find(first_line), std::string::npos) << "expected " << first_line << " in " << server.log();
  }
  {
    test::ServerProcess server("--cost-model " + file, "models/text-ar.gguf");  // another model's file
    ASSERT_NE(server.port(), 0) << server.log();
    EXPECT_NE(server.log().find("measured and written to"), std::string::npos) << server.log();
  }
}

}  // namespace
}  // namespace canvas
