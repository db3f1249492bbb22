// Byte-level BPE vocabularies (GPT-2, Llama 3, Qwen2 style: LLaDA, Dream, LLaDA-MoE) as Hugging Face
// tokenizer.json: read into the GGUF tokenizer's arrays, and written back from them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace canvas {

class GgufFile;
class Tokenizer;

// The arrays tokenizer.ggml.* holds for a "gpt2" (byte-level BPE) tokenizer.
struct BpeVocab {
  std::string pre;                   // tokenizer.ggml.pre: "gpt2", "llama-bpe", "smaug-bpe" or "qwen2"
  std::vector<std::string> tokens;   // by id, in the byte-level alphabet
  std::vector<int32_t> token_types;  // 1 normal, 3 control (special added token), 4 user defined, 5 unused
  std::vector<std::string> merges;   // "left right", by rank
  bool add_bos = false;
};

// True when the tokenizer.json at `path` is byte-level BPE (a ByteLevel pre-tokenizer or decoder), the
// kind bpe_vocab_from_json reads; false for other kinds (e.g. Gemma's SentencePiece-style BPE). A file
// that is not JSON gives Error naming it.
bool is_byte_level_tokenizer_json(const std::string& path);

// Reads a byte-level tokenizer.json: model.type "BPE" with vocab and merges ("left right" strings or
// [left, right] pairs), added_tokens (special -> control, else user defined), a pre-tokenizer that is
// ByteLevel with use_regex (GPT-2's rules) or a Sequence of one Split with the Llama 3 or Qwen2 regex
// (behavior Isolated) and a ByteLevel without regex; normalizer null or NFC. Ids missing from the file
// below `min_size` are filled with unused "[PADn]" tokens (checkpoints pad their vocabulary). Throws
// Error naming the file and the key for anything else (another pre-tokenizer regex, gaps in the ids, a
// normalizer that changes text).
BpeVocab bpe_vocab_from_json(const std::string& path, int64_t min_size = 0);

// A byte-level tokenizer.json as a Tokenizer (io/tokenizer.h), with the special ids a model's config
// gives (-1: none; the mask id is also looked up as the added token "<|mdm_mask|>" when -1). Errors as
// bpe_vocab_from_json, and Tokenizer::from_vocab's.
Tokenizer bpe_tokenizer_from_json(const std::string& path, int32_t bos = -1, int32_t eos = -1, int32_t pad = -1,
                                  int32_t mask = -1);

// The tokenizer.json text for a GGUF's "gpt2" tokenizer (tokenizer.ggml.{pre,tokens,token_type,merges}):
// control and user-defined tokens become added_tokens; unused padding tokens are left out. Throws Error
// naming the key when the GGUF has another tokenizer model or a pre-tokenizer canvas cannot name as a
// regex.
std::string bpe_json_from_gguf(const GgufFile& file);

}  // namespace canvas
