// Training text in a model's own vocabulary: the tokenizer of the model a run starts from (a GGUF's, or a
// Hugging Face directory's tokenizer.json), and windows of its token ids.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/gguf.h"
#include "train/data.h"

namespace canvas::train {

struct ModelTokenizer {
  std::function<std::vector<int32_t>(std::string_view)> encode;
  int64_t tokens = 0;  // the tokenizer's vocabulary (a checkpoint's embedding may have more rows: padding)
  // The tokenizer as GGUF metadata, for the models the run exports (empty when the source has none the
  // GGUF form holds).
  std::vector<std::pair<std::string, GgufValue>> gguf_metadata;
};

// The tokenizer of the model at `path` (what Model::load reads). Throws Error naming the path when it
// has none.
ModelTokenizer load_model_tokenizer(const std::string& path);

// What a token source reports as its vocabulary (DataSource's vocab_size, mask_token, eos_token,
// tokenizer_metadata); the defaults are canvas's bytes.
struct TokenVocabulary {
  int32_t vocab = kByteVocab, mask_token = kByteMask, eos_token = kByteEos;
  bool bytes = true;  // tokenizer_metadata: byte_tokenizer_metadata, else `metadata` (may be empty)
  std::vector<std::pair<std::string, GgufValue>> metadata;
};

// Windows of seq_len token ids from `ids`; the last val_fraction is held out and cut into consecutive
// validation windows (at most n_val), as make_text_source does with bytes.
std::unique_ptr<DataSource> make_token_text_source(std::vector<int32_t> ids, int64_t seq_len, double val_fraction,
                                                   int64_t n_val, TokenVocabulary vocabulary = {});

}  // namespace canvas::train
