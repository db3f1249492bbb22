// Learning a Gemma-style vocabulary from text: SentencePiece-style BPE with byte fallback ('▁' for spaces,
// "<0xNN>" byte tokens, Gemma's special-token ids), written as a GGUF "gemma4" vocabulary or a
// Hugging Face tokenizer.json.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "io/gguf.h"
#include "io/hf_tokenizer.h"

namespace canvas {

// The special tokens every trained vocabulary holds, at the ids Gemma uses (docs/diffusiongemma.md):
// canvas's Gemma defaults (EOS ids {1, 106, 50}, pad 0, the chat template's <|turn> / <turn|>) then work
// unchanged. <mask> is Gemma 3's id 4; uniform-state diffusion never uses it, masked diffusion does.
struct SpecialToken {
  int32_t id;
  const char* text;
};
constexpr SpecialToken kGemmaSpecialTokens[] = {
    {0, "<pad>"},   {1, "<eos>"},       {2, "<bos>"},       {3, "<unk>"},       {4, "<mask>"},
    {50, "<|tool_response>"}, {100, "<|channel>"}, {101, "<channel|>"}, {105, "<|turn>"}, {106, "<turn|>"},
};
constexpr int32_t kTrainedMaskId = 4;
// Special tokens and the 256 byte tokens fill ids 0..265 (bytes take the free ids in byte order).
constexpr int32_t kTrainedFixedTokens = 266;

struct BpeTrainOptions {
  int32_t vocab_size = 8192;  // all tokens: specials, bytes, characters, merges
  // Characters, most frequent first, become tokens until they cover this fraction of all character
  // occurrences (SentencePiece's character_coverage); rarer ones are encoded as their UTF-8 bytes.
  double character_coverage = 1.0;
  int64_t min_frequency = 2;  // a pair seen fewer times is never merged (training may stop short)
};

// What training measured, for reports.
struct BpeTrainStats {
  int64_t characters = 0;        // character occurrences in the text
  int64_t distinct_words = 0;    // distinct pre-tokenized words
  int32_t alphabet = 0;          // characters that became tokens
  int32_t merges = 0;            // merges learned
  bool stopped_early = false;    // no pair reached min_frequency before vocab_size
};

// Counts words as text is added (any number of pieces, in any amount); train() then learns the merges.
//
// Words (what training counts; merges never cross them): after ' ' -> '▁', a word is a run of '▁'
// followed by a run of letters, or by a run of punctuation; a run of newlines; a single ASCII digit
// (Gemma splits digits); or a run of '▁' with nothing of those after it. Characters outside the
// alphabet end words and are never merged. Because every merged token has one of those shapes, no merge
// can fire across a word boundary when HfTokenizer encodes the unsplit text, so encoding equals
// word-by-word BPE.
class BpeTrainer {
 public:
  void add_text(std::string_view text);
  // Deterministic: the same text (in any split into add_text calls that does not cut words) and options
  // give the same vocabulary. Throws Error when vocab_size cannot hold the specials, bytes and alphabet.
  HfVocab train(const BpeTrainOptions& options, BpeTrainStats* stats = nullptr) const;

 private:
  std::unordered_map<std::string, int64_t> words_;  // normalized word -> count
  std::unordered_map<uint32_t, int64_t> chars_;     // code point -> count (invalid UTF-8: per byte, 0x110000+)
};

// The trained vocabulary's GGUF metadata: HfTokenizer::gguf_metadata plus tokenizer.ggml.mask_token_id
// (the "<mask>" token, when the vocabulary has one as a special token).
std::vector<std::pair<std::string, GgufValue>> vocab_gguf_metadata(const HfVocab& vocab);
// A vocabulary-only GGUF (no tensors): general.name plus vocab_gguf_metadata plus `extra`.
void write_vocab_gguf(const HfVocab& vocab, const std::string& path,
                      const std::vector<std::pair<std::string, GgufValue>>& extra = {});
// Hugging Face tokenizer.json text for a Gemma-style vocabulary (Gemma's normalizer, pre-tokenizer,
// post-processor and decoder; model BPE with byte_fallback and [left, right] merges; special tokens as
// added_tokens). HfTokenizer::from_json reads it back as the same tokenizer. Throws Error when
// HfTokenizer::gguf_problem names a problem (the layout is Gemma's only).
std::string tokenizer_json_text(const HfVocab& vocab);

}  // namespace canvas
