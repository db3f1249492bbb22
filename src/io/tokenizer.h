// Tokenizers stored in GGUF: byte-level BPE (tokenizer.ggml.model = "gpt2") with special tokens.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "io/bpe_merges.h"

namespace canvas {

class GgufFile;

// GPT-2's byte-to-unicode alphabet: byte -> the UTF-8 text that stands for it in byte-level BPE
// vocabularies. Printable bytes (33-126, 161-172, 174-255) are their own code point; the other 68 take
// code points 256, 257, ... in byte order.
const std::array<std::string, 256>& gpt2_byte_to_unicode();

// A byte token written "<0xHH>" (two upper- or lower-case hex digits, as SentencePiece vocabularies
// write them) -> that byte; false for any other text.
bool parse_byte_token(std::string_view text, uint8_t& byte);

// Token types as llama.cpp writes them in tokenizer.ggml.token_type.
enum TokenType : int32_t {
  kTokenUndefined = 0,  // treated as normal
  kTokenNormal = 1,
  kTokenUnknown = 2,
  kTokenControl = 3,
  kTokenUserDefined = 4,
  kTokenUnused = 5,
  kTokenByte = 6,
};

// The pre-tokenizer rule set (the regex that splits text into words before BPE), matched by hand.
enum class PreTokenizer {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  Gpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
  // \s*[\r\n]+|\s+(?!\S)|\s+
  Llama3,
  // As Llama3 but \p{N} instead of \p{N}{1,3} (one digit per word).
  Qwen2,
};

class Tokenizer {
 public:
  // Reads tokenizer.ggml.{model,pre,tokens,token_type,merges,bos_token_id,eos_token_id,
  // padding_token_id,mask_token_id,add_bos_token}. Throws Error for an unsupported model or
  // inconsistent arrays (naming the key).
  static Tokenizer from_gguf(const GgufFile& file);

  // Builds a tokenizer from in-memory arrays with the same meaning as the GGUF keys (tests, trainer).
  // token_types may be empty (all normal). Ids of -1 mean absent. Throws Error naming the GGUF key for
  // an unsupported model, a token_type array of the wrong length or with an unknown type, an id out of
  // range, or a merge that is not "left right". A merge whose parts or result are not in the
  // vocabulary is ignored (it could never fire in a vocabulary-consistent BPE; Hugging Face refuses
  // such files, so real vocabularies do not have them). A repeated merge keeps its first (lowest) rank.
  static Tokenizer from_vocab(std::string model, std::string pre, std::vector<std::string> tokens,
                              std::vector<int32_t> token_types, std::vector<std::string> merges, int32_t bos,
                              int32_t eos, int32_t pad, int32_t mask, bool add_bos);

  // Text -> ids. Special tokens (token_type CONTROL / USER_DEFINED) written literally in the text are
  // matched as single tokens when parse_special is true. Adds BOS when add_bos && the vocabulary says so.
  std::vector<int32_t> encode(std::string_view text, bool add_bos = false, bool parse_special = true) const;
  // Ids -> text, byte-exact inverse of encode for any UTF-8 input. Control tokens are rendered as
  // their text when render_special is true, else dropped.
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;
  // The bytes one token stands for (its piece), for live views. Control and user-defined tokens give
  // their literal text.
  std::string token_piece(int32_t id) const;
  // The pre-tokenizer's split of text (no special-token handling): the words BPE runs on, as bytes.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  int32_t vocab_size() const { return int32_t(tokens_.size()); }
  int32_t bos_id() const { return bos_id_; }  // -1 when absent
  int32_t eos_id() const { return eos_id_; }
  int32_t pad_id() const { return pad_id_; }
  int32_t mask_id() const { return mask_id_; }
  int32_t unknown_id() const { return unknown_id_; }  // first UNKNOWN-type token, -1 when none
  bool add_bos() const { return add_bos_; }
  bool is_control(int32_t id) const;
  const std::string& pre_name() const { return pre_; }       // tokenizer.ggml.pre as stored
  PreTokenizer pre_tokenizer() const { return pre_rules_; }  // the rules used for it
  bool pre_is_fallback() const { return pre_fallback_; }     // unknown name: GPT-2 rules used

 private:
  void append_span_ids(std::string_view span, std::vector<int32_t>& out) const;
  void append_bpe_ids(std::string_view word, std::vector<int32_t>& out) const;

  std::vector<std::string> tokens_;   // as stored (byte-level BPE alphabet)
  std::vector<int32_t> token_types_;  // 1 normal, 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte
  std::vector<std::string> pieces_;   // the bytes each token stands for (specials: literal text)
  std::unordered_map<std::string, int32_t> token_to_id_;  // stored text -> lowest id with that text
  BpeMerges merges_;
  std::array<int32_t, 256> byte_token_{};                 // byte -> id of its one-byte token, -1 if none
  std::vector<int32_t> special_ids_;                      // matched literally, longest first
  std::array<std::vector<int32_t>, 256> special_by_first_byte_;  // special_ids_ bucketed by first byte
  std::string pre_;                                              // tokenizer.ggml.pre
  PreTokenizer pre_rules_ = PreTokenizer::Gpt2;
  bool pre_fallback_ = false;
  bool ignore_merges_ = false;  // llama3 style: a word that is itself a normal token is taken whole
  int32_t bos_id_ = -1, eos_id_ = -1, pad_id_ = -1, mask_id_ = -1, unknown_id_ = -1;
  bool add_bos_ = false;
};

}  // namespace canvas
