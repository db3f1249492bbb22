// Gemma 4's channels and tool calls in generated text (see gemma_channels.h).
#include "decode/gemma_channels.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <span>

#include "decode/text_model.h"
#include "io/text_tokenizer.h"

namespace canvas {
namespace {

constexpr std::string_view kChannelOpen = "<|channel>", kChannelClose = "<channel|>";
constexpr std::string_view kCallOpen = "<|tool_call>", kCallClose = "<tool_call|>";
constexpr std::string_view kTurnEnd = "<turn|>", kToolResponse = kGemmaToolHandover;
constexpr std::string_view kQuote = "<|\"|>";
// The markers looked for inside a thought, and outside one.
constexpr std::string_view kThoughtMarkers[] = {kChannelClose, kTurnEnd};
constexpr std::string_view kReplyMarkers[] = {kChannelOpen, kCallOpen, kTurnEnd, kToolResponse};
constexpr size_t kMaxChannelName = 32;  // "thought"; past this a channel has no name line
constexpr int kMaxArgumentDepth = 64;   // {} and [] inside each other in a tool call

// A recursive-descent reader of Gemma's argument values into JSON.
class ArgumentReader {
 public:
  explicit ArgumentReader(std::string_view text) : s_(text) {}

  // key:value,... up to the end of the text (the inside of the call's outer braces).
  bool object_body(nlohmann::ordered_json& out, char close, int depth) {
    out = nlohmann::ordered_json::object();
    skip_space();
    if (at_end_of(close)) return true;
    while (true) {
      std::string key;
      if (!read_key(key)) return false;
      nlohmann::ordered_json v;
      if (!value(v, depth + 1)) return false;
      out[key] = std::move(v);
      skip_space();
      if (at_end_of(close)) return true;
      if (!eat(',')) return false;
      skip_space();
    }
  }
  bool at_end() const { return pos_ == s_.size(); }

 private:
  bool at_end_of(char close) const {
    return close ? pos_ < s_.size() && s_[pos_] == close : pos_ == s_.size();
  }
  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool starts(std::string_view word) const { return s_.substr(pos_, word.size()) == word; }
  bool quoted(std::string& out) {
    if (!starts(kQuote)) return false;
    const size_t end = s_.find(kQuote, pos_ + kQuote.size());
    if (end == std::string_view::npos) return false;
    out = std::string(s_.substr(pos_ + kQuote.size(), end - pos_ - kQuote.size()));
    pos_ = end + kQuote.size();
    return true;
  }
  bool read_key(std::string& key) {
    if (starts(kQuote)) {
      if (!quoted(key)) return false;
    } else {
      const size_t colon = s_.find(':', pos_);
      if (colon == std::string_view::npos) return false;
      key = std::string(s_.substr(pos_, colon - pos_));
      while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.pop_back();
      if (key.empty() || key.find_first_of("{}[],") != std::string::npos) return false;
      pos_ = colon;
    }
    skip_space();
    return eat(':');
  }
  bool value(nlohmann::ordered_json& out, int depth) {
    if (depth > kMaxArgumentDepth) return false;
    skip_space();
    if (pos_ >= s_.size()) return false;
    std::string text;
    if (starts(kQuote)) {
      if (!quoted(text)) return false;
      out = text;
      return true;
    }
    if (eat('{')) {
      if (!object_body(out, '}', depth)) return false;
      return eat('}');
    }
    if (eat('[')) {
      out = nlohmann::ordered_json::array();
      skip_space();
      if (eat(']')) return true;
      while (true) {
        nlohmann::ordered_json item;
        if (!value(item, depth + 1)) return false;
        out.push_back(std::move(item));
        skip_space();
        if (eat(']')) return true;
        if (!eat(',')) return false;
      }
    }
    for (const auto& [word, json] : {std::pair<std::string_view, nlohmann::ordered_json>{"true", true},
                                     {"false", false},
                                     {"null", nullptr},
                                     {"None", nullptr}})
      if (starts(word)) {
        pos_ += word.size();
        out = json;
        return true;
      }
    // A number, checked as JSON reads it.
    const size_t from = pos_;
    while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '-' ||
                                s_[pos_] == '+' || s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E'))
      ++pos_;
    if (pos_ == from) return false;
    out = nlohmann::ordered_json::parse(s_.substr(from, pos_ - from), nullptr, false);
    return !out.is_discarded() && out.is_number();
  }

