// SentencePiece-style tokenizer scored by token (llama.cpp's "llama" GGUF vocabularies without merges,
// e.g. LLaMA 1/2): the highest-scoring adjacent pair that is a token merges first; pieces that are not
// tokens fall back to byte tokens <0xNN>.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "io/token_pieces.h"

namespace canvas {

class GgufFile;

class SpmTokenizer {
 public:
  // Reads tokenizer.ggml.{model ("llama"), tokens, scores, token_type, bos/eos/unknown/padding ids,
  // add_bos_token, add_space_prefix (default true)}. Throws Error naming the file and key for a missing
  // or inconsistent array.
  static SpmTokenizer from_gguf(const GgufFile& file);
  // True when `file` holds such a vocabulary: model "llama", scores present and no merges.
  static bool describes(const GgufFile& file);

  // Text -> ids as llama.cpp does: a space is prepended to the text (and after every special token),
  // spaces become U+2581, then score-ordered merges. User-defined tokens are always matched literally,
  // control tokens only when parse_special. BOS first when add_bos.
  std::vector<int32_t> encode(std::string_view text, bool add_bos = false, bool parse_special = true) const;
  // Ids -> text: U+2581 back to spaces, byte tokens to bytes, the leading space the encoder added
  // removed; control tokens dropped unless render_special. Throws Error for an id out of range.
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;
  std::string token_text(int32_t id) const;  // as stored
  // The bytes one token stands for: U+2581 as a space, a byte token as its byte, a control token's text.
  std::string token_piece(int32_t id) const;
  int32_t vocab_size() const { return int32_t(tokens_.size()); }
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  // Bytes per piece of a long text (io/token_pieces.h); tests lower it to cut small texts.
  void set_piece_bytes(size_t bytes) { piece_bytes_ = bytes < 1 ? 1 : bytes; }

 private:
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;

  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<int32_t> types_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<int32_t> byte_ids_ = std::vector<int32_t>(256, -1);
  std::vector<int32_t> special_ids_;  // control and user-defined tokens, longest text first
  int32_t bos_id_ = -1, eos_id_ = -1, unknown_id_ = -1;
  bool add_space_prefix_ = true;
  TokenBytePairs token_pairs_;  // where a long text may be cut: its pieces are encoded one at a time
  size_t piece_bytes_ = size_t(1) << 20;
};

}  // namespace canvas
