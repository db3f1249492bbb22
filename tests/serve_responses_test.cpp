// The Responses API (/v1/responses) and /v1/embeddings: the request's fields, the Response object, the
// stream's events, and both endpoints through a live `canvas serve`.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/openai.h"
#include "serve/responses.h"
#include "serve_process.h"

using canvas::serve::ApiError;
using canvas::serve::Endpoint;
using canvas::serve::parse_api_request;
using nlohmann::json;

namespace {

// The param of the 400 a Responses body gets ("" when it parses).
std::string error_param(const std::string& body) {
  try {
    parse_api_request(body, Endpoint::Responses);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    return e.param;
  }
  return "";
}

// An SSE body's events as (event line's type, data JSON); the data's type must equal the event line's.
std::vector<json> response_events(const std::string& body) {
  std::vector<json> events;
  size_t at = 0;
  while ((at = body.find("event: ", at)) != std::string::npos) {
    const size_t line_end = body.find('\n', at);
    const std::string type = body.substr(at + 7, line_end - at - 7);
    const size_t data = body.find("data: ", line_end);
    const size_t end = body.find("\n\n", data);
    events.push_back(json::parse(body.substr(data + 6, end - data - 6)));
    EXPECT_EQ(events.back()["type"], type);
    at = end;
  }
  return events;
}

// The events' types in order, the output_text deltas joined, and the sequence numbers checked (0, 1, ...).
std::vector<std::string> types_and_text(const std::vector<json>& events, std::string& text) {
  std::vector<std::string> types;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i]["sequence_number"], int64_t(i)) << events[i].dump();
    types.push_back(events[i]["type"]);
    if (types.back() == "response.output_text.delta") text += events[i]["delta"].get<std::string>();
  }
  return types;
}

// The output_text of a Response object's message (what the openai client's `output_text` joins).
std::string output_text(const json& response) {
  std::string text;
  for (const json& item : response["output"])
    if (item["type"] == "message")
      for (const json& part : item["content"]) text += part["text"].get<std::string>();
  return text;
}

}  // namespace

TEST(ServeResponses, InputInstructionsAndTheLengthCapAreRead) {
  // A string is one user message; instructions come first as a system message.
  auto r =
      parse_api_request(R"({"model": "m", "input": "Hi", "instructions": "Be brief.", "max_output_tokens": 9,
                                 "temperature": 0.5, "top_p": 0.9})",
                        Endpoint::Responses);
  EXPECT_TRUE(r.chat);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "Be brief.");
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.messages[1].content, "Hi");
  EXPECT_EQ(r.instructions, "Be brief.");
  EXPECT_EQ(r.settings.max_new_tokens, 9);
  EXPECT_FLOAT_EQ(r.settings.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.settings.sampling.top_p, 0.9f);
  // A list of messages: content as a string or as input_text / output_text parts; developer is system.
  r = parse_api_request(R"({"input": [{"role": "developer", "content": "Rules."},
                                      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "A"},
                                                                                      {"type": "input_text", "text": "B"}]},
                                      {"role": "assistant", "content": [{"type": "output_text", "text": "C"}]},
                                      {"role": "user", "content": "D"}]})",
                        Endpoint::Responses);
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "AB");
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.messages[2].content, "C");
  // The Responses API's fields canvas has no use for, and chat's fields in their Responses shapes, are
  // ignored, not refused: tools are flat ({"type", "name"}), stream_options has other members.
  r = parse_api_request(R"({"input": "Hi", "tools": [{"type": "function", "name": "f", "parameters": {}}],
                            "tool_choice": "auto", "text": {"format": {"type": "text"}}, "store": false,
                            "stream_options": {"include_obfuscation": false}, "include": [], "truncation": "auto",
                            "previous_response_id": null, "max_tokens": 3, "colour": "blue"})",
                        Endpoint::Responses);
  EXPECT_EQ(r.settings.max_new_tokens, 0);  // max_tokens is not the Responses API's
  EXPECT_TRUE(r.tools.is_null());
  for (const char* field :
       {"tools", "tool_choice", "text", "stream_options", "include", "max_tokens", "colour"})
    EXPECT_NE(std::find(r.ignored.begin(), r.ignored.end(), field), r.ignored.end()) << field;
  // reasoning.effort switches thinking as chat's reasoning_effort does.
  r = parse_api_request(R"({"input": "Hi", "reasoning": {"effort": "none", "summary": "auto"}})",
                        Endpoint::Responses);
  ASSERT_TRUE(r.chat_extras.enable_thinking.has_value());
  EXPECT_FALSE(*r.chat_extras.enable_thinking);
  // Errors name the Responses API's fields.
  EXPECT_EQ(error_param(R"({"model": "m"})"), "input");
  EXPECT_EQ(error_param(R"({"input": 3})"), "input");
  EXPECT_EQ(error_param(R"({"input": []})"), "input");
  EXPECT_EQ(error_param(R"({"input": "Hi", "max_output_tokens": 0})"), "max_output_tokens");
  EXPECT_EQ(error_param(R"({"input": "Hi", "instructions": 5})"), "instructions");
  EXPECT_EQ(error_param(R"({"input": "Hi", "temperature": "hot"})"), "temperature");
  EXPECT_EQ(error_param(R"({"input": "Hi", "reasoning": {"effort": "max"}})"), "reasoning.effort");
  EXPECT_EQ(error_param(R"({"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]})"),
            "input[0].type");
  EXPECT_EQ(
      error_param(R"({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]})"),
      "input[0].content");
  EXPECT_EQ(error_param(R"({"input": [{"role": "robot", "content": "x"}]})"), "input[0].role");
}

