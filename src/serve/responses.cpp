// The Responses API's Response object and stream events (serve/responses.h).
#include "serve/responses.h"

namespace canvas::serve {

using json = nlohmann::ordered_json;

namespace {

// Ids of an item: "rs_N" / "msg_N" for the first of its kind, "msg_N_2" for a second.
std::string item_id(const char* prefix, const std::string& number, int nth) {
  return prefix + number + (nth > 1 ? "_" + std::to_string(nth) : std::string());
}

// A finished item's status: a cut reply's items are incomplete.
std::string item_status(const std::string& response_status) {
  return response_status == "completed" || response_status == "in_progress" ? "completed" : "incomplete";
}

json reasoning_part(const std::string& text) {
  return json{{"type", "reasoning_text"}, {"text", text}};
}

json text_part(const std::string& text) {
  return json{
      {"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}};
}

json reasoning_item(const std::string& id, const std::string& status, const json& content) {
  return json{{"type", "reasoning"},
              {"id", id},
              {"status", status},
              {"summary", json::array()},
              {"content", content}};
}

json message_item(const std::string& id, const std::string& status, const json& content) {
  return json{
      {"type", "message"}, {"id", id}, {"status", status}, {"role", "assistant"}, {"content", content}};
}

// The Response object around `output`; usage null while the reply is in progress.
json response_object(const ResponseHead& head, const std::string& status, json output, const json& usage,
                     const json& extras) {
  json r = {
      {"id", "resp_" + head.number},
      {"object", "response"},
      {"created_at", head.created_at},
      {"status", status},
      {"error", nullptr},
      {"incomplete_details", status == "incomplete" ? json{{"reason", "max_output_tokens"}} : json(nullptr)},
      {"instructions", head.instructions.empty() ? json(nullptr) : json(head.instructions)},
      {"max_output_tokens", head.max_output_tokens < 0 ? json(nullptr) : json(head.max_output_tokens)},
      {"model", head.model},
      {"output", std::move(output)},
      // canvas reads no tools from a Responses request (they are ignored): none were offered.
      {"parallel_tool_calls", false},
      {"temperature", head.temperature},
      {"tool_choice", "none"},
      {"tools", json::array()},
      {"top_p", head.top_p},
      {"usage", usage}};
  if (!extras.is_null()) r["canvas"] = extras;
  return r;
}

}  // namespace

std::string response_status(const std::string& finish_reason) {
  if (finish_reason == "length") return "incomplete";
  if (finish_reason == "cancelled") return "cancelled";
  return "completed";
}

json response_json(const ResponseHead& head, const std::string& reasoning, const std::string& text,
                   const std::string& finish_reason, const json& usage, const json& extras) {
  const std::string status = response_status(finish_reason);
  json output = json::array();
  if (!reasoning.empty())
    output.push_back(reasoning_item(item_id("rs_", head.number, 1), item_status(status),
                                    json::array({reasoning_part(reasoning)})));
  output.push_back(
      message_item(item_id("msg_", head.number, 1), item_status(status), json::array({text_part(text)})));
  return response_object(head, status, std::move(output), usage, extras);
}

std::string ResponseEvents::event(json e) {
  e["sequence_number"] = sequence_++;
  const std::string type = e["type"];
  // Invalid UTF-8 (a byte-level model can emit any byte) becomes U+FFFD instead of an exception.
  return "event: " + type + "\ndata: " + e.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

json ResponseEvents::object(const std::string& status, const json& usage) const {
  json output = json::array();
  for (const json& item : output_) output.push_back(item);
  return response_object(head_, status, std::move(output), usage, nullptr);
}

std::string ResponseEvents::start() {
  std::string out = event({{"type", "response.created"}, {"response", object("in_progress", nullptr)}});
  return out + event({{"type", "response.in_progress"}, {"response", object("in_progress", nullptr)}});
}

std::string ResponseEvents::open(Item kind) {
  const bool message = kind == Item::Message;
  open_ = kind;
  open_text_.clear();
  open_id_ = message ? item_id("msg_", head_.number, ++message_items_)
                     : item_id("rs_", head_.number, ++reasoning_items_);
  const int64_t index = int64_t(output_.size());
  const json item = message ? message_item(open_id_, "in_progress", json::array())
                            : reasoning_item(open_id_, "in_progress", json::array());
  std::string out = event({{"type", "response.output_item.added"}, {"output_index", index}, {"item", item}});
  return out + event({{"type", "response.content_part.added"},
                      {"item_id", open_id_},
                      {"output_index", index},
                      {"content_index", 0},
                      {"part", message ? text_part("") : reasoning_part("")}});
}

std::string ResponseEvents::close(const std::string& status) {
  if (open_ == Item::None) return "";
  const bool message = open_ == Item::Message;
  const int64_t index = int64_t(output_.size());
  const json where = {{"item_id", open_id_}, {"output_index", index}, {"content_index", 0}};
  json done = where;
  done["type"] = message ? "response.output_text.done" : "response.reasoning_text.done";
  done["text"] = open_text_;
  if (message) done["logprobs"] = json::array();
  std::string out = event(std::move(done));
  const json part = message ? text_part(open_text_) : reasoning_part(open_text_);
  json part_done = where;
  part_done["type"] = "response.content_part.done";
  part_done["part"] = part;
  out += event(std::move(part_done));
  const json content = json::array({part});
  json item = message ? message_item(open_id_, item_status(status), content)
                      : reasoning_item(open_id_, item_status(status), content);
  out += event({{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
  output_.push_back(std::move(item));
  open_ = Item::None;
  return out;
}

std::string ResponseEvents::reasoning(const std::string& delta) {
  return piece(Item::Reasoning, delta);
}

std::string ResponseEvents::text(const std::string& delta) {
  return piece(Item::Message, delta);
}

std::string ResponseEvents::piece(Item kind, const std::string& delta) {
  if (delta.empty()) return "";
  std::string out;
  if (open_ != kind) {  // one statement each: the events must be numbered in order
    out += close("in_progress");
    out += open(kind);
  }
  open_text_ += delta;
  json e = {{"type", kind == Item::Message ? "response.output_text.delta" : "response.reasoning_text.delta"},
            {"item_id", open_id_},
            {"output_index", int64_t(output_.size())},
            {"content_index", 0},
            {"delta", delta}};
  if (kind == Item::Message) e["logprobs"] = json::array();
  return out + event(std::move(e));
}

std::string ResponseEvents::finish(const std::string& finish_reason, const json& usage, const json& extras) {
  const std::string status = response_status(finish_reason);
  std::string out;
  // A reply always ends with its message, empty when the model wrote no answer text.
  if (message_items_ == 0) {
    out += close(status);
    out += open(Item::Message);
  }
  out += close(status);
  json r = object(status, usage);
  if (!extras.is_null()) r["canvas"] = extras;
  return out + event({{"type", status == "completed" ? "response.completed" : "response.incomplete"},
                      {"response", r}});
}

std::string ResponseEvents::fail(const std::string& message) {
  json r = object("failed", nullptr);
  r["error"] = {{"code", "server_error"}, {"message", message}};
  return event({{"type", "response.failed"}, {"response", r}});
}

}  // namespace canvas::serve
