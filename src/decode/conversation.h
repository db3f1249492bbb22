// A chat conversation (`canvas chat`): fitted to the model's context turn by turn (when the rendered
// conversation is too long, its oldest exchanges are dropped, never a system prompt), saved and loaded.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "decode/generation.h"

namespace canvas {

struct FittedConversation {
  int64_t dropped = 0;  // messages dropped from the front (after the system prompt)
  std::string error;    // non-empty: the last message cannot be sent even alone (Generator::check's reason)
};

// Renders `conversation` into `turn` (messages and prompt, through `generator`), checks it, and while it
// does not fit drops the oldest exchange after `first_turn` (a user message and the reply to it; a single
// message when only two are left) from `conversation`. The last message (the new user turn) is never
// dropped: when it cannot be sent even alone, the result's error says why and `conversation` keeps it.
FittedConversation fit_conversation(const Generator& generator, std::vector<ChatMessage>& conversation,
                                    size_t first_turn, GenerationRequest& turn);

// A conversation as a JSON array of {"role": ..., "content": "..."} objects (chat's /save and /load). Saving
// throws Error when the file cannot be written; loading, when it is not JSON or a message lacks its role or
// its string content.
void save_conversation(const std::vector<ChatMessage>& conversation, const std::string& path);
std::vector<ChatMessage> load_conversation(const std::string& path);
// ... of a file's text (`path` names it in errors).
std::vector<ChatMessage> parse_conversation(const std::string& text, const std::string& path);

// A chat session's conversation: an optional system prompt (always first, never dropped by
// fit_conversation) and the turns after it, with the REPL's slash commands.
class ChatSession {
 public:
  explicit ChatSession(const std::string& system = "");
  std::vector<ChatMessage>& messages() { return messages_; }
  const std::vector<ChatMessage>& messages() const { return messages_; }
  // Where the turns start: 1 with a system prompt, else 0 (fit_conversation's first_turn).
  size_t first_turn() const { return size_t(!messages_.empty() && messages_[0].role == "system"); }

  struct Reply {
    bool exit = false;  // /exit or /quit
    std::string text;   // what to tell the user (a confirmation, the help, or why /save or /load failed)
  };
  // A line starting with '/': /reset (keeps the system prompt), /system TEXT (sets it; no TEXT removes it),
  // /save FILE, /load FILE (save_conversation / load_conversation; a failure leaves the conversation as
  // it was), /exit, /quit; anything else gives the help.
  Reply command(const std::string& line);

 private:
  std::vector<ChatMessage> messages_;
};

}  // namespace canvas
