// Datastore drafts: a tokenized corpus (cached), its suffix array, and the voted continuation of an n-gram.
#include "decode/datastore.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/cache_dir.h"
#include "core/error.h"
#include "core/output_file.h"
#include "core/timer.h"
#include "io/input_file.h"
#include "io/text_tokenizer.h"

namespace canvas {

namespace {

constexpr char kMagic[8] = {'C', 'N', 'V', 'D', 'S', 'I', 'D', '1'};

uint64_t fnv1a(const void* data, size_t bytes, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// The cache file's bytes: magic, the key, the ids and a checksum of them.
std::string cache_bytes(const std::string& key, const std::vector<int32_t>& ids) {
  std::string out(kMagic, sizeof kMagic);
  auto put64 = [&](uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put64(key.size());
  out += key;
  put64(ids.size());
  out.append(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int32_t));
  put64(fnv1a(ids.data(), ids.size() * sizeof(int32_t)));
  return out;
}

// The ids of a cache file written for `key`, of a corpus of `corpus_bytes` and a vocabulary of `vocab_size`;
// false when it is missing, not a regular file (a link, a FIFO: never opened), larger than the corpus's ids
// can be (one per byte: refused before it is read), damaged, for another key, or holding an id outside the
// vocabulary. The file is untrusted input: anyone who can write the cache folder can put anything there.
bool read_cache(const std::string& file, const std::string& key, uint64_t corpus_bytes, int64_t vocab_size,
                std::vector<int32_t>& ids) {
  std::error_code ec;
  if (std::filesystem::symlink_status(file, ec).type() != std::filesystem::file_type::regular) return false;
  std::string bytes;
  try {
    const uint64_t most_ids = std::min<uint64_t>(corpus_bytes, kMaxCorpusBytes) + 16;
    bytes = read_regular_file_bounded(file, size_t(most_ids * sizeof(int32_t) + key.size() + 32 + sizeof kMagic),
                                      "datastore token cache", "the corpus's size");
  } catch (const std::exception&) {
    return false;
  }
  size_t at = 0;
  auto get64 = [&](uint64_t& v) {
    if (bytes.size() - at < sizeof v) return false;
    std::memcpy(&v, bytes.data() + at, sizeof v);
    at += sizeof v;
    return true;
  };
  if (bytes.size() < sizeof kMagic || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) return false;
  at = sizeof kMagic;
  uint64_t key_bytes = 0, count = 0, checksum = 0;
  if (!get64(key_bytes) || bytes.size() - at < key_bytes || bytes.compare(at, key_bytes, key) != 0 ||
      key_bytes != key.size())
    return false;
  at += key_bytes;
  if (!get64(count) || count > (bytes.size() - at) / sizeof(int32_t)) return false;
  ids.resize(size_t(count));
  std::memcpy(ids.data(), bytes.data() + at, size_t(count) * sizeof(int32_t));
  at += size_t(count) * sizeof(int32_t);
  if (!get64(checksum) || at != bytes.size() || checksum != fnv1a(ids.data(), ids.size() * sizeof(int32_t)) ||
      std::any_of(ids.begin(), ids.end(), [vocab_size](int32_t id) { return id < 0 || id >= vocab_size; })) {
    ids.clear();
    return false;
  }
  return true;
}

}  // namespace

Datastore::Datastore(std::vector<int32_t> ids) : ids_(std::move(ids)) {
  check(ids_.size() < size_t(INT32_MAX), "a datastore holds fewer than 2^31 tokens");
  const double t0 = now_ms();
  const int32_t n = int32_t(ids_.size());
  suffixes_.resize(size_t(n));
  for (int32_t i = 0; i < n; ++i) suffixes_[size_t(i)] = i;
  const int32_t* data = ids_.data();
  // Plain comparison sort of the suffixes, to a depth of kSortDepth tokens (suffixes equal that far keep
  // their positions' order): natural text's suffixes differ within a few tokens, so this is n log n
  // comparisons of a few tokens each (145 ms for the 959k-token KJV training split), and a corpus of one
  // passage repeated costs at most kSortDepth tokens a comparison instead of the passage's length.
  std::sort(suffixes_.begin(), suffixes_.end(), [data, n](int32_t a, int32_t b) {
    const int32_t la = n - a, lb = n - b, m = std::min({la, lb, kSortDepth});
    for (int32_t i = 0; i < m; ++i)
      if (data[a + i] != data[b + i]) return data[a + i] < data[b + i];
    return m == kSortDepth ? a < b : la < lb;
  });
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
                                                 std::vector<std::string>* warnings) {
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
    std::vector<int32_t> ids;
    if (read_cache(file, key, size, vocab_size, ids)) {
      // Used now: the cache folder's eviction (bound_cache_dir) removes the least recently used first.
      ::utimensat(AT_FDCWD, file.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
      auto store = std::make_shared<Datastore>(std::move(ids));
      store->from_cache_ = true;
      return store;
    }
  }
  std::vector<int32_t> ids =
      tokenize(read_regular_file_bounded(path, kMaxCorpusBytes, "--draft-datastore file", "kMaxCorpusBytes"));
  if (!file.empty()) {
    try {
      fs::create_directories(cache_dir, ec);
      write_file(file, cache_bytes(key, ids), FileOwner::Canvas);  // whatever is there (a link, a FIFO) is replaced
      // Every version of a changing corpus writes a file of its own: the folder is bounded, least recently
      // used first.
      bound_cache_dir(cache_dir, kCacheDirMaxBytes, kCacheDirMaxFiles, file);
    } catch (const std::exception& e) {
      if (warnings) warnings->push_back(std::string("--draft-datastore's token cache was not written: ") + e.what());
    }
  }
  return std::make_shared<Datastore>(std::move(ids));
}

std::shared_ptr<const Datastore> Datastore::load(const std::string& path, const TextTokenizer& tokenizer,
                                                 std::vector<std::string>* warnings) {
  return load(
      path, tokenizer_identity(tokenizer),
      [&](const std::string& text) { return tokenizer.encode(text, /*add_bos=*/false, /*parse_special=*/false); },
      tokenizer.vocab_size(), user_cache_dir(), warnings);
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
