// A chat conversation fitted to the model's context (conversation.h).
#include "decode/conversation.h"

#include "core/error.h"

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

}  // namespace canvas
