// Text corpora as `canvas train` data: documents from Debian-packaged text (the King James Bible by
// chapter, the fortunes by fortune) or from files, a deterministic held-out split by document, and a
// data source of token windows under a trained (Gemma-style) tokenizer.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/bpe_trainer.h"
#include "train/data.h"

namespace canvas {
class HfTokenizer;
struct HfVocab;
}  // namespace canvas

namespace canvas::train {

// One unit of the split. key = "PART:ID" ("kjv:Ge1", "fortunes:cookie:17", "FILE:3"); text ends with '\n'.
struct CorpusDocument {
  std::string key;
  std::string text;
};

// A corpus spec is a comma-separated list of parts, each one of:
//   kjv (or bible)  the King James Bible from Debian's bible-kjv (`bible -f "Gen1:1-Rev22:21"`): one
//                   document per chapter (1,189), one verse per line, references dropped
//   fortunes        Debian's fortunes package (/usr/share/games/fortunes, every file but ascii-art and
//                   translate-me): one document per fortune
//   PATH            a UTF-8 text file: one document per paragraph (blank lines separate them)
// Documents come in corpus order (the Bible's verse order, the files' order). Throws Error naming the
// part when it cannot be read (e.g. the Debian package is not installed) or holds no document.
std::vector<CorpusDocument> load_corpus(const std::string& spec);
// The parts of a spec, trimmed, in order ("kjv", "fortunes" and file paths as written).
std::vector<std::string> corpus_parts(const std::string& spec);
// The parts of a spec that are text files (not kjv, bible or fortunes), e.g. for commands that must not
// write over their own corpus.
std::vector<std::string> corpus_files(const std::string& spec);
// The documents of one part (a name or a path, as above); fortunes_dir is where the fortune files are.
std::vector<CorpusDocument> load_corpus_part(const std::string& part,
                                             const std::string& fortunes_dir = "/usr/share/games/fortunes");
// The KJV documents from `bible`'s output ("Ge1:1 In the beginning ..." lines); for tests.
std::vector<CorpusDocument> kjv_documents(const std::string& bible_output);
// Fortune documents from one fortune file's text ('%' lines separate them); name goes into the keys.
std::vector<CorpusDocument> fortune_documents(const std::string& name, const std::string& text);

struct CorpusSplit {
  std::vector<CorpusDocument> train, held_out;  // each in corpus order
};
// Holds out round(fraction * n) documents of each part (the part is the key up to its first ':'): those
// whose keys hash lowest (64-bit FNV-1a, ties by key). Deterministic, independent of document order and
// of the other parts, so adding a part never moves another part's split.
CorpusSplit split_corpus(const std::vector<CorpusDocument>& documents, double held_out_fraction);

// Token ids of documents as one stream: per document <bos>, its text encoded without parsing special
// tokens (literal "<eos>" in the text stays text), <eos>.
std::vector<int32_t> corpus_token_stream(const std::vector<CorpusDocument>& documents, const HfTokenizer& tokenizer);

// How well a tokenizer compresses documents (`canvas tokenizer train | eval`): their count, bytes and tokens
// (each encoded alone, without <bos>/<eos>, special-token text left as text), and bytes per token.
struct TokenizationMeasure {
  int64_t documents = 0, bytes = 0, tokens = 0;
  double bytes_per_token() const { return tokens ? double(bytes) / double(tokens) : 0; }
};
TokenizationMeasure measure_tokenization(const std::vector<CorpusDocument>& documents, const HfTokenizer& tokenizer);

// `canvas tokenizer train`: a Gemma-style BPE vocabulary learned from the training split of a corpus
// (split_corpus: the documents `canvas train` holds out are never seen), measured on both splits, with
// the GGUF keys that record how it was made (canvas.tokenizer.corpus, held_out_fraction,
// character_coverage, min_frequency).
struct CorpusTokenizer {
  HfVocab vocab;
  BpeTrainStats stats;
  int64_t training_documents = 0;
  TokenizationMeasure train, held_out;
  double counting_seconds = 0, merging_seconds = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata;
};
CorpusTokenizer train_corpus_tokenizer(const std::string& spec, double held_out_fraction,
                                       const BpeTrainOptions& options);

// The vocabulary a model is trained with: the tokenizer from a GGUF (tokenizer.ggml.*) or a
// tokenizer.json, with its mask id (tokenizer.ggml.mask_token_id, else a special "<mask>" token, else -1).
struct TrainingVocabulary {
  std::shared_ptr<const HfTokenizer> tokenizer;
  std::vector<std::pair<std::string, GgufValue>> metadata;  // written into the trained model
  int32_t mask_id = -1;
};
TrainingVocabulary load_training_vocabulary(const std::string& path);

// A `canvas train` data source (config: task = text, tokenizer = FILE, text_corpus = SPEC): the spec's
// documents split with split_corpus; training examples are seq_len-token windows at uniformly drawn
// offsets of the training stream; validation examples are consecutive windows of the held-out stream (at
// most n_val). Its vocabulary, mask/eos ids and GGUF metadata are the tokenizer's.
std::unique_ptr<DataSource> make_corpus_source(const std::string& spec, const std::string& tokenizer_path,
                                               int64_t seq_len, double held_out_fraction, int64_t n_val);
// The same from documents already loaded (tests).
std::unique_ptr<DataSource> make_corpus_source(const std::vector<CorpusDocument>& documents,
                                               const TrainingVocabulary& vocabulary, int64_t seq_len,
                                               double held_out_fraction, int64_t n_val);

}  // namespace canvas::train
