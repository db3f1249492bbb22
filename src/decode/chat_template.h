// Chat templates: the Jinja subset that Hugging Face chat templates (tokenizer.chat_template) are written
// in, enough for the Gemma, LLaDA and Dream (Qwen / ChatML) templates; a conversation rendered to text.
#pragma once
#include <string>
#include <vector>

namespace canvas {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

struct ChatTemplateInputs {
  std::vector<ChatMessage> messages;
  std::string bos_token, eos_token;
  bool add_generation_prompt = true;
};

// Renders a chat template. The subset: {{ }}, {% %}, {# #} with '-' whitespace control; if / elif /
// else, for (over lists, with loop.index, index0, first, last, length, and an else branch), set
// (names and namespace attributes), macros are not supported; expressions with string, integer, boolean
// and none literals, lists, dictionaries, names, attributes, subscripts and slices, + - * / % ~, the
// comparisons, in / not in, and / or / not, `a if c else b`, the tests defined / undefined / none /
// string / number / iterable / mapping / sequence / true / false, the filters trim / length / count /
// upper / lower / default / first / last / join / tojson (strings) / string, the string methods
// strip / lstrip / rstrip / startswith / endswith / upper / lower / split / replace / title, dict .get /
// .items, and the functions raise_exception and namespace. Throws Error naming the construct it does not
// handle (or the template's own raise_exception message).
std::string render_chat_template(const std::string& source, const ChatTemplateInputs& inputs);

}  // namespace canvas
