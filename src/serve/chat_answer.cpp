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
  const ReplyDelta delta = deltas_.next(text, finished);
  std::vector<json> out;
  if (!delta.reasoning_content.empty()) out.push_back({{"reasoning_content", delta.reasoning_content}});
  if (!delta.content.empty()) out.push_back({{"content", delta.content}});
  for (size_t i = 0; i < delta.tool_calls.size(); ++i) {
    const ChatToolCall& call = delta.tool_calls[i];
    out.push_back({{"tool_calls", json::array({{{"index", delta.first_call + i},
                                                {"id", call.id},
                                                {"type", "function"},
                                                {"function", {{"name", call.name}, {"arguments", call.arguments}}}}})}});
  }
  return out;
}

std::string ChatDeltas::finish_reason(const std::string& job_reason) const {
  return reason_with_calls(job_reason, !deltas_.reply().tool_calls.empty());
}

}  // namespace canvas::serve
