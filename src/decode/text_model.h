// A model with what text generation needs beside its weights: its tokenizer (the GGUF's, the tokenizer.json
// beside a checkpoint, or one given), its sampler defaults (GGUF diffusion.* keys or generation_config.json)
// and its chat format (the model's chat template through the Jinja subset, else a built-in format).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "text/chat_template.h"
#include "decode/entropy_bound.h"
#include "io/text_tokenizer.h"
#include "model/model.h"

namespace canvas {

// The directory of a safetensors checkpoint given as a directory or its config.json ("" for a GGUF).
std::string checkpoint_directory(const Model& model, const std::string& model_path);

// The model's tokenizer: explicit_path ("" = none) is a tokenizer.json or a GGUF holding tokenizer.ggml.*;
// without it the GGUF's own vocabulary, or tokenizer.json beside a safetensors checkpoint. Throws Error
// saying what is missing; also when the tokenizer has more tokens than the model's vocabulary.
TextTokenizer tokenizer_for_model(const Model& model, const std::string& model_path, const std::string& explicit_path);

// Sampler defaults of a model: generation_config.json beside a safetensors checkpoint (max_denoising_steps,
// entropy_bound, t_min, t_max, stability_threshold, confidence_threshold, eos_token_id, pad_token_id,
// max_new_tokens, canvas_length), or a GGUF's diffusion.canvas_length and diffusion.eb_* keys. Absent values
// keep the release's defaults; EOS ids are the file's list, else {1, 106, 50} for Gemma models (the
// release's list; GGUF stores one id) and the config's EOS otherwise.
struct SamplerDefaults {
  EntropyBoundParams params;
  int64_t max_new_tokens = 64;  // the default number of new tokens of a uniform-state model
  std::string source;           // where the values came from (for messages)
};
SamplerDefaults sampler_defaults(const Model& model, const std::string& model_path);

// A piece of a rendered conversation: the format's own text (its markers are special tokens), or the
// content of messages[message] as the client wrote it.
struct ChatPiece {
  std::string text;
  int64_t message = -1;  // -1: the format's text
};

// How a conversation becomes the model's prompt. `jinja` holds the model's own template (rendered by
// chat_template.h); empty: the built-in format `name` (gemma4, gemma, chatml, llama3).
struct ChatFormat {
  std::string name;
  std::string turn_end;  // the text that closes a model turn ("" when unknown); it also ends a reply
  std::string jinja;
  std::string origin;    // where the format came from (for the chat banner)
  std::string bos, eos;  // the template's bos_token / eos_token
  bool add_bos = false;  // the tokenizer's BOS goes before the rendered text (formats that do not write it)
  bool model_has_template = false;
  // The bound of the model's template's rendering (ChatTemplateInputs): the most bytes the model's context
  // can hold (its length times the longest token's bytes), so that a conversation or a template that writes
  // more is refused before it is tokenized; 0: the renderer's default.
  size_t max_prompt_bytes = 0;
  std::string max_prompt_reason;  // how max_prompt_bytes follows from the context (for its error)
  std::string template_source = "the chat template";  // names the template in the renderer's errors
  const std::atomic<bool>* cancel = nullptr;  // set: stops a render (e.g. serve's shutdown)

  // name "auto": the model's tokenizer.chat_template (a GGUF key, or tokenizer_config.json's chat_template
  // beside a checkpoint) when the Jinja subset renders it, else the built-in Gemma 4 format; any other
  // name: that built-in format (Error for an unknown one).
  static ChatFormat for_model(const Model& model, const std::string& model_path, const TextTokenizer& tokenizer,
                              const std::string& name = "auto");
  // The inputs of the model's template for `messages` (and a request's tools and thinking switch), with the
  // bounds above. The built-in formats have no tools or thinking switch and ignore `extras`.
  ChatTemplateInputs template_inputs(const std::vector<ChatMessage>& messages, const ChatExtras& extras = {}) const;
  // The conversation ending with an open model turn.
  std::string render(const std::vector<ChatMessage>& messages, const ChatExtras& extras = {}) const;
  // The same text cut into the format's text and the messages' contents (in order; a content may appear
  // more than once or not at all, as the template writes it).
  std::vector<ChatPiece> render_pieces(const std::vector<ChatMessage>& messages, const ChatExtras& extras = {}) const;
  // The model's template reads `enable_thinking` (a thinking switch such as Gemma 4's).
  bool has_thinking_switch() const;
  // The conversation's prompt ids. Special-token text in a message's content (e.g. "<|turn>") is encoded
  // as the characters it is unless parse_special, so a client cannot open or close turns; the format's
  // own markers are special tokens. Throws Error when a content holding special-token text cannot be told
  // apart from the template's text (a template that rewrites message text).
  std::vector<int32_t> encode(const TextTokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                              bool parse_special, const ChatExtras& extras = {}) const;
};

// A loaded model and what generating text with it needs. The Model is owned (it is a set of shared handles
// to mapped weights, cheap to move).
struct TextModel {
  std::string path;
  Model model;
  TextTokenizer tokenizer;
  SamplerDefaults defaults;
  ChatFormat chat;

  // Reads the tokenizer (explicit_tokenizer: "" = the model's own), the sampler defaults and the chat
  // format (chat_template: auto or a built-in name) of a loaded model.
  static TextModel from(Model model, const std::string& path, const std::string& explicit_tokenizer = "",
                        const std::string& chat_template = "auto");
};

}  // namespace canvas