  std::string_view s_;
  size_t pos_ = 0;
};

// "call:NAME{...}" as a tool call; false when it is not one.
bool parse_call(std::string_view body, ChatToolCall& call) {
  constexpr std::string_view kCall = "call:";
  if (body.substr(0, kCall.size()) != kCall) return false;
  body.remove_prefix(kCall.size());
  const size_t brace = body.find('{');
  if (brace == std::string_view::npos || brace == 0 || body.back() != '}') return false;
  const std::string_view name = body.substr(0, brace);
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') return false;
  call.name = std::string(name);
  return gemma_arguments_to_json(body.substr(brace + 1, body.size() - brace - 2), call.arguments);
}

// The length of the longest end of `text` that begins one of `markers` (and is not all of it).
size_t partial_marker(std::string_view text, std::span<const std::string_view> markers) {
  size_t hold = 0;
  for (std::string_view m : markers)
    for (size_t n = std::min(m.size() - 1, text.size()); n > hold; --n)
      if (text.substr(text.size() - n) == m.substr(0, n)) {
        hold = n;
        break;
      }
  return hold;
}

}  // namespace

bool gemma_arguments_to_json(std::string_view arguments, std::string& json) {
  ArgumentReader reader(arguments);
  nlohmann::ordered_json out;
  if (!reader.object_body(out, 0, 0) || !reader.at_end()) return false;
  json = out.dump();
  return true;
}

ChatReply parse_gemma_channels(std::string_view text, bool more_to_come) {
  ChatReply reply;
  bool thinking = false;
  size_t pos = 0;
  auto add = [&](std::string_view piece) {
    (thinking ? reply.reasoning_content : reply.content).append(piece);
  };
  while (true) {
    // The next marker that matters here.
    const std::span<const std::string_view> markers = thinking
                                                          ? std::span<const std::string_view>(kThoughtMarkers)
                                                          : std::span<const std::string_view>(kReplyMarkers);
    size_t at = std::string_view::npos;
    std::string_view marker;
    for (std::string_view m : markers) {
      const size_t found = text.find(m, pos);
      if (found < at) {
        at = found;
        marker = m;
      }
    }
    if (at == std::string_view::npos) {
      const std::string_view rest = text.substr(pos);
      const size_t hold = more_to_come ? partial_marker(rest, markers) : 0;
      add(rest.substr(0, rest.size() - hold));
      reply.final_bytes = text.size() - hold;
      return reply;
    }
    add(text.substr(pos, at - pos));
    pos = at + marker.size();
    if (marker == kTurnEnd) {
      reply.final_bytes = text.size();
      return reply;
    }
    if (marker == kChannelClose) {
      thinking = false;
    } else if (marker == kChannelOpen) {
      // The channel's name line ("thought\n"); without one the thinking starts after the marker.
      const size_t newline = text.substr(pos, kMaxChannelName + 1).find('\n');
      if (newline == std::string_view::npos && more_to_come && text.size() - pos <= kMaxChannelName) {
        reply.final_bytes = at;
        return reply;
      }
      if (newline != std::string_view::npos) pos += newline + 1;
      thinking = true;
    } else if (marker == kCallOpen) {
      const size_t close = text.find(kCallClose, pos);
      if (close == std::string_view::npos) {
        if (more_to_come) {
          reply.final_bytes = at;
          return reply;
        }
        reply.content.append(text.substr(at));  // unclosed: left as it was written
        reply.final_bytes = text.size();
        return reply;
      }
      ChatToolCall call;
      if (parse_call(text.substr(pos, close - pos), call)) {
        call.id = "call_" + std::to_string(reply.tool_calls.size());
        reply.tool_calls.push_back(std::move(call));
      } else {
        reply.content.append(text.substr(at, close + kCallClose.size() - at));  // malformed: as written
      }
      pos = close + kCallClose.size();
    }
    // kToolResponse: dropped
  }
}

bool chat_format_has_channels(const ChatFormat& format) {
  return format.jinja.find(kChannelOpen) != std::string::npos;
}

ChatReply chat_reply(const ChatFormat& format, const TextTokenizer& tokenizer,
                     const std::vector<int32_t>& tokens, bool more_to_come) {
  const bool channels = chat_format_has_channels(format);
  return chat_reply(format, channels ? tokenizer.decode_with_special(tokens) : tokenizer.decode(tokens),
                    more_to_come);
}

ChatReply chat_reply(const ChatFormat& format, std::string_view text, bool more_to_come) {
  if (chat_format_has_channels(format)) return parse_gemma_channels(text, more_to_come);
  ChatReply reply;
  reply.content = std::string(text);
  reply.final_bytes = text.size();
  return reply;
}

ReplyDelta ReplyDeltas::next(std::string_view text, bool finished) {
  if (format_) {
    reply_ = chat_reply(*format_, text, !finished);
  } else {
    reply_.content = std::string(text);
    reply_.final_bytes = text.size();
  }
  ReplyDelta delta;
  // Each field only grows as the text does; what was given is never taken back.
  auto grown = [](const std::string& now, size_t& sent, std::string& out) {
    if (now.size() > sent) out = now.substr(sent);
    sent = std::max(sent, now.size());
  };
  grown(reply_.reasoning_content, reasoning_sent_, delta.reasoning_content);
  grown(reply_.content, content_sent_, delta.content);
  delta.first_call = calls_sent_;
  for (; calls_sent_ < reply_.tool_calls.size(); ++calls_sent_) delta.tool_calls.push_back(reply_.tool_calls[calls_sent_]);
  return delta;
}

nlohmann::ordered_json ChatReply::message_json() const {
  nlohmann::ordered_json m = {{"role", "assistant"}};
  m["content"] = content.empty() && !tool_calls.empty() ? nlohmann::ordered_json(nullptr)
                                                        : nlohmann::ordered_json(content);
  if (!reasoning_content.empty()) m["reasoning_content"] = reasoning_content;
  if (!tool_calls.empty()) {
    m["tool_calls"] = nlohmann::ordered_json::array();
    for (const ChatToolCall& call : tool_calls)
      m["tool_calls"].push_back({{"id", call.id},
                                 {"type", "function"},
                                 {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
  }
  return m;
}

}  // namespace canvas
