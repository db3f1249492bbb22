// The Responses API (/v1/responses) answer of canvas serve: a finished reply as OpenAI's Response object, and
// a reply as it is made as the stream of typed events OpenAI's clients parse (response.created ...
// response.completed). The request is read by parse_api_request (serve/openai.h) and runs as a chat.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace canvas::serve {

// What a Response object repeats from its request.
struct ResponseHead {
  std::string number;  // the response's id is "resp_" + number, its items "msg_" / "rs_" + number
  std::string model;
  int64_t created_at = 0;
  std::string instructions;        // "": null
  int64_t max_output_tokens = -1;  // -1: null (not given)
  double temperature = 1, top_p = 1;
};

// The status of a finished reply from its finish reason: "incomplete" for "length" (max_output_tokens, or the
// context, was reached), "cancelled" for "cancelled" (the server stopped), else "completed".
std::string response_status(const std::string& finish_reason);

// A finished reply's Response object: its output is a reasoning item when the model thought aloud (a format
// with channels), then the message with the text. `usage` (serve/openai.h usage_json) and `extras` (canvas's
// own fields, null for none) are written as given.
nlohmann::ordered_json response_json(const ResponseHead& head, const std::string& reasoning,
                                     const std::string& text, const std::string& finish_reason,
                                     const nlohmann::ordered_json& usage,
                                     const nlohmann::ordered_json& extras);

// A reply's stream of events, each an SSE "event: TYPE\ndata: JSON\n\n" with its sequence_number. Each call
// gives the events its piece adds: an item (reasoning, then the message) opens at its first text and closes
// when the other kind starts or the reply ends.
class ResponseEvents {
 public:
  explicit ResponseEvents(ResponseHead head) : head_(std::move(head)) {}
  std::string start();  // response.created, response.in_progress
  std::string reasoning(const std::string& delta);
  std::string text(const std::string& delta);
  // Closes the open item (and writes an empty message if none was), then response.completed, or
  // response.incomplete for a reply that was cut.
  std::string finish(const std::string& finish_reason, const nlohmann::ordered_json& usage,
                     const nlohmann::ordered_json& extras);
  // response.failed, with `message` as the response's error.
  std::string fail(const std::string& message);

 private:
  enum class Item { None, Reasoning, Message };
  std::string event(nlohmann::ordered_json e);
  std::string open(Item kind);
  std::string close(const std::string& status);
  std::string piece(Item kind, const std::string& delta);  // a delta of the item of `kind`, opened if need be
  nlohmann::ordered_json object(const std::string& status, const nlohmann::ordered_json& usage) const;

  ResponseHead head_;
  int64_t sequence_ = 0;
  Item open_ = Item::None;
  std::string open_id_, open_text_;
  int reasoning_items_ = 0, message_items_ = 0;
  std::vector<nlohmann::ordered_json> output_;  // the items closed so far
};

}  // namespace canvas::serve
