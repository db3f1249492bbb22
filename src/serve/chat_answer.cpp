// Chat replies in OpenAI's shape: reasoning_content, content and tool_calls from Gemma 4's channels.
#include "serve/chat_answer.h"

#include <algorithm>

#include "decode/gemma_channels.h"
#include "decode/text_model.h"

namespace canvas::serve {

using json = nlohmann::ordered_json;

bool chat_answer_has_channels(const ChatFormat* format) { return format && chat_format_has_channels(*format); }

namespace {

std::string reason_with_calls(const std::string& job_reason, bool called) {
  return called && job_reason == "stop" ? "tool_calls" : job_reason;
}

}  // namespace

ChatAnswer chat_answer(const ChatFormat* format, const std::string& text, const std::string& finish_reason) {
  if (!chat_answer_has_channels(format))
    return {json{{"role", "assistant"}, {"content", text}}, finish_reason};
  const ChatReply reply = chat_reply(*format, text, false);
  return {reply.message_json(), reason_with_calls(finish_reason, !reply.tool_calls.empty())};
}

std::vector<json> ChatDeltas::next(const std::string& text, bool finished) {
  std::vector<json> deltas;
  if (!chat_answer_has_channels(format_)) {  // all of it is content
    if (text.size() > content_sent_) deltas.push_back({{"content", text.substr(content_sent_)}});
    content_sent_ = std::max(content_sent_, text.size());
    return deltas;
  }
  const ChatReply reply = chat_reply(*format_, text, !finished);
  // Each field only grows as the text does; what was sent is never taken back.
  auto grown = [&](const std::string& now, size_t& sent, const char* key) {
    if (now.size() <= sent) return;
    deltas.push_back({{key, now.substr(sent)}});
    sent = now.size();
  };
  grown(reply.reasoning_content, reasoning_sent_, "reasoning_content");
  grown(reply.content, content_sent_, "content");
  for (; calls_sent_ < reply.tool_calls.size(); ++calls_sent_) {
    const ChatToolCall& call = reply.tool_calls[calls_sent_];
    deltas.push_back({{"tool_calls", json::array({{{"index", calls_sent_},
                                                   {"id", call.id},
                                                   {"type", "function"},
                                                   {"function", {{"name", call.name}, {"arguments", call.arguments}}}}})}});
  }
  return deltas;
}

std::string ChatDeltas::finish_reason(const std::string& job_reason) const {
  return reason_with_calls(job_reason, calls_sent_ > 0);
}

}  // namespace canvas::serve
