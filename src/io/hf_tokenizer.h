// SentencePiece-style BPE with byte fallback (the Gemma family), read from a Hugging Face tokenizer.json
// or from GGUF (tokenizer.ggml.model "gemma4" / "llama" with merges): one implementation for both.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "io/bpe_merges.h"
#include "io/token_pieces.h"
#include "io/gguf.h"

namespace canvas {

class GgufFile;
class GgufWriter;

// Everything a vocabulary file says, in one neutral form (both loaders build this, then from_vocab).
struct HfVocab {
  // Token text by id, as stored (spaces written as U+2581, byte tokens as "<0xNN>").
  std::vector<std::string> tokens;
  enum class Kind : uint8_t {
    Normal,   // produced by BPE
    Byte,     // "<0xNN>": one raw byte
    Special,  // an added token with special = true (control): matched literally, dropped by decode
    Added,    // an added token with special = false (user defined): matched literally, always rendered
    Unknown,  // the unknown token (special in Gemma: matched literally, dropped by decode)
  };
  std::vector<Kind> kinds;  // per token
  // Added tokens only (Special/Added/Unknown): true = matched in the normalized text (Hugging Face's
  // "normalized": true), false = matched in the raw text before normalization. Other tokens: ignored.
  std::vector<bool> normalized;
  std::vector<std::pair<std::string, std::string>> merges;  // by rank: (left, right)
  // Normalizer: literal replacements applied in order ({" ", "\u2581"} for Gemma). decode applies the
  // reverse replacements, in reverse order, to every non-special token's text.
  std::vector<std::pair<std::string, std::string>> replacements;
  // Pre-tokenizer: literal-pattern splits applied in order to the normalized text. behavior is one of
  // "Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous" (Hugging Face's names).
  std::vector<std::pair<std::string, std::string>> splits;  // (pattern, behavior)
  bool byte_fallback = true;
  bool fuse_unknown = true;    // consecutive unknown characters become one unknown token
  bool ignore_merges = false;  // a word that is itself in the vocabulary is taken whole
  int32_t unknown_id = -1, bos_id = -1, eos_id = -1, pad_id = -1;
  bool add_bos = false;
};

// The tokenizer.json a path names: the file itself (a *.json other than config.json), the tokenizer.json in
// a directory, or the one beside a config.json (Error when that one is missing); "" for anything else (a
// GGUF). The one rule by which every tokenizer loader tells a tokenizer.json from a GGUF.
std::string tokenizer_json_path(const std::string& path);

class HfTokenizer {
 public:
  // Reads a tokenizer.json: model.type must be "BPE" (continuing_subword_prefix / end_of_word_suffix
  // unset, dropout null or 0); model.vocab (token -> id, ids dense from 0 together with added_tokens),
  // model.merges ("left right" strings or [left, right] pairs), model.byte_fallback, fuse_unk,
  // ignore_merges, unk_token; added_tokens (id, content, special, normalized; lstrip/rstrip/single_word
  // are not implemented and must be false); normalizer null / "Replace" with a String pattern / a
  // "Sequence" of them; pre_tokenizer null / "Split" with a String pattern and invert false / a
  // "Sequence" of them; post_processor "TemplateProcessing" whose single template starts with a special
  // token sets bos and add_bos. The decoder section is not read: decode reverses the normalizer's
  // replacements and turns byte tokens into bytes (which is what Gemma's Replace + ByteFallback + Fuse
  // decoder does). bos/eos/pad ids are the tokens "<bos>", "<eos>", "<pad>" when present. Anything else
  // (another model type, a Regex pattern, an unknown normalizer) gives Error naming the file and key.
  static HfTokenizer from_json(const std::string& path);
  // The same from JSON text; `origin` names it in errors.
  static HfTokenizer from_json_text(std::string_view text, const std::string& origin);
  // What from_json reads, before indexing: from_json(path) == from_vocab(vocab_from_json(path)). The
  // vocabulary is parsed and checked as from_json does, but not validated by from_vocab. For converters.
  static HfVocab vocab_from_json(const std::string& path);
  static HfVocab vocab_from_json_text(std::string_view text, const std::string& origin);
  // Reads tokenizer.ggml.{model,tokens,token_type,merges,bos_token_id,eos_token_id,padding_token_id,
  // unknown_token_id,add_bos_token}; model must be "gemma4" or "llama" and merges must be present (scores
  // are ignored). token_type 3 (control) -> Special, 4 (user defined) -> Added (matched in normalized
  // text), 2 -> Unknown, 6 -> Byte, others -> Normal. The normalizer is Gemma's: ' ' -> U+2581, no
  // dummy prefix, no split; byte fallback on.
  static HfTokenizer from_gguf(const GgufFile& file);
  // What from_gguf reads, before indexing: from_gguf(file) == from_vocab(vocab_from_gguf(file)). For
  // exporting a GGUF vocabulary as tokenizer.json.
  static HfVocab vocab_from_gguf(const GgufFile& file);
  // A vocabulary file picked by tokenizer_json_path: a tokenizer.json, or else a GGUF (tokenizer.ggml.*,
  // read by vocab_from_gguf). mask_id, when given, receives a GGUF's tokenizer.ggml.mask_token_id (-1 when absent or
  // for a tokenizer.json, which names no mask).
  static HfVocab vocab_from_file(const std::string& path, int32_t* mask_id = nullptr);
  // from_vocab(vocab_from_file(path)), with the file named in errors.
  static HfTokenizer from_file(const std::string& path);
  // Validates and indexes a vocabulary. Throws Error for inconsistent arrays, an id out of range, a
  // merge whose parts or result are not tokens (Hugging Face refuses such files too), an unknown split
  // behavior, or an empty replacement pattern. A repeated merge keeps its first (lowest) rank.
  static HfTokenizer from_vocab(HfVocab vocab);
  // Why `vocab` cannot be written as the GGUF twin that from_gguf reads back as the same tokenizer, or ""
  // when it can. from_gguf's rules are fixed (Gemma's): the normalizer ' ' -> U+2581 and nothing else, no
  // pre-tokenizer split that can match (a split on ' ' never matches once spaces are replaced), byte
  // fallback and fuse_unknown on, ignore_merges off, special tokens matched in the raw text and
  // user-defined ones in the normalized text (a token whose text holds neither ' ' nor U+2581 matches the
  // same either way), and merges as "left right" strings that split back into the same pair.
  static std::string gguf_problem(const HfVocab& vocab);
  // Writes `vocab` as tokenizer.ggml.{model ("gemma4"), tokens, token_type, merges, scores (placeholders,
  // 0), bos_token_id, eos_token_id, padding_token_id, unknown_token_id (those that exist), add_bos_token}.
  // Throws Error, before writing anything, when from_vocab refuses the vocabulary or gguf_problem names a
  // problem.
  static void write_gguf(const HfVocab& vocab, GgufWriter& out);
  // The key/value pairs write_gguf writes, in its order (e.g. to add them to a model's metadata); same
  // checks.
  static std::vector<std::pair<std::string, GgufValue>> gguf_metadata(const HfVocab& vocab);

