// One interface over the tokenizer kinds canvas reads (byte-level BPE, Gemma/Llama SentencePiece-style BPE,
// SentencePiece unigram/BPE from llama.cpp GGUFs), and the one place that picks the kind from a file.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace canvas {

class GgufFile;

// Special token ids a model's config knows and a byte-level tokenizer.json may not name (-1: none).
struct SpecialTokenIds {
  int32_t bos = -1, eos = -1, pad = -1, mask = -1;
};

class TextTokenizer {
 public:
  // The vocabulary in a GGUF (tokenizer.ggml.model: gpt2 byte-level BPE, gemma4 / llama BPE, or a
  // SentencePiece vocabulary). Throws Error naming the file when it holds none.
  static TextTokenizer from_gguf(const GgufFile& file);
  // A Hugging Face tokenizer.json: byte-level BPE (LLaDA, Dream, Qwen: the special ids come from
  // `special`) or Gemma's SentencePiece-style BPE.
  static TextTokenizer from_json(const std::string& path, const SpecialTokenIds& special = {});
  // Any path a user may give: a GGUF, a tokenizer.json, a checkpoint directory or its config.json
  // (tokenizer.json beside it).
  static TextTokenizer open(const std::string& path, const SpecialTokenIds& special = {});

  // parse_special: special tokens written literally in the text (e.g. "<|turn>") become single tokens;
  // false: they are encoded as the text they are (user content from a client).
  std::vector<int32_t> encode(const std::string& text, bool add_bos, bool parse_special = true) const;
  std::string decode(const std::vector<int32_t>& ids) const;  // special tokens dropped
  // The text with special tokens written as their pieces (e.g. Gemma 4's "<|channel>"), for front ends
  // that read a format's markers in generated text).
  std::string decode_with_special(const std::vector<int32_t>& ids) const;
  std::string token_piece(int32_t id) const;                   // "<ID>" for an id outside the vocabulary
  int64_t vocab_size() const;
  int32_t bos_id() const;   // -1 when absent
  bool wants_bos() const;   // the vocabulary asks for a leading BOS
  const std::string& origin() const { return origin_; }  // the file it came from

  struct Impl;  // the wrapped tokenizer (text_tokenizer.cpp)

 private:
  std::shared_ptr<const Impl> impl_;
  std::string origin_;
};

}  // namespace canvas
