// The assistant message of /v1/chat/completions, whole and as stream deltas: for a chat format with Gemma 4's
// channels (decode/gemma_channels.h) the thinking as reasoning_content, the answer as content and the model's
// tool calls as OpenAI tool_calls, as llama-server returns them; for any other format the text as content.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "decode/gemma_channels.h"

namespace canvas::serve {

// The message and finish reason of a finished reply. `text` is the generated text (its special tokens written
// out when the format has channels: GenerationRequest::special_text); `finish_reason` the job's ("stop",
// "length", ...), "tool_calls" in its place when the reply stopped with tool calls. `format` null: no channels.
struct ChatAnswer {
  nlohmann::ordered_json message;
  std::string finish_reason;
};
ChatAnswer chat_answer(const ChatFormat* format, const std::string& text, const std::string& finish_reason);

// A stream's deltas for a format with channels: each call takes the text so far (each one extending the
// last) and gives the choices[0].delta objects it adds, in the order reasoning_content, content, tool_calls
// (one delta per call: index, id, type, function {name, arguments}); a marker cut at the end of the text or a
// tool call not closed yet waits for the next call, so no delta holds part of a marker. `finished`: the text
// is final and everything is placed.
class ChatDeltas {
 public:
  explicit ChatDeltas(const ChatFormat* format) : deltas_(format) {}
  std::vector<nlohmann::ordered_json> next(const std::string& text, bool finished);
  // The last chunk's finish reason: "tool_calls" for a reply that stopped ("stop") after tool calls.
  std::string finish_reason(const std::string& job_reason) const;

 private:
  ReplyDeltas deltas_;
};

// Whether replies in `format` are split into channels (false for null).
bool chat_answer_has_channels(const ChatFormat* format);

}  // namespace canvas::serve
