// Datastore drafts for draft-and-verify (retrieval drafts, as REST): a tokenized text corpus indexed by a
// suffix array, and the most common continuation of the context's longest n-gram that occurs in it.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace canvas {

class TextTokenizer;

struct DatastoreDraftParams {
  int64_t longest = 5;     // the n-grams tried: the context's last `longest` tokens down to `shortest`
  int64_t shortest = 2;
  int64_t min_count = 10;  // an n-gram drafts only when it occurs at least this often in the corpus
};

// The most tokens a datastore holds: 2^27 (134 million, some 130 times the King James Bible's tokens).
// Its memory is 8 bytes a token (the ids and their suffix array: 1 GiB at the limit), and up to 12 while the
// suffix array is built or checked. A corpus past it is refused with an Error naming the file.
inline constexpr int64_t kMaxDatastoreTokens = int64_t(1) << 27;

class Datastore {
 public:
  // Drafts span at most kSortDepth tokens of n-gram and draft, and an index read back from a cache is checked
  // to be in order that deep (no further: a repetitive corpus would cost its full length a pair). The suffix
  // array built here is in full order; the bound keeps what lookups return whichever index they use.
  static constexpr int32_t kSortDepth = 64;

  // The index over `ids` (a suffix array, built here in O(n): decode/suffix_array.h; index_ms() says how
  // long it took). Throws Error past kMaxDatastoreTokens.
  explicit Datastore(std::vector<int32_t> ids);

  // The corpus of the text file at `path`, tokenized by `tokenize` (no BOS), its ids and their suffix array
  // cached under `cache_dir` (a file named by the key: the file's absolute path, size and modification time,
  // and `tokenizer_identity`), so that a load from the cache neither tokenizes nor sorts. A cache file that
  // is unreadable, damaged, written for another key, larger than the corpus's ids and index can be (refused
  // before it is read), holding an id outside [0, vocab_size) or a suffix array out of order, a link or not
  // a regular file (a FIFO is never opened) is ignored and written again: a temporary renamed over the path,
  // never through what is there. "" for cache_dir: no cache. A cache that cannot be written appends a
  // warning to *warnings (the corpus is still used). Throws Error naming the file when it cannot be read,
  // holds more than kMaxDatastoreTokens tokens, or its index does not fit in memory.
  // `on_tokenize`, when set, is told (with a line to show) before a text is tokenized, which takes seconds
  // a megabyte: a load from the cache says nothing.
  static std::shared_ptr<const Datastore> load(const std::string& path, const std::string& tokenizer_identity,
                                               const std::function<std::vector<int32_t>(const std::string&)>& tokenize,
                                               int64_t vocab_size, const std::string& cache_dir,
                                               std::vector<std::string>* warnings,
                                               const std::function<void(const std::string&)>& on_tokenize = {});
  // The same with a model's tokenizer (its identity: tokenizer_identity()), cached in user_cache_dir() (core/cache_dir.h).
  static std::shared_ptr<const Datastore> load(const std::string& path, const TextTokenizer& tokenizer,
                                               std::vector<std::string>* warnings,
                                               const std::function<void(const std::string&)>& on_tokenize = {});

  // The draft after `context`: for n = longest down to shortest, the context's last n tokens; the first
  // that occurs at least min_count times drafts its most common continuation, token by token (a vote over
  // its occurrences: the most frequent next token, ties to the lower id; the occurrences that agree go on
  // to vote for the next one), up to `length` tokens, fewer where the corpus ends or where the n-gram and
  // the draft reach kSortDepth tokens. Empty when no such n-gram occurs often enough.
  std::vector<int32_t> draft(std::span<const int32_t> context, int64_t length,
                             const DatastoreDraftParams& params = {}) const;

  // How many times `gram` occurs in the corpus (a binary search).
  int64_t count(std::span<const int32_t> gram) const;

  // A set of suffixes: the suffix-array range [first, last). The suffixes are sorted, so those that start
  // with a given gram are one range, and a range is a set of occurrences without a copy of their positions.
  struct Range {
    int64_t first = 0, last = 0;
    int64_t size() const { return last - first; }
  };
  // The suffixes of a range that have one token at an offset.
  struct TokenRun {
    int32_t token = 0;
    Range range;
  };

  // The range of the suffixes that start with `gram` (the whole array for an empty gram). Exact for grams of
  // at most kSortDepth tokens, the depth a cached index is checked to.
  Range range(std::span<const int32_t> gram) const;
  // The suffixes of `range`, which share their first `offset` tokens, split by their token at `offset`:
  // appends one run per distinct token to `runs`, in increasing token order. Sorted suffixes make each
  // token's suffixes one run, whose end a galloping search finds in O(log run size) probes: never a scan of
  // the range (a unigram's holds tens of thousands of suffixes). The suffix that the corpus ends after
  // `offset` tokens is in no run; nothing is appended when offset >= kSortDepth (a cached index's order
  // is checked no deeper).
  void next_token_runs(Range range, int64_t offset, std::vector<TokenRun>& runs) const;

  const std::vector<int32_t>& ids() const { return ids_; }
  // How long the suffix array took: built, or read back and checked (loaded_from_cache(): never sorted).
  double index_ms() const { return index_ms_; }
  bool loaded_from_cache() const { return from_cache_; }
  // The bytes its structures hold (the capacity of the ids and of the suffix array).
  int64_t memory_bytes() const { return int64_t((ids_.capacity() + suffixes_.capacity()) * sizeof(int32_t)); }

 private:
  Datastore() = default;
  std::vector<int32_t> ids_;
  std::vector<int32_t> suffixes_;  // corpus positions, sorted by the suffix that starts at each
  double index_ms_ = 0;
  bool from_cache_ = false;
};

// A tokenizer's identity for cache keys: a hash of its vocabulary (every token's piece) and special ids.
std::string tokenizer_identity(const TextTokenizer& tokenizer);

// Datastore::load with a model's tokenizer as a command reports it: its tokenizing notice (unless `quiet`) and
// its warnings on stderr, each line after "`who`: " ("canvas", "canvas serve").
std::shared_ptr<const Datastore> load_datastore_reporting(const std::string& path, const TextTokenizer& tokenizer,
                                                          const std::string& who, bool quiet);

}  // namespace canvas
