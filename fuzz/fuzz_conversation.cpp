// Fuzz harness: a saved chat conversation (`canvas chat`'s /load FILE): parsed, or refused with an Error
// naming the file; every loaded message has a known role.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "decode/conversation.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto messages =
        canvas::parse_conversation(std::string(reinterpret_cast<const char*>(data), size), "fuzz.json");
    for (const auto& m : messages)
      if (m.role != "system" && m.role != "user" && m.role != "assistant") std::abort();
  } catch (const canvas::Error&) {
  }
  return 0;
}
