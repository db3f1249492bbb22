// Training data: the source interface, the byte-level vocabulary, and byte-level text windows.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "io/gguf.h"
#include "train/objectives.h"

namespace canvas::train {

// Byte-level vocabulary shared by canvas's own models: ids 0..255 are bytes, then these specials.
constexpr int32_t kByteEos = 256;
constexpr int32_t kByteMask = 257;
constexpr int32_t kByteVocab = 258;
// GGUF tokenizer metadata for that vocabulary (GPT-2 byte alphabet, no merges), so that every canvas
// command can encode and decode text for the model. Id 257 stays in the vocabulary either way; only a
// masked-diffusion model names it as its mask token.
std::vector<std::pair<std::string, GgufValue>> byte_tokenizer_metadata(bool with_mask_token = true);

class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual Example sample(Rng& rng) const = 0;            // one training example
  virtual const std::vector<Example>& validation() const = 0;
  virtual int64_t sequence_length() const = 0;
  // The vocabulary of the examples' ids; the defaults are canvas's byte vocabulary (train/corpus.h's
  // source has a trained tokenizer's).
  virtual int32_t vocab_size() const { return kByteVocab; }
  virtual int32_t mask_token() const { return kByteMask; }
  virtual int32_t eos_token() const { return kByteEos; }
  virtual std::vector<std::pair<std::string, GgufValue>> tokenizer_metadata(bool with_mask_token) const {
    return byte_tokenizer_metadata(with_mask_token);
  }
};

// Windows of seq_len bytes from a text; the last val_fraction of the text is held out and cut into
// consecutive validation windows (at most n_val).
std::unique_ptr<DataSource> make_text_source(const std::string& text, int64_t seq_len, double val_fraction,
                                             int64_t n_val);

// "bible" (Debian's bible-kjv: every verse, text only, one per line) or a path to a text file.
std::string load_text_corpus(const std::string& name);

}  // namespace canvas::train
