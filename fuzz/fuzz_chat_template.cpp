// Fuzz harness: a chat template (a model file's tokenizer.chat_template, Jinja) rendered over a small
// conversation; templates canvas cannot render must be canvas::Error, never a crash or a hang.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "decode/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  canvas::ChatTemplateInputs inputs;
  inputs.messages = {{"system", "Be brief."}, {"user", "Hello"}, {"assistant", "Hi."}, {"user", "Who was Moses?"}};
  inputs.bos_token = "<bos>";
  inputs.eos_token = "<eos>";
  try {
    canvas::render_chat_template(std::string(reinterpret_cast<const char*>(data), size), inputs);
  } catch (const canvas::Error&) {
  }
  return 0;
}
