// Chat templates: the Jinja subset that Hugging Face chat templates (tokenizer.chat_template) are written
// in, enough for the Gemma, LLaDA and Dream (Qwen / ChatML) templates; a conversation rendered to text.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"

namespace canvas {

// One message as OpenAI's chat API carries it. Beside role and text, the optional fields a template may read;
// an empty or null field is absent from the message the template sees (as a client that left it out).
struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
  nlohmann::ordered_json content_parts = nullptr;  // a list of parts ({"type": "text", "text": ...}): the
                                                   // content, when set, in place of `content`
  std::string reasoning_content = "";              // the model's thinking of an earlier turn
  nlohmann::ordered_json tool_calls =
      nullptr;                    // [{"id", "type": "function", "function": {"name", "arguments"}}]
  std::string tool_call_id = "";  // a tool message: the call it answers
  std::string name = "";          // a tool message: the tool's name

  // The message as the template's `messages` item (and as a client would send it).
  nlohmann::ordered_json to_json() const;
  // A message as a client sends it; Error naming `origin` for a malformed one.
  static ChatMessage from_json(const nlohmann::ordered_json& message, const std::string& origin);
};

// What a request adds to its messages for the template: the tools it offers and the thinking switch.
struct ChatExtras {
  nlohmann::ordered_json tools = nullptr;  // the `tools` variable (OpenAI's list of functions); null: none
  std::optional<bool> enable_thinking;     // the `enable_thinking` variable; unset: undefined
};

struct ChatTemplateInputs {
  std::vector<ChatMessage> messages;
  std::string bos_token, eos_token;
  bool add_generation_prompt = true;
  nlohmann::ordered_json tools = nullptr;  // as ChatExtras
  std::optional<bool> enable_thinking;
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

// Renders a chat template as jinja2 does under transformers' apply_chat_template. The subset: {{ }}, {% %},
// {# #} with '-' whitespace control; if / elif / else, for (over lists, dicts and strings, with the loop
// variables and an else branch), set (names, namespace attributes, and {% set x %}...{% endset %}), macro
// (positional and keyword arguments with defaults, recursion to a bounded depth; no caller), break /
// continue; expressions with string, integer, float, boolean and none literals, lists, dictionaries, names,
// attributes, subscripts and slices (with a step), + - * / // % ~, the comparisons, in / not in,
// and / or / not, `a if c else b`, the tests defined / undefined / none / string / number / integer /
// float / boolean / iterable / mapping / sequence / true / false / even / odd, the filters trim / length /
// count / upper / lower / capitalize / title / default / first / last / join / tojson / string / list /
// items / dictsort / map (a filter, or attribute=) / select / reject / selectattr / rejectattr / reverse /
// sort / unique / int / float / abs / replace / safe, the string methods strip / lstrip / rstrip /
// startswith / endswith / upper / lower / split / replace / title / capitalize / find / count, dict .get /
// .items / .keys / .values, and the functions raise_exception, namespace and range. Throws Error naming the
// construct it does not handle (or the template's own raise_exception message), or the limit a render
// passed (see ChatTemplateInputs).
std::string render_chat_template(const std::string& source, const ChatTemplateInputs& inputs);

}  // namespace canvas
