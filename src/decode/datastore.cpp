// Datastore drafts: a tokenized corpus (cached), its suffix array, and the voted continuation of an n-gram.
#include "decode/datastore.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <new>
#include <ostream>
#include <system_error>

#include "core/cache_dir.h"
#include "core/error.h"
#include "core/output_file.h"
#include "core/timer.h"
#include "decode/suffix_array.h"
#include "io/input_file.h"
#include "io/text_tokenizer.h"

namespace canvas {

namespace {

// The cache file: magic, the key, the ids, their suffix array and a checksum of both (native byte order:
// a cache belongs to one machine). The magic names the layout, so a file of an older one is rewritten.
constexpr char kMagic[8] = {'C', 'N', 'V', 'D', 'S', 'S', 'A', '1'};

uint64_t fnv1a(const void* data, size_t bytes, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

uint64_t cache_checksum(const std::vector<int32_t>& ids, const std::vector<int32_t>& suffixes) {
  return fnv1a(suffixes.data(), suffixes.size() * sizeof(int32_t), fnv1a(ids.data(), ids.size() * sizeof(int32_t)));
}

// The cache file's size for `tokens` ids written under `key`.
uint64_t cache_size(const std::string& key, uint64_t tokens) {
  return sizeof kMagic + 8 + key.size() + 8 + tokens * 2 * sizeof(int32_t) + 8;
}

// Writes the cache file straight from the structures (no copy of them in a string).
void write_cache(const std::string& file, const std::string& key, const std::vector<int32_t>& ids,
                 const std::vector<int32_t>& suffixes) {
  write_file(
      file,
      [&](std::ostream& out) {
        auto put64 = [&](uint64_t v) { out.write(reinterpret_cast<const char*>(&v), sizeof v); };
        out.write(kMagic, sizeof kMagic);
        put64(key.size());
        out << key;
        put64(ids.size());
        out.write(reinterpret_cast<const char*>(ids.data()), std::streamsize(ids.size() * sizeof(int32_t)));
        out.write(reinterpret_cast<const char*>(suffixes.data()), std::streamsize(suffixes.size() * sizeof(int32_t)));
        put64(cache_checksum(ids, suffixes));
      },
      FileOwner::Canvas);  // whatever is there (a link, a FIFO) is replaced
}

// The ids and suffix array of a cache file written for `key`, of a corpus of `corpus_bytes` and a
// vocabulary of `vocab_size`; false when it is missing, not a regular file (a link, a FIFO: never opened),
// larger than the corpus's ids and index can be (one token per byte at most: refused before it is read),
// not exactly the size its count says (checked before anything is allocated), damaged, for another key,
// holding an id outside the vocabulary, or a suffix array that is not the corpus's positions in order. The
// file is untrusted input: anyone who can write the cache folder can put anything there.
bool read_cache(const std::string& file, const std::string& key, uint64_t corpus_bytes, int64_t vocab_size,
                std::vector<int32_t>& ids, std::vector<int32_t>& suffixes) {
  std::error_code ec;
  if (std::filesystem::symlink_status(file, ec).type() != std::filesystem::file_type::regular) return false;
  try {
    const uint64_t most_tokens = std::min<uint64_t>(corpus_bytes, kMaxCorpusBytes) + 16;
    RegularFileReader in(file, size_t(cache_size(key, most_tokens)), "datastore cache", "the corpus's size");
    char magic[sizeof kMagic];
    uint64_t key_bytes = 0, count = 0, checksum = 0;
    if (!in.read_exact(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof kMagic) != 0) return false;
    if (!in.read_exact(&key_bytes, sizeof key_bytes) || key_bytes != key.size()) return false;
    std::string stored(key.size(), '\0');
    if (!in.read_exact(stored.data(), stored.size()) || stored != key) return false;
    if (!in.read_exact(&count, sizeof count) || count > most_tokens || cache_size(key, count) != in.size())
      return false;
    ids.resize(size_t(count));
    suffixes.resize(size_t(count));
    const size_t bytes = size_t(count) * sizeof(int32_t);
    if (!in.read_exact(ids.data(), bytes) || !in.read_exact(suffixes.data(), bytes) ||
        !in.read_exact(&checksum, sizeof checksum) || checksum != cache_checksum(ids, suffixes) ||
        std::any_of(ids.begin(), ids.end(), [vocab_size](int32_t id) { return id < 0 || id >= vocab_size; }) ||
        !suffixes_are_sorted(ids, suffixes, Datastore::kSortDepth)) {
      ids.clear();
      suffixes.clear();
      return false;
    }
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

}  // namespace

Datastore::Datastore(std::vector<int32_t> ids) : ids_(std::move(ids)) {
  check(int64_t(ids_.size()) <= kMaxDatastoreTokens,
        "a datastore of " + std::to_string(ids_.size()) + " tokens: more than kMaxDatastoreTokens (" +
            std::to_string(kMaxDatastoreTokens) + ")");
  const double t0 = now_ms();
  suffixes_ = suffix_array(ids_);
  index_ms_ = now_ms() - t0;
}

Datastore::Range Datastore::range(std::span<const int32_t> gram) const {
  const int64_t n = int64_t(ids_.size()), g = int64_t(gram.size());
  // -1, 0, 1: the suffix at `pos` (its first g tokens) before, starting with, after the gram.
  auto order = [&](int32_t pos) {
    const int64_t m = std::min<int64_t>(g, n - pos);
    for (int64_t i = 0; i < m; ++i)
      if (ids_[size_t(pos + i)] != gram[size_t(i)]) return ids_[size_t(pos + i)] < gram[size_t(i)] ? -1 : 1;
    return m < g ? -1 : 0;  // a suffix shorter than the gram that starts like it sorts before it
  };
  const auto first = std::partition_point(suffixes_.begin(), suffixes_.end(), [&](int32_t p) { return order(p) < 0; });
  const auto last = std::partition_point(first, suffixes_.end(), [&](int32_t p) { return order(p) == 0; });
  return {first - suffixes_.begin(), last - suffixes_.begin()};
}

int64_t Datastore::count(std::span<const int32_t> gram) const {
  return range(gram).size();
}

void Datastore::next_token_runs(Range range, int64_t offset, std::vector<TokenRun>& runs) const {
  if (offset < 0 || offset >= kSortDepth) return;
  const int64_t n_ids = int64_t(ids_.size());
  // A suffix that ends at `offset` sorts before the longer ones that share its tokens (at most one: its
  // position is n_ids - offset).
  int64_t i = range.first;
  while (i < range.last && suffixes_[size_t(i)] + offset >= n_ids) ++i;
  auto at = [&](int64_t k) { return ids_[size_t(suffixes_[size_t(k)] + offset)]; };
  while (i < range.last) {
    const int32_t token = at(i);
    // The run's end by a galloping search (probes 1, 2, 4, ... past the run's start, then a binary search in
    // the last step): a run of r suffixes costs O(log r) probes however large the range, and a common token's
    // range is mostly short runs.
    int64_t inside = i, probe = i + 1;  // the run ends in (inside, probe]
    for (int64_t step = 1; probe < range.last && at(probe) == token; step *= 2) {
      inside = probe;
      probe = std::min(range.last, inside + step);
    }
    const int64_t next = std::partition_point(suffixes_.begin() + inside + 1, suffixes_.begin() + probe,
                                              [&](int32_t p) { return ids_[size_t(p + offset)] <= token; }) -
                         suffixes_.begin();
    runs.push_back({token, {i, next}});
    i = next;
  }
}

std::vector<int32_t> Datastore::draft(std::span<const int32_t> context, int64_t length,
                                      const DatastoreDraftParams& params) const {
  const int64_t L = int64_t(context.size());
  if (length < 1 || params.shortest < 1) return {};
  for (int64_t n = std::min(params.longest, L); n >= params.shortest; --n) {
    Range occurrences = range(context.subspan(size_t(L - n)));
    if (occurrences.size() < std::max<int64_t>(1, params.min_count)) continue;
    // The occurrences vote for the next token; those that agree with the winner (the longest run, ties to the
    // lower id) go on to vote for the one after.
    std::vector<int32_t> draft;
    std::vector<TokenRun> runs;
    for (int64_t offset = n; int64_t(draft.size()) < length; ++offset) {
      runs.clear();
      next_token_runs(occurrences, offset, runs);
      if (runs.empty()) break;
      const TokenRun* best = &runs[0];
      for (const TokenRun& run : runs)
        if (run.range.size() > best->range.size()) best = &run;
      draft.push_back(best->token);
      occurrences = best->range;
    }
    return draft;
  }
  return {};
}

std::shared_ptr<const Datastore> Datastore::load(const std::string& path, const std::string& tokenizer_identity,
                                                 const std::function<std::vector<int32_t>(const std::string&)>& tokenize,
                                                 int64_t vocab_size, const std::string& cache_dir,
                                                 std::vector<std::string>* warnings,
                                                 const std::function<void(const std::string&)>& on_tokenize) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec);
  const uintmax_t size = fs::file_size(path, ec);
  check(!ec, "--draft-datastore " + path + ": " + (ec ? ec.message() : ""));
  const auto mtime = fs::last_write_time(path, ec);
  check(!ec, "--draft-datastore " + path + ": " + (ec ? ec.message() : ""));
  const std::string key = absolute.string() + "\n" + std::to_string(size) + "\n" +
                          std::to_string(int64_t(mtime.time_since_epoch().count())) + "\n" + tokenizer_identity;
  std::string file;
  if (!cache_dir.empty()) {
    char name[64];
    std::snprintf(name, sizeof name, "datastore-%016llx.ids", (unsigned long long)fnv1a(key.data(), key.size()));
    file = (fs::path(cache_dir) / name).string();
    const double t0 = now_ms();
    std::shared_ptr<Datastore> store(new Datastore());
    if (read_cache(file, key, size, vocab_size, store->ids_, store->suffixes_)) {
      store->index_ms_ = now_ms() - t0;
      // Used now: the cache folder's eviction (bound_cache_dir) removes the least recently used first.
      ::utimensat(AT_FDCWD, file.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
      store->from_cache_ = true;
      return store;
    }
  }
  // Out of memory here is the corpus's doing: say so, naming it, instead of the generic message.
  std::shared_ptr<Datastore> store;
  if (on_tokenize) {
    char line[512];
    std::snprintf(line, sizeof line, "tokenizing %s (%.1f MB) for --draft-datastore; once: the ids are cached%s%s",
                  path.c_str(), double(size) / 1e6, file.empty() ? "" : " in ", file.empty() ? "" : cache_dir.c_str());
    on_tokenize(line);
  }
  const double t0 = now_ms();
  try {
    std::vector<int32_t> ids =
        tokenize(read_regular_file_bounded(path, kMaxCorpusBytes, "--draft-datastore file", "kMaxCorpusBytes"));
    check(int64_t(ids.size()) <= kMaxDatastoreTokens,
          "--draft-datastore " + path + " holds " + std::to_string(ids.size()) +
              " tokens, more than a datastore's limit of " + std::to_string(kMaxDatastoreTokens) +
              " (kMaxDatastoreTokens: 8 bytes of memory a token, 1 GiB): give a shorter text");
    store = std::make_shared<Datastore>(std::move(ids));
    if (on_tokenize) {
      char line[160];
      std::snprintf(line, sizeof line, "tokenized and indexed %lld tokens in %.1f s",
                    (long long)store->ids_.size(), (now_ms() - t0) / 1000.0);
      on_tokenize(line);
    }
  } catch (const std::bad_alloc&) {
    throw Error("--draft-datastore " + path + " (" + std::to_string(size) +
                " bytes of text) does not fit in this machine's memory: a datastore takes about 8 bytes a token "
                "(12 while its index is built) besides what tokenizing its text takes; give a shorter text");
  }
  if (!file.empty()) {
    try {
      fs::create_directories(cache_dir, ec);
      write_cache(file, key, store->ids_, store->suffixes_);
      // Every version of a changing corpus writes a file of its own: the folder is bounded, least recently
      // used first.
      bound_cache_dir(cache_dir, kCacheDirMaxBytes, kCacheDirMaxFiles, file);
    } catch (const std::exception& e) {
      if (warnings) warnings->push_back(std::string("--draft-datastore's token cache was not written: ") + e.what());
    }
  }
  return store;
}

std::shared_ptr<const Datastore> Datastore::load(const std::string& path, const TextTokenizer& tokenizer,
                                                 std::vector<std::string>* warnings,
                                                 const std::function<void(const std::string&)>& on_tokenize) {
  return load(
      path, tokenizer_identity(tokenizer),
      [&](const std::string& text) { return tokenizer.encode(text, /*add_bos=*/false, /*parse_special=*/false); },
      tokenizer.vocab_size(), user_cache_dir(), warnings, on_tokenize);
}

std::shared_ptr<const Datastore> load_datastore_reporting(const std::string& path, const TextTokenizer& tokenizer,
                                                          const std::string& who, bool quiet) {
  std::vector<std::string> warnings;
  std::shared_ptr<const Datastore> store = Datastore::load(path, tokenizer, &warnings, [&](const std::string& line) {
    if (!quiet) std::fprintf(stderr, "%s: %s\n", who.c_str(), line.c_str());
  });
  for (const std::string& w : warnings) std::fprintf(stderr, "%s: warning: %s\n", who.c_str(), w.c_str());
  return store;
}

std::string tokenizer_identity(const TextTokenizer& tokenizer) {
  uint64_t h = fnv1a(nullptr, 0);
  const int64_t vocab = tokenizer.vocab_size();
  for (int64_t id = 0; id < vocab; ++id) {
    const std::string piece = tokenizer.token_piece(int32_t(id));
    h = fnv1a(piece.data(), piece.size(), h);
    h = fnv1a("\0", 1, h);
  }
  char out[96];
  std::snprintf(out, sizeof out, "vocab %lld bos %d/%d pieces %016llx", (long long)vocab, int(tokenizer.bos_id()),
                int(tokenizer.wants_bos()), (unsigned long long)h);
  return out;
}

}  // namespace canvas