  // Text -> ids. Added tokens written literally in the text are matched first (leftmost, then longest)
  // when parse_special; everything between them is normalized, split, and BPE-encoded, with characters
  // missing from the vocabulary falling back to byte tokens (or the unknown token). Invalid UTF-8 bytes
  // are encoded as byte tokens. Prepends bos when add_bos (and a bos exists), whatever the file says.
  std::vector<int32_t> encode(std::string_view text, bool add_bos = false, bool parse_special = true) const;
  // Ids -> text: pieces concatenated, byte tokens as raw bytes (a sequence that is not valid UTF-8 is
  // kept as those bytes), special tokens rendered as their text when render_special, else dropped.
  // decode(encode(s)) == s for any string s without U+2581 (which decodes as a space, as in Hugging
  // Face) and without added tokens' text (which decode drops unless render_special).
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;
  // What one token decodes to (specials: their text), for live views.
  std::string token_piece(int32_t id) const;
  const std::string& token_text(int32_t id) const;  // as stored
  int32_t token_id(std::string_view text) const;    // -1 when absent

  int32_t vocab_size() const { return int32_t(tokens_.size()); }
  // Bytes per piece of a long word (encode_long_word); tests lower it to cut small texts.
  void set_piece_bytes(size_t bytes) { piece_bytes_ = std::max<size_t>(bytes, 1); }
  int32_t bos_id() const { return bos_id_; }  // -1 when absent
  int32_t eos_id() const { return eos_id_; }
  int32_t pad_id() const { return pad_id_; }
  int32_t unknown_id() const { return unknown_id_; }
  bool add_bos() const { return add_bos_; }  // what the file asks for (encode takes an explicit flag)
  HfVocab::Kind kind(int32_t id) const;
  bool is_special(int32_t id) const;  // Special or Unknown: dropped by decode unless render_special
  size_t merge_count() const { return merges_.size(); }

 private:
  // Literal matcher over a set of token ids: leftmost match, longest at one position.
  struct Matcher {
    std::array<std::vector<int32_t>, 256> by_first_byte;  // ids, longest text first
    bool empty = true;
  };
  template <class OnText, class OnToken>
  void split_added(std::string_view text, const Matcher& matcher, OnText on_text, OnToken on_token) const;
  void encode_raw_span(std::string_view span, bool parse_special, std::vector<int32_t>& out) const;
  void encode_normalized_span(std::string_view span, std::vector<int32_t>& out) const;
  // whole_word_lookup: with ignore_merges, a word that is a token is taken whole (not for a piece of one).
  void encode_word(std::string_view word, std::vector<int32_t>& out, bool whole_word_lookup = true) const;
  // A word longer than piece_bytes_ (a corpus without pre-tokenizer splits is one word) is encoded in
  // pieces cut where no token can span the cut, so that its merges, and the memory they take, stay
  // local; the ids are those of the whole word.
  void encode_long_word(std::string_view word, std::vector<int32_t>& out) const;
  int32_t char_id(std::string_view ch) const;

  std::vector<std::string> tokens_;
  std::vector<HfVocab::Kind> kinds_;
  std::vector<std::string> pieces_;  // decoded text of each token
  std::unordered_map<std::string, int32_t> token_to_id_;
  BpeMerges merges_;
  std::array<int32_t, 256> byte_token_{};       // byte -> "<0xNN>" id, -1 if none
  std::array<int32_t, 128> ascii_token_{};      // ASCII char -> its token id, -1 if none (fast path)
  Matcher raw_added_, normalized_added_;
  std::vector<std::pair<std::string, std::string>> replacements_;
  std::vector<std::pair<std::string, std::string>> splits_;
  bool byte_fallback_ = true, fuse_unknown_ = true, ignore_merges_ = false;
  int32_t unknown_id_ = -1, bos_id_ = -1, eos_id_ = -1, pad_id_ = -1;
  bool add_bos_ = false;
  TokenBytePairs token_pairs_;  // where a long word may be cut (encode_long_word)
  size_t piece_bytes_ = size_t(1) << 20;
};

}  // namespace canvas
