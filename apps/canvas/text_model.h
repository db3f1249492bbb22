// What generate and chat share: a model's tokenizer (from its GGUF, its tokenizer.json or --tokenizer),
// its uniform-state sampler defaults (generation_config.json or GGUF diffusion.* keys), the Gemma chat
// template and the live canvas view.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "args.h"
#include "decode/entropy_bound.h"
#include "decode/events.h"
#include "decode/sampling.h"
#include "model/model.h"

namespace canvas {
class Tokenizer;
class HfTokenizer;
}  // namespace canvas

namespace canvas::cli {

// One of the two tokenizer kinds canvas reads, behind one interface.
class TextTokenizer {
 public:
  // explicit_path ("" = none) is a tokenizer.json or a GGUF holding tokenizer.ggml.*; without it the
  // tokenizer is the model's own: the GGUF's tokenizer.ggml.* (gpt2 byte-level BPE, or gemma4 / llama
  // SentencePiece-style BPE), or tokenizer.json beside a safetensors checkpoint's config.json. Throws
  // Error saying what is missing and how to give one; also when the tokenizer has more tokens than the
  // model's vocabulary.
  static TextTokenizer for_model(const Model& model, const std::string& model_path, const std::string& explicit_path);

  // Special tokens written literally in the text (e.g. "<|turn>") are matched as single tokens.
  std::vector<int32_t> encode(const std::string& text, bool add_bos) const;
  std::string decode(const std::vector<int32_t>& ids) const;  // special tokens dropped
  std::string token_piece(int32_t id) const;
  bool wants_bos() const;                             // the vocabulary asks for a leading <bos>
  const std::string& origin() const { return origin_; }  // the file it came from

 private:
  std::shared_ptr<const Tokenizer> bpe_;
  std::shared_ptr<const HfTokenizer> sentencepiece_;
  std::string origin_;
};

// A thread pool of --threads N (0 or absent: all cores); checks the range.
std::unique_ptr<ThreadPool> make_pool(const Args& args);

// The directory of a safetensors checkpoint given as a directory or its config.json ("" for a GGUF).
std::string checkpoint_directory(const Model& model, const std::string& model_path);

// Uniform-state sampler defaults of a model: generation_config.json beside a safetensors checkpoint
// (max_denoising_steps, entropy_bound, t_min, t_max, stability_threshold, confidence_threshold,
// eos_token_id, pad_token_id, max_new_tokens, canvas_length), or a GGUF's diffusion.canvas_length and
// diffusion.eb_* keys. Absent values keep the release's defaults; EOS ids are the file's list, else
// {1, 106, 50} for Gemma models (the release's list; GGUF stores one id) and the config's EOS otherwise.
struct SamplerDefaults {
  EntropyBoundParams params;
  int64_t max_new_tokens = 64;  // the -n default
  std::string source;           // where the values came from (for messages)
};
SamplerDefaults sampler_defaults(const Model& model, const std::string& model_path);

// Reads the uniform-state flags (--steps, --block-length, --entropy-bound, --t-min, --t-max,
// --stability, --confidence-threshold, --stream-head) over the defaults, for n new tokens and the given
// seed; checks them.
EntropyBoundParams uniform_state_params(const Args& args, const SamplerDefaults& defaults, int64_t n, uint64_t seed);

// The run's seed: -s/--seed N, or a fresh random one when the flag is absent or -1 (the caller reports it).
uint64_t resolve_seed(const Args& args);
// --temp, --top-k, --top-p, --min-p, --repeat-penalty (checked) with the given seed.
SamplingParams sampling_params(const Args& args, uint64_t seed);

// The prompt of generate: -p TEXT, -p - (stdin), -f/--file FILE, or (without either) stdin when it is
// not a terminal. One trailing newline of a file or stdin is dropped. Throws when there is none.
std::string read_prompt(const Args& args, const std::string& help_command);

// Streams generated text to stdout as its tokens become final, in order: update() with the finished
// prefix of the generated tokens, finish() with all of them. The text ends before the first stop id
// and the first stop string; text that might still turn into a stop string, or is an incomplete UTF-8
// sequence, is held back until it is known. With print = false nothing is written (finish() still
// returns the text).
class TextStream {
 public:
  TextStream(const TextTokenizer* tokenizer, std::vector<int32_t> stop_ids, std::vector<std::string> stop_strings,
             bool print);
  void update(const std::vector<int32_t>& final_prefix);
  std::string finish(const std::vector<int32_t>& tokens);  // the whole text; writes what is not yet written
  bool stop_string_seen() const { return stop_string_seen_; }

 private:
  std::string text_of(const std::vector<int32_t>& tokens, bool* cut);  // notes a stop string it finds
  void emit(const std::string& text, size_t end);

  const TextTokenizer* tokenizer_;
  std::vector<int32_t> stop_ids_;
  std::vector<std::string> stop_strings_;
  bool print_;
  std::string written_;
  bool stop_string_seen_ = false;
};

// One user turn of the Gemma chat template: "<|turn>user\n{text}<turn|>\n<|turn>model\n" (the
// conversation's first turn is preceded by "<bos>").
std::string gemma_user_turn(const std::string& text, bool first);
// What closes the model's turn in the history: "<turn|>\n".
std::string gemma_turn_end();

// Bytes that are not valid UTF-8 become U+FFFD (for terminals and JSON).
std::string sanitize_utf8(const std::string& s);

// Control characters and DEL as visible escapes (\n, \t, \x1b, ...), so token text cannot move the cursor.
std::string escape_controls(const std::string& s);

// Live view: the generated region (masked positions as a shaded block, control characters escaped),
// redrawn in place on stderr, then a pause of delay_ms.
class CanvasView {
 public:
  CanvasView(const TextTokenizer* tokenizer, int32_t mask, int64_t delay_ms = 0)
      : tokenizer_(tokenizer), mask_(mask), delay_ms_(delay_ms) {}
  void draw(const StepEvent& e);
  void finish();

 private:
  const TextTokenizer* tokenizer_;
  int32_t mask_;
  int64_t delay_ms_;
};

// --visual and --visual-delay: true when --visual is given and stderr is a terminal; says on stderr
// that it is ignored otherwise (escape codes would land in a redirected file).
bool visual_enabled(const Args& args);

}  // namespace canvas::cli
