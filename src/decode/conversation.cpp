// A chat conversation fitted to the model's context (conversation.h).
#include "decode/conversation.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/output_file.h"
#include "text/chat_template.h"
#include "io/input_file.h"
#include "io/json.h"

namespace canvas {

namespace {

// The most bytes of a conversation file (/load): 64 MiB, far more than any context holds even with every
// character escaped.
constexpr size_t kMaxConversationBytes = size_t(64) << 20;

}  // namespace

FittedConversation fit_conversation(const Generator& generator, std::vector<ChatMessage>& conversation,
                                    size_t first_turn, GenerationRequest& turn) {
  // The drops fitting may make, in order: whole exchanges (a user turn and its reply) while three or more
  // turns are left, then single messages, down to the last message alone.
  const size_t turns = conversation.size() > first_turn ? conversation.size() - first_turn : 0;
  std::vector<size_t> drops = {0};
  while (turns - drops.back() > 1) drops.push_back(drops.back() + (turns - drops.back() >= 3 ? 2 : 1));
  // Renders and checks the conversation without its `drop` oldest turns; true when it fits. `rendered`:
  // false when the template refused it for a reason other than its length.
  auto attempt = [&](size_t drop, std::string& error, bool& rendered) {
    turn.prompt.clear();
    turn.messages.assign(conversation.begin(), conversation.begin() + long(first_turn));
    turn.messages.insert(turn.messages.end(), conversation.begin() + long(first_turn + drop), conversation.end());
    rendered = false;
    try {
      turn.prompt = generator.prompt_of(turn);
      rendered = true;
      generator.check(turn, int64_t(turn.prompt.size()));
      error.clear();
      return true;
    } catch (const ChatTemplateTooLong& e) {
      error = e.what();
      rendered = true;  // too long: fewer turns may fit
    } catch (const Error& e) {
      error = e.what();
    }
    return false;
  };
  FittedConversation fitted;
  bool rendered = false;
  if (attempt(0, fitted.error, rendered) || !rendered) return fitted;
  // Fewer turns never make a longer prompt: the first drop that fits is found by bisection, so that a long
  // conversation (a /load of thousands of messages) is rendered a few dozen times, not once per exchange.
  // drops[lo] does not fit; drops[hi] fits, or is the last drop (then fitted.error says why it does not).
  size_t lo = 0, hi = drops.size() - 1;
  if (hi > 0 && attempt(drops[hi], fitted.error, rendered)) {
    while (hi - lo > 1) {
      const size_t mid = lo + (hi - lo) / 2;
      (attempt(drops[mid], fitted.error, rendered) ? hi : lo) = mid;
    }
    attempt(drops[hi], fitted.error, rendered);  // leaves `turn` as it fits
  }
  fitted.dropped = int64_t(drops[hi]);
  conversation.erase(conversation.begin() + long(first_turn), conversation.begin() + long(first_turn + drops[hi]));
  return fitted;
}

void save_conversation(const std::vector<ChatMessage>& conversation, const std::string& path) {
  nlohmann::json messages = nlohmann::json::array();
  for (const ChatMessage& m : conversation) messages.push_back({{"role", m.role}, {"content", m.content}});
  // Bytes that are not UTF-8 (a model may write any) are saved as U+FFFD: a save never fails on them.
  write_file(path, messages.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

std::vector<ChatMessage> load_conversation(const std::string& path) {
  // Bounded and checked before it is read: a huge file, a FIFO or a device is refused, naming it.
  return parse_conversation(
      read_regular_file_bounded(path, kMaxConversationBytes, "conversation file", "kMaxConversationBytes"), path);
}

std::vector<ChatMessage> parse_conversation(const std::string& text, const std::string& path) {
  check(text.find('\0') == std::string::npos,
        path + ": not a saved conversation (it holds NUL bytes; /save writes a JSON array of messages)");
  const nlohmann::json doc = parse_json(text, path);
  check(doc.is_array(), path + ": not a saved conversation: it must be a JSON array of {\"role\": ..., "
                               "\"content\": \"...\"} messages, not " + json_type_name(doc));
  std::vector<ChatMessage> loaded;
  loaded.reserve(doc.size());
  for (size_t i = 0; i < doc.size(); ++i) {
    const nlohmann::json& m = doc[i];
    const std::string where = path + ": message " + std::to_string(i);
    check(m.is_object(), where + " must be {\"role\": ..., \"content\": \"...\"}, not " + json_type_name(m));
    const auto role = m.find("role"), content = m.find("content");
    check(role != m.end() && role->is_string(),
          where + ": 'role' must be a string (system, user or assistant)" +
              (role == m.end() ? std::string(", and it is missing") : ", not " + json_type_name(*role)));
    const std::string& r = role->get_ref<const std::string&>();
    check(r == "system" || r == "user" || r == "assistant",
          where + ": 'role' must be system, user or assistant, not '" + r.substr(0, 40) + "'");
    check(content != m.end() && content->is_string(),
          where + ": 'content' must be a string" +
              (content == m.end() ? std::string(", and it is missing") : ", not " + json_type_name(*content)));
    loaded.push_back({r, content->get<std::string>()});
  }
  return loaded;
}

ChatSession::ChatSession(const std::string& system) {
  if (!system.empty()) messages_.push_back({"system", system});
}

ChatSession::Reply ChatSession::command(const std::string& line) {
  const size_t space = line.find(' ');
  const std::string name = line.substr(0, space);
  const std::string rest = space == std::string::npos ? "" : line.substr(space + 1);
  Reply reply;
  if (name == "/exit" || name == "/quit") {
    reply.exit = true;
  } else if (name == "/reset") {
    messages_.resize(first_turn());
    reply.text = "[conversation reset]";
  } else if (name == "/system") {
    if (first_turn()) messages_.erase(messages_.begin());
    if (!rest.empty()) messages_.insert(messages_.begin(), {"system", rest});
    reply.text = rest.empty() ? "[system prompt removed]" : "[system prompt set]";
  } else if ((name == "/save" || name == "/load") && !rest.empty()) {
    try {
      if (name == "/save") save_conversation(messages_, rest);
      else messages_ = load_conversation(rest);
      reply.text = "[" + std::string(name == "/save" ? "saved " : "loaded ") + std::to_string(messages_.size()) +
                   " messages " + (name == "/save" ? "to " : "from ") + rest + "]";
    } catch (const std::exception& e) {
      reply.text = std::string("canvas chat: ") + e.what();
    }
  } else {
    // /help (and /?) lists the commands; anything else says what was wrong first.
    if (name == "/save" || name == "/load") reply.text = "usage: " + name + " FILE\n";
    else if (name != "/help" && name != "/?") reply.text = "unknown command " + name + "\n";
    reply.text +=
        "commands: /help, /reset, /system TEXT, /save FILE, /load FILE, /exit; Ctrl-C interrupts a reply,\n"
        "Ctrl-D ends the chat; start a message with a space to send a '/'";
  }
  return reply;
}

}  // namespace canvas
