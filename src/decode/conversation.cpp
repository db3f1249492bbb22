// A chat conversation fitted to the model's context (conversation.h).
#include "decode/conversation.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/output_file.h"
#include "io/json.h"

namespace canvas {

FittedConversation fit_conversation(const Generator& generator, std::vector<ChatMessage>& conversation,
                                    size_t first_turn, GenerationRequest& turn) {
  FittedConversation fitted;
  while (true) {
    turn.prompt.clear();
    turn.messages = conversation;
    try {
      turn.prompt = generator.prompt_of(turn);
      generator.check(turn, int64_t(turn.prompt.size()));
      break;
    } catch (const Error& e) {
      fitted.error = e.what();
    }
    // Too long (or not renderable): drop the oldest exchange (a user turn and the reply to it), if any.
    if (turn.prompt.empty() || conversation.size() - first_turn <= 1) break;
    const size_t drop = conversation.size() - first_turn >= 3 ? 2 : 1;
    conversation.erase(conversation.begin() + long(first_turn), conversation.begin() + long(first_turn + drop));
    fitted.dropped += int64_t(drop);
    fitted.error.clear();
  }
  return fitted;
}

void save_conversation(const std::vector<ChatMessage>& conversation, const std::string& path) {
  nlohmann::json messages = nlohmann::json::array();
  for (const ChatMessage& m : conversation) messages.push_back({{"role", m.role}, {"content", m.content}});
  // Bytes that are not UTF-8 (a model may write any) are saved as U+FFFD: a save never fails on them.
  write_file(path, messages.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

std::vector<ChatMessage> load_conversation(const std::string& path) {
  std::vector<ChatMessage> loaded;
  for (const nlohmann::json& m : load_json_file(path)) {
    check(m.is_object() && m.value("role", "") != "" && m.contains("content") && m["content"].is_string(),
          path + ": each message must be {\"role\": ..., \"content\": \"...\"}");
    loaded.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
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
    reply.text =
        "commands: /help, /reset, /system TEXT, /save FILE, /load FILE, /exit; Ctrl-C interrupts a reply,\n"
        "Ctrl-D ends the chat; start a message with a space to send a '/'";
  }
  return reply;
}

}  // namespace canvas
