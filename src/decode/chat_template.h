// Chat templates: the Jinja subset that Hugging Face chat templates (tokenizer.chat_template) are written
// in, enough for the Gemma, LLaDA and Dream (Qwen / ChatML) templates; a conversation rendered to text.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"

namespace canvas {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

struct ChatTemplateInputs {
  std::vector<ChatMessage> messages;
  std::string bos_token, eos_token;
  bool add_generation_prompt = true;
  // Bounds, so that a template from a model file cannot take the machine down: no text the render makes
  // (the output, a string repeated or joined) may pass max_output_bytes, checked before it is allocated;
  // the render's work (expressions evaluated, loop iterations, bytes copied) is bounded by a step budget;
  // lists and dicts nest at most 64 deep and a namespace never holds itself;
  // `cancel`, when set, stops the render at the next loop iteration or expression. `source` names the
  // template in these errors (e.g. "model.gguf's tokenizer.chat_template").
  size_t max_output_bytes = size_t(16) << 20;
  std::string max_output_reason;  // said after the limit in its error, e.g. how it follows from the context
  const std::atomic<bool>* cancel = nullptr;
  std::string source = "chat template";
};

// The error of a render whose text would pass max_output_bytes (a conversation too long for the model, when
// the limit follows from its context).
class ChatTemplateTooLong : public Error {
 public:
  using Error::Error;
};

// The render's step budget: one step per expression evaluated or loop iteration, and one per 256 bytes a
// value copies; a render past it is an Error (it would otherwise run for minutes).
constexpr int64_t kChatTemplateMaxSteps = int64_t(1) << 22;

// Renders a chat template. The subset: {{ }}, {% %}, {# #} with '-' whitespace control; if / elif /
// else, for (over lists, with loop.index, index0, first, last, length, and an else branch), set
// (names and namespace attributes), macros are not supported; expressions with string, integer, boolean
// and none literals, lists, dictionaries, names, attributes, subscripts and slices, + - * / % ~, the
// comparisons, in / not in, and / or / not, `a if c else b`, the tests defined / undefined / none /
// string / number / iterable / mapping / sequence / true / false, the filters trim / length / count /
// upper / lower / default / first / last / join / tojson (strings) / string, the string methods
// strip / lstrip / rstrip / startswith / endswith / upper / lower / split / replace / title, dict .get /
// .items, and the functions raise_exception and namespace. Throws Error naming the construct it does not
// handle (or the template's own raise_exception message), or the limit a render passed (see
// ChatTemplateInputs).
std::string render_chat_template(const std::string& source, const ChatTemplateInputs& inputs);

}  // namespace canvas
