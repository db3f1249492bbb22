// Fuzz harness: a chat template (a model file's tokenizer.chat_template, Jinja) rendered over a small
// conversation; templates canvas cannot render must be canvas::Error, never a crash or a hang, and no
// render may write more than its output bound (checked here, not trusted).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "text/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  canvas::ChatTemplateInputs inputs;
  static const canvas::ChatTemplateInputs conversation = [] {
    canvas::ChatTemplateInputs in;
    canvas::ChatMessage call{"assistant", ""};
    call.reasoning_content = "Look it up.";
    call.tool_calls = nlohmann::ordered_json::parse(
        R"([{"id": "1", "type": "function", "function": {"name": "search", "arguments": {"q": "Moses", "n": 2.5}}}])");
    canvas::ChatMessage answer{"tool", "A prophet."};
    answer.tool_call_id = "1";
    in.messages = {{"system", "Be brief."}, {"user", "Hello"}, {"assistant", "Hi."}, {"user", "Who was Moses?"}, call,
                   answer};
    in.tools = nlohmann::ordered_json::parse(
        R"([{"type": "function", "function": {"name": "search", "description": "Searches", "parameters":
            {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": ["number", "null"]}},
             "required": ["q"]}}}])");
    in.enable_thinking = true;
    return in;
  }();
  inputs.messages = conversation.messages;
  inputs.tools = conversation.tools;
  inputs.enable_thinking = conversation.enable_thinking;
  inputs.bos_token = "<bos>";
  inputs.eos_token = "<eos>";
  inputs.max_output_bytes = 1 << 16;  // small, so that the fuzzer reaches it
  try {
    const std::string out =
        canvas::render_chat_template(std::string(reinterpret_cast<const char*>(data), size), inputs);
    if (out.size() > inputs.max_output_bytes) std::abort();
  } catch (const canvas::Error&) {
  }
  return 0;
}