TEST(ServeResponses, ObjectAndEventsHaveTheShapesClientsParse) {
  const canvas::serve::ResponseHead head{"7", "m", 100, "Be brief.", 16, 0.5, 1.0};
  // Whole: a reasoning item (a format with channels) before the message; a cut reply is incomplete.
  json r = canvas::serve::response_json(head, "Hmm.", "Hello", "length", json{{"input_tokens", 3}},
                                        json{{"mode", "ar"}});
  EXPECT_EQ(r["id"], "resp_7");
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(r["instructions"], "Be brief.");
  EXPECT_EQ(r["max_output_tokens"], 16);
  ASSERT_EQ(r["output"].size(), 2u);
  EXPECT_EQ(r["output"][0]["type"], "reasoning");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "Hmm.");
  const json& message = r["output"][1];
  EXPECT_EQ(message["type"], "message");
  EXPECT_EQ(message["id"], "msg_7");
  EXPECT_EQ(message["role"], "assistant");
  EXPECT_EQ(message["status"], "incomplete");
  EXPECT_EQ(message["content"][0], (json{{"type", "output_text"},
                                         {"text", "Hello"},
                                         {"annotations", json::array()},
                                         {"logprobs", json::array()}}));
  EXPECT_EQ(r["canvas"]["mode"], "ar");
  r = canvas::serve::response_json(head, "", "Hello", "stop", nullptr, nullptr);
  EXPECT_EQ(r["status"], "completed");
  EXPECT_TRUE(r["incomplete_details"].is_null());
  EXPECT_EQ(r["output"].size(), 1u);
  EXPECT_FALSE(r.contains("canvas"));

  // Streamed: reasoning, then text; the final response holds the items as they were closed.
  canvas::serve::ResponseEvents events(head);
  std::string body = events.start();  // in order: the operands of + are evaluated in any order
  body += events.reasoning("Hm");
  body += events.reasoning("m.");
  body += events.text("Hel");
  body += events.text("");
  body += events.text("lo");
  body += events.finish("stop", json{{"input_tokens", 3}}, nullptr);
  std::string text;
  const std::vector<json> all = response_events(body);
  const std::vector<std::string> types = types_and_text(all, text);
  const std::vector<std::string> expected = {"response.created",
                                             "response.in_progress",
                                             "response.output_item.added",
                                             "response.content_part.added",
                                             "response.reasoning_text.delta",
                                             "response.reasoning_text.delta",
                                             "response.reasoning_text.done",
                                             "response.content_part.done",
                                             "response.output_item.done",
                                             "response.output_item.added",
                                             "response.content_part.added",
                                             "response.output_text.delta",
                                             "response.output_text.delta",
                                             "response.output_text.done",
                                             "response.content_part.done",
                                             "response.output_item.done",
                                             "response.completed"};
  EXPECT_EQ(types, expected);
  EXPECT_EQ(text, "Hello");
  EXPECT_EQ(all[0]["response"]["status"], "in_progress");
  EXPECT_TRUE(all[0]["response"]["output"].empty());
  EXPECT_EQ(all[11]["item_id"], "msg_7");
  EXPECT_EQ(all[11]["output_index"], 1);
  EXPECT_EQ(all[13]["text"], "Hello");
  const json& done = all.back()["response"];
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["usage"]["input_tokens"], 3);
  EXPECT_EQ(done["output"],
            json(canvas::serve::response_json(head, "Hmm.", "Hello", "stop", nullptr, nullptr)["output"]));

  // A reply with no text still ends with its (empty) message; a cut one with response.incomplete.
  canvas::serve::ResponseEvents empty(head);
  std::string cut_body = empty.start();
  cut_body += empty.finish("length", nullptr, nullptr);
  const std::vector<json> cut = response_events(cut_body);
  ASSERT_EQ(cut.size(), 8u);
  EXPECT_EQ(cut[2]["item"]["type"], "message");
  EXPECT_EQ(cut[6]["item"]["status"], "incomplete");
  EXPECT_EQ(cut.back()["type"], "response.incomplete");
  EXPECT_EQ(cut.back()["response"]["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(output_text(cut.back()["response"]), "");
}

// Through the server: whole and streamed answers agree, the length cap makes an incomplete response,
// instructions reach the prompt, errors name the Responses API's fields, and /v1/embeddings says why not.
TEST(ServeResponsesCli, WholeStreamedIncompleteAndEmbeddings) {
  canvas::test::ServerProcess server("--parallel 2");
  ASSERT_NE(server.port(), 0) << server.log();
  const json body = {{"model", "gpt-4o"},
                     {"input", "And God said"},
                     {"max_output_tokens", 12},
                     {"temperature", 0},
                     {"seed", 3},
                     {"mode", "ar"}};
  const json whole = canvas::test::post_json(server, "/v1/responses", body.dump());
  ASSERT_TRUE(whole.contains("output")) << whole.dump();
  EXPECT_EQ(whole["object"], "response");
  EXPECT_EQ(whole["id"].get<std::string>().rfind("resp_", 0), 0u);
  EXPECT_EQ(whole["model"], "gpt-4o");
  EXPECT_TRUE(whole["created_at"].is_number_integer());
  EXPECT_TRUE(whole["status"] == "completed" || whole["status"] == "incomplete") << whole.dump();
  ASSERT_EQ(whole["output"].size(), 1u);
  EXPECT_EQ(whole["output"][0]["type"], "message");
  EXPECT_EQ(whole["output"][0]["role"], "assistant");
  const std::string text = output_text(whole);
  EXPECT_FALSE(text.empty());
  const json& usage = whole["usage"];
  EXPECT_GT(usage["input_tokens"].get<int64_t>(), 0);
  EXPECT_GT(usage["output_tokens"].get<int64_t>(), 0);
  EXPECT_EQ(usage["total_tokens"],
            usage["input_tokens"].get<int64_t>() + usage["output_tokens"].get<int64_t>());
  EXPECT_EQ(whole["canvas"]["mode"], "ar");

  json streamed = body;
  streamed["stream"] = true;
  auto res = canvas::test::post(server, "/v1/responses", streamed.dump());
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type").rfind("text/event-stream", 0), 0u);
  EXPECT_EQ(res->body.find("[DONE]"), std::string::npos);  // the Responses stream ends with its last event
  std::string joined;
  const std::vector<json> events = response_events(res->body);
  const std::vector<std::string> types = types_and_text(events, joined);
  ASSERT_GE(types.size(), 9u) << res->body;
  EXPECT_EQ(types[0], "response.created");
  EXPECT_EQ(types[2], "response.output_item.added");
  EXPECT_EQ(types[3], "response.content_part.added");
  EXPECT_EQ(types[4], "response.output_text.delta");
  EXPECT_EQ(types.back(), whole["status"] == "completed" ? "response.completed" : "response.incomplete");
  EXPECT_EQ(joined, text);
  const json& last = events.back()["response"];
  ASSERT_EQ(last["output"].size(), 1u);  // the same message but for its id (each response has its own)
  EXPECT_EQ(last["output"][0]["content"], whole["output"][0]["content"]);
  EXPECT_EQ(last["output"][0]["status"], whole["output"][0]["status"]);
  EXPECT_EQ(last["output"][0]["id"], "msg_" + last["id"].get<std::string>().substr(5));
  EXPECT_EQ(last["usage"]["output_tokens"], usage["output_tokens"]);

  // max_output_tokens reached: incomplete, whole and streamed.
  json cut = {{"input", "And God said"}, {"max_output_tokens", 3}, {"ignore_eos", true}, {"mode", "ar"}};
  const json incomplete = canvas::test::post_json(server, "/v1/responses", cut.dump());
  EXPECT_EQ(incomplete["status"], "incomplete") << incomplete.dump();
  EXPECT_EQ(incomplete["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(incomplete["max_output_tokens"], 3);
  EXPECT_EQ(incomplete["usage"]["output_tokens"], 3);
  EXPECT_EQ(incomplete["output"][0]["status"], "incomplete");
  cut["stream"] = true;
  res = canvas::test::post(server, "/v1/responses", cut.dump());
  ASSERT_TRUE(res);
  const std::vector<json> cut_events = response_events(res->body);
  ASSERT_FALSE(cut_events.empty()) << res->body;
  EXPECT_EQ(cut_events.back()["type"], "response.incomplete");
  EXPECT_EQ(cut_events.back()["response"]["incomplete_details"]["reason"], "max_output_tokens");

  // Messages with content parts, and instructions: the system message is in the prompt.
  const json messages = {
      {"input", json::array({{{"role", "user"},
                              {"content", json::array({{{"type", "input_text"}, {"text", "Hi"}}})}}})},
      {"max_output_tokens", 4},
      {"mode", "ar"}};
  json instructed = messages;
  instructed["instructions"] = "Answer in the words of the King James Bible.";
  const json plain = canvas::test::post_json(server, "/v1/responses", messages.dump());
  const json with = canvas::test::post_json(server, "/v1/responses", instructed.dump());
  EXPECT_GT(with["usage"]["input_tokens"].get<int64_t>(), plain["usage"]["input_tokens"].get<int64_t>() + 5);
  EXPECT_EQ(with["instructions"], instructed["instructions"]);
  EXPECT_TRUE(plain["instructions"].is_null());

  // Errors in OpenAI's shape, naming the Responses API's fields.
  auto expect_error = [&](const std::string& path, const json& request, int status,
                          const std::string& param) -> json {
    auto answer = canvas::test::post(server, path, request.dump());
    EXPECT_TRUE(answer);
    if (!answer) return json();
    EXPECT_EQ(answer->status, status) << answer->body;
    const json e = json::parse(answer->body);
    EXPECT_TRUE(e.contains("error")) << answer->body;
    if (!e.contains("error")) return json();
    EXPECT_EQ(e["error"]["type"], "invalid_request_error");
    EXPECT_EQ(e["error"]["param"], param) << answer->body;
    return e["error"];
  };
  expect_error("/v1/responses", json{{"max_output_tokens", 4}}, 400, "input");
  expect_error("/v1/responses", json{{"input", "Hi"}, {"max_output_tokens", -1}}, 400, "max_output_tokens");
  const json context = expect_error("/v1/responses", json{{"input", "Hi"}, {"max_output_tokens", 1 << 20}},
                                    400, "max_output_tokens");
  EXPECT_EQ(context["code"], "context_length_exceeded");

  // Embeddings: a 400 that says why, not a 404.
  const json embeddings =
      expect_error("/v1/embeddings", json{{"model", "text-masked"}, {"input", "Hi"}}, 400, "model");
  EXPECT_EQ(embeddings["code"], "embeddings_not_supported");
  EXPECT_NE(embeddings["message"].get<std::string>().find("no embedding head"), std::string::npos)
      << embeddings.dump();
  auto bad = canvas::test::post(server, "/v1/embeddings", "{");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
}
