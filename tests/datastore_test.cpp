// Datastore drafts (decode/datastore.h): the n-gram that drafts (the longest with enough occurrences), the
// vote over its continuations, the suffix array against brute force, and the token cache (reused, and
// rewritten when the text, the tokenizer or the cache file itself changed).
#include "decode/datastore.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <thread>

#include "core/cache_dir.h"
#include "core/error.h"
#include "decode/suffix_array.h"
#include "test_util.h"

namespace canvas {
namespace {

using Tokens = std::vector<int32_t>;

DatastoreDraftParams counting(int64_t min_count) {
  DatastoreDraftParams p;
  p.min_count = min_count;
  return p;
}

TEST(Datastore, VotesForTheMostCommonContinuationTokenByToken) {
  // (1, 2) is followed by 3 five times and by 6 once; those 3s by 4 three times and by 5 twice.
  const Datastore store(Tokens{1, 2, 3, 4, 0, 1, 2, 3, 5, 0, 1, 2, 3, 4, 0, 1, 2, 6, 0, 1, 2, 3, 5, 9, 1, 2, 3, 4, 7});
  EXPECT_EQ(store.count(Tokens{1, 2}), 6);
  EXPECT_EQ(store.count(Tokens{1, 2, 3}), 5);
  EXPECT_EQ(store.draft(Tokens{8, 1, 2}, 2, counting(1)), (Tokens{3, 4}));
  // The occurrences that voted for 3 4 go on: 0 (twice) against 7 (once).
  EXPECT_EQ(store.draft(Tokens{8, 1, 2}, 3, counting(1)), (Tokens{3, 4, 0}));
  // A tie goes to the lower id: after (3, 5) come 0 and 9 once each.
  EXPECT_EQ(store.draft(Tokens{3, 5}, 1, counting(1)), (Tokens{0}));
}

TEST(Datastore, TheLongestNgramWithEnoughOccurrencesDrafts) {
  // (7, 1, 2) once, followed by 8; (1, 2) three times more, followed by 3.
  const Datastore store(Tokens{7, 1, 2, 8, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3});
  EXPECT_EQ(store.draft(Tokens{7, 1, 2}, 1, counting(1)), (Tokens{8}));
  // With at least 2 occurrences the trigram is too rare and the bigram drafts.
  EXPECT_EQ(store.draft(Tokens{7, 1, 2}, 1, counting(2)), (Tokens{3}));
  EXPECT_EQ(store.draft(Tokens{7, 1, 2}, 1, counting(4)), (Tokens{3}));
  // No n-gram occurs 5 times.
  EXPECT_TRUE(store.draft(Tokens{7, 1, 2}, 1, counting(5)).empty());
  // n = 2 at the shortest: a single token never drafts.
  EXPECT_TRUE(store.draft(Tokens{9, 2}, 1, counting(1)).empty());
  DatastoreDraftParams single = counting(1);
  single.shortest = 1;
  EXPECT_EQ(store.draft(Tokens{9, 2}, 1, single), (Tokens{3}));
  // longest caps n: with longest 2, (1, 2) drafts although (7, 1, 2) occurs.
  DatastoreDraftParams two = counting(1);
  two.longest = 2;
  EXPECT_EQ(store.draft(Tokens{7, 1, 2}, 1, two), (Tokens{3}));
}

TEST(Datastore, TheDraftEndsWhereTheCorpusDoes) {
  const Datastore store(Tokens{4, 5, 6, 7});
  EXPECT_EQ(store.draft(Tokens{4, 5}, 8, counting(1)), (Tokens{6, 7}));
  // The last bigram occurs but nothing follows it.
  EXPECT_TRUE(store.draft(Tokens{6, 7}, 8, counting(1)).empty());
}

TEST(Datastore, EmptyAndShortCorporaAndContexts) {
  const Datastore empty(Tokens{});
  EXPECT_EQ(empty.count(Tokens{1}), 0);
  EXPECT_TRUE(empty.draft(Tokens{1, 2, 3}, 4, counting(1)).empty());
  const Datastore one(Tokens{5});
  EXPECT_EQ(one.count(Tokens{5}), 1);
  EXPECT_EQ(one.count(Tokens{5, 5}), 0);
  EXPECT_TRUE(one.draft(Tokens{5, 5}, 4, counting(1)).empty());
  const Datastore store(Tokens{1, 2, 3});
  EXPECT_TRUE(store.draft(Tokens{}, 4, counting(1)).empty());
  EXPECT_TRUE(store.draft(Tokens{2}, 4, counting(1)).empty());  // shorter than the shortest n-gram
  EXPECT_TRUE(store.draft(Tokens{1, 2}, 0, counting(1)).empty());
}

// Where `gram` ends in `ids`, by a scan (the obviously-correct twin of Datastore::range).
std::vector<int64_t> naive_occurrences(const Tokens& ids, const Tokens& gram) {
  const int64_t n_ids = int64_t(ids.size());
  std::vector<int64_t> at;
  for (int64_t i = 0; i + int64_t(gram.size()) <= n_ids; ++i)
    if (std::equal(gram.begin(), gram.end(), ids.begin() + i)) at.push_back(i + int64_t(gram.size()));
  return at;
}

// Datastore::draft with default n-gram lengths, by a scan and a vote over the occurrences.
Tokens naive_draft(const Tokens& ids, const Tokens& context, int64_t length, int64_t min_count) {
  const int64_t n_ids = int64_t(ids.size());
  for (int64_t n = std::min<int64_t>(5, int64_t(context.size())); n >= 2; --n) {
    std::vector<int64_t> at = naive_occurrences(ids, Tokens(context.end() - n, context.end()));
    if (int64_t(at.size()) < min_count) continue;
    Tokens draft;
    while (int64_t(draft.size()) < length) {
      std::map<int32_t, int64_t> votes;
      for (int64_t p : at)
        if (p < n_ids) ++votes[ids[size_t(p)]];
      if (votes.empty()) break;
      int32_t best = votes.begin()->first;
      for (const auto& [t, c] : votes)
        if (c > votes[best]) best = t;
      draft.push_back(best);
      std::vector<int64_t> kept;
      for (int64_t p : at)
        if (p < n_ids && ids[size_t(p)] == best) kept.push_back(p + 1);
      at = kept;
    }
    return draft;
  }
  return Tokens{};
}

// The suffix array's counts and drafts against a brute-force scan and vote on a random corpus of a few ids
// (many repeats, long shared runs).
TEST(Datastore, MatchesBruteForceOnARandomCorpus) {
  std::mt19937 rng(7);
  Tokens ids(3000);
  for (auto& t : ids) t = int32_t(rng() % 4);
  for (int i = 0; i < 200; ++i) ids[size_t(1000 + i)] = ids[size_t(i)];  // a long repeat
  const Datastore store(ids);
  for (int trial = 0; trial < 200; ++trial) {
    Tokens context(size_t(1 + rng() % 7));
    for (auto& t : context) t = int32_t(rng() % 5);  // id 4 never occurs
    EXPECT_EQ(store.count(context), int64_t(naive_occurrences(ids, context).size()));
    for (int64_t min_count : {1, 3, 10, 100})
      EXPECT_EQ(store.draft(context, 6, counting(min_count)), naive_draft(ids, context, 6, min_count)) << trial;
  }
}

// A gram's next-token runs against a scan of the corpus: one run per token that follows the gram, in
// increasing order, each the range of the gram extended by its token; and so on one token further.
TEST(Datastore, ARangesNextTokenRunsAreTheRangesOfItsExtendedGrams) {
  std::mt19937 rng(3);
  Tokens ids(2000);
  for (auto& t : ids) t = int32_t(rng() % 5);
  const Datastore store(ids);
  const int64_t n_ids = int64_t(ids.size());
  std::function<void(const Tokens&, int)> check_runs = [&](const Tokens& gram, int levels) {
    const int64_t g = int64_t(gram.size());
    std::map<int32_t, int64_t> scan;  // next token -> occurrences of the gram it follows
    for (int64_t i = 0; i + g < n_ids; ++i)
      if (std::equal(gram.begin(), gram.end(), ids.begin() + i)) ++scan[ids[size_t(i + g)]];
    std::vector<Datastore::TokenRun> runs;
    store.next_token_runs(store.range(gram), g, runs);
    std::map<int32_t, int64_t> got;
    for (size_t r = 0; r < runs.size(); ++r) {
      if (r > 0) {
        EXPECT_LT(runs[r - 1].token, runs[r].token);
      }
      got[runs[r].token] = runs[r].range.size();
      Tokens extended = gram;
      extended.push_back(runs[r].token);
      const Datastore::Range range = store.range(extended);
      EXPECT_EQ(runs[r].range.first, range.first);
      EXPECT_EQ(runs[r].range.last, range.last);
      if (levels > 0) check_runs(extended, levels - 1);
    }
    EXPECT_EQ(got, scan);
  };
  for (int trial = 0; trial < 40; ++trial) {
    Tokens gram(size_t(rng() % 4));
    for (auto& t : gram) t = int32_t(rng() % 6);  // id 5 never occurs
    check_runs(gram, 1);
  }
  check_runs(Tokens(ids.end() - 2, ids.end()), 1);  // one occurrence at the corpus end: in no run
  // Past kSortDepth the order says nothing: no runs.
  std::vector<Datastore::TokenRun> runs;
  store.next_token_runs(store.range(Tokens{}), Datastore::kSortDepth, runs);
  EXPECT_TRUE(runs.empty());
}

// A tokenizer for the cache tests: one id per byte, counting its calls.
struct ByteTokenizer {
  int calls = 0;
  std::vector<int32_t> operator()(const std::string& text) {
    ++calls;
    return Tokens(text.begin(), text.end());
  }
};

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// A corpus of one short passage repeated (suffixes that agree for thousands of tokens) is indexed in about
// the time of natural text: the suffixes are ordered to kSortDepth tokens, not to their end. Its drafts
// follow the passage, and stop at kSortDepth tokens of n-gram and draft.
TEST(Datastore, ARepeatedPassageIsIndexedQuicklyAndDraftsItsContinuation) {
  std::vector<int32_t> ids;
  for (int i = 0; i < 60000; ++i) ids.push_back(int32_t(i % 3));  // 0 1 2 0 1 2 ...
  const auto t0 = std::chrono::steady_clock::now();
  const Datastore store(std::move(ids));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, 20000.0) << "a full-length comparison sort takes minutes here";
  const std::vector<int32_t> context = {5, 0, 1};
  EXPECT_EQ(store.draft(context, 6), (std::vector<int32_t>{2, 0, 1, 2, 0, 1}));
  EXPECT_EQ(int64_t(store.draft(context, 1000).size()), Datastore::kSortDepth - 2);  // the 2-gram "0 1" and 62
}

TEST(Datastore, TokenCacheIsReusedAndRewrittenWhenStale) {
  test::TempDir dir;
  const std::string text = dir.path("corpus.txt"), cache = dir.path("cache");
  write_text(text, "in the beginning");
  ByteTokenizer tokenizer;
  auto tokenize = [&](const std::string& t) { return tokenizer(t); };
  std::vector<std::string> warnings;
  auto first = Datastore::load(text, "bytes", tokenize, 256, cache, &warnings);
  EXPECT_FALSE(first->loaded_from_cache());
  const std::string words = "in the beginning";
  EXPECT_EQ(first->ids(), Tokens(words.begin(), words.end()));
  auto second = Datastore::load(text, "bytes", tokenize, 256, cache, &warnings);
  EXPECT_TRUE(second->loaded_from_cache());
  EXPECT_EQ(second->ids(), first->ids());
  EXPECT_EQ(tokenizer.calls, 1);
  // Another tokenizer: tokenized again (and cached beside the first).
  EXPECT_FALSE(Datastore::load(text, "other", tokenize, 256, cache, &warnings)->loaded_from_cache());
  EXPECT_EQ(tokenizer.calls, 2);
  // The text changed (its size and time): tokenized again, the new ids.
  write_text(text, "and the earth was");
  auto changed = Datastore::load(text, "bytes", tokenize, 256, cache, &warnings);
  EXPECT_FALSE(changed->loaded_from_cache());
  EXPECT_EQ(changed->ids().size(), std::string("and the earth was").size());
  EXPECT_EQ(tokenizer.calls, 3);
  EXPECT_TRUE(Datastore::load(text, "bytes", tokenize, 256, cache, &warnings)->loaded_from_cache());
  EXPECT_TRUE(warnings.empty());
  // A damaged cache file (truncated, or one byte of its ids changed) is ignored and written again.
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(cache)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 3u);
  for (const auto& f : files) std::filesystem::resize_file(f, std::filesystem::file_size(f) - 3);
  auto damaged = Datastore::load(text, "bytes", tokenize, 256, cache, &warnings);
  EXPECT_FALSE(damaged->loaded_from_cache());
  EXPECT_EQ(damaged->ids(), changed->ids());
  EXPECT_TRUE(Datastore::load(text, "bytes", tokenize, 256, cache, &warnings)->loaded_from_cache());
  for (const auto& f : files) {
    std::fstream io(f, std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(-12, std::ios::end);  // in the last id
    io.put('\x7f');
  }
  const int before = tokenizer.calls;
  EXPECT_FALSE(Datastore::load(text, "bytes", tokenize, 256, cache, &warnings)->loaded_from_cache());
  EXPECT_EQ(tokenizer.calls, before + 1);
  EXPECT_TRUE(warnings.empty());
}

// Issue 61 K: each version of a changing corpus left its own cache file (14 files from 15 runs), with no
// bound on the folder. Past kCacheDirMaxFiles the least recently used go; the newest and the ones in use stay.
TEST(Datastore, TokenCacheFolderIsBoundedForAChangingCorpus) {
  test::TempDir dir;
  const std::string text = dir.path("corpus.txt"), cache = dir.path("cache"), steady = dir.path("steady.txt");
  ByteTokenizer tokenizer;
  auto tokenize = [&](const std::string& t) { return tokenizer(t); };
  std::vector<std::string> warnings;
  write_text(steady, "a corpus that does not change");
  Datastore::load(steady, "bytes", tokenize, 256, cache, &warnings);
  const size_t versions = kCacheDirMaxFiles + 20;
  auto files_in_cache = [&] {
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(cache)) ++n;
    return n;
  };
  for (size_t v = 0; v < versions; ++v) {
    write_text(text, "version " + std::to_string(v) + std::string(v % 7, '!'));  // another size, another key
    std::filesystem::last_write_time(text, std::filesystem::file_time_type::clock::now() + std::chrono::seconds(v));
    Datastore::load(text, "bytes", tokenize, 256, cache, &warnings);
    if (v % 16 == 0) {  // the steady corpus is in use: read now and then, so never the least recently used
      EXPECT_TRUE(Datastore::load(steady, "bytes", tokenize, 256, cache, &warnings)->loaded_from_cache());
    }
    EXPECT_LE(files_in_cache(), kCacheDirMaxFiles) << "after version " << v;
  }
  EXPECT_EQ(files_in_cache(), kCacheDirMaxFiles);
  EXPECT_TRUE(warnings.empty());
  const int before = tokenizer.calls;
  // The newest version and the corpus in use are still cached.
  EXPECT_TRUE(Datastore::load(text, "bytes", tokenize, 256, cache, &warnings)->loaded_from_cache());
  EXPECT_TRUE(Datastore::load(steady, "bytes", tokenize, 256, cache, &warnings)->loaded_from_cache());
  EXPECT_EQ(tokenizer.calls, before);
}

// Issue 61 C, D, I: the token cache is untrusted input in a folder others may write. A FIFO at its path
// hung generate and serve for ever; a link there had its target overwritten with the cache; ids outside the
// vocabulary were taken (every run failed until the file was deleted); a junk file of any size was read
// whole. Each is passed over and replaced by a fresh cache, renamed over the path.
TEST(Datastore, TokenCacheIsUntrustedAndNeverWrittenThroughWhatIsThere) {
  namespace fs = std::filesystem;
  test::TempDir dir;
  const std::string text = dir.path("corpus.txt"), cache = dir.path("cache");
  write_text(text, "in the beginning");
  ByteTokenizer tokenizer;
  auto tokenize = [&](const std::string& t) { return tokenizer(t); };
  std::vector<std::string> warnings;
  Datastore::load(text, "bytes", tokenize, 256, cache, &warnings);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(cache)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  const std::string file = files[0].string(), good = test::read_text(file);
  auto reload = [&] {
    const int before = tokenizer.calls;
    auto store = Datastore::load(text, "bytes", tokenize, 256, cache, &warnings);
    EXPECT_EQ(store->ids().size(), 16u);
    EXPECT_EQ(tokenizer.calls, before + 1) << "the cache was taken";
    EXPECT_EQ(fs::symlink_status(file).type(), fs::file_type::regular);
    EXPECT_EQ(test::read_text(file), good);
    EXPECT_TRUE(Datastore::load(text, "bytes", tokenize, 256, cache, &warnings)->loaded_from_cache());
  };
  // D: a link to someone's file: the file is left as it was, the link replaced.
  const std::string victim = dir.path("victim.txt");
  write_text(victim, "my own file");
  fs::remove(file);
  fs::create_symlink(victim, file);
  reload();
  EXPECT_EQ(test::read_text(victim), "my own file");
  // ... also a link to a valid cache of this corpus (not followed).
  fs::copy_file(file, dir.path("copy.ids"));
  fs::remove(file);
  fs::create_symlink(dir.path("copy.ids"), file);
  reload();
  // C: a FIFO is never opened (a reader is kept open here, so that a write through it would not block the
  // test but leave the FIFO in place).
  fs::remove(file);
  ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);
  const int reader = ::open(file.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  reload();
  char byte = 0;
  EXPECT_LE(::read(reader, &byte, 1), 0) << "bytes were written into the FIFO";
  ::close(reader);
  // I: ids outside the vocabulary, with a correct checksum: rebuilt.
  auto store = Datastore::load(text, "bytes", tokenize, 100, cache, &warnings);  // 'n' = 110 >= 100
  EXPECT_FALSE(store->loaded_from_cache());
  write_text(file, good);
  // I: a file larger than this corpus's ids can be is refused before it is read (a sparse 1 GB file here).
  fs::resize_file(file, uint64_t(1) << 30);
  const int64_t rss_before = test::peak_rss_kb();
  reload();
  EXPECT_LT(test::peak_rss_kb() - rss_before, 256 << 10) << "KiB more at the peak";
  EXPECT_TRUE(warnings.empty());
}

// Issue 61 H: repetitive corpora (one token a million times, a short period, a passage repeated) are indexed
// in bounded time (a comparison sort of their suffixes took seconds to minutes), their lookups equal a scan
// of the ids on random queries, and the structures hold at most 12 bytes a token.
TEST(Datastore, RepetitiveCorporaAreIndexedInBoundedTimeAndMemoryAndMatchAScan) {
  std::mt19937 rng(11);
  const int64_t n = 1'000'000;
  Tokens passage(1000);
  for (auto& t : passage) t = int32_t(rng() % 50);
  const std::vector<std::pair<std::string, std::function<int32_t(int64_t)>>> corpora = {
      {"one token", [](int64_t) { return 7; }},
      {"period 3", [](int64_t i) { return int32_t(i % 3); }},
      {"a passage of 1000", [&](int64_t i) { return passage[size_t(i % 1000)]; }},
  };
  for (const auto& [name, token] : corpora) {
    Tokens ids(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = token(i);
    const auto t0 = std::chrono::steady_clock::now();
    const Datastore store(ids);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(ms, 5000.0) << name;
    EXPECT_LE(double(store.memory_bytes()) / double(n), 12.0) << name;
    for (int trial = 0; trial < 8; ++trial) {
      // Half the queries are taken from the corpus (they occur), half are random (most do not).
      Tokens context(size_t(2 + rng() % 5));
      const int64_t at = int64_t(rng() % uint32_t(n - 8));
      for (size_t k = 0; k < context.size(); ++k)
        context[k] = trial % 2 ? ids[size_t(at) + k] : int32_t(rng() % 8);
      EXPECT_EQ(store.count(context), int64_t(naive_occurrences(ids, context).size())) << name << " " << trial;
      EXPECT_EQ(store.draft(context, 6, counting(3)), naive_draft(ids, context, 6, 3)) << name << " " << trial;
    }
  }
}

// Issue 61 H: a load from the cache reads the suffix array back (checked, not sorted), so a repetitive
// corpus no longer re-sorts on every load; both loads give the same index and lookups.
TEST(Datastore, ALoadFromTheCacheDoesNotSort) {
  test::TempDir dir;
  const std::string text = dir.path("corpus.txt"), cache = dir.path("cache");
  write_text(text, std::string(200000, 'a') + "bcd" + std::string(100000, 'a'));
  ByteTokenizer tokenizer;
  auto tokenize = [&](const std::string& t) { return tokenizer(t); };
  std::vector<std::string> warnings;
  const int64_t built = suffix_arrays_built();
  auto first = Datastore::load(text, "bytes", tokenize, 256, cache, &warnings);
  EXPECT_FALSE(first->loaded_from_cache());
  EXPECT_EQ(suffix_arrays_built(), built + 1);
  auto second = Datastore::load(text, "bytes", tokenize, 256, cache, &warnings);
  EXPECT_TRUE(second->loaded_from_cache());
  EXPECT_EQ(suffix_arrays_built(), built + 1) << "the cached corpus was sorted again";
  EXPECT_EQ(tokenizer.calls, 1);
  EXPECT_LE(double(second->memory_bytes()) / double(second->ids().size()), 12.0);
  for (const Tokens& context : {Tokens{'a', 'a'}, Tokens{'a', 'b'}, Tokens{'b', 'c', 'd'}, Tokens{'d', 'a', 'a'}}) {
    EXPECT_EQ(second->count(context), first->count(context));
    EXPECT_EQ(second->draft(context, 8, counting(1)), first->draft(context, 8, counting(1)));
  }
  EXPECT_TRUE(warnings.empty());
}

// Issue 61 H: a corpus that does not fit in memory is an Error that names it (not the generic message that
// blamed "a vocabulary, a context length, a batch").
TEST(Datastore, ACorpusThatDoesNotFitIsAnErrorNamingIt) {
  test::TempDir dir;
  const std::string text = dir.path("huge-corpus.txt");
  write_text(text, "in the beginning");
  auto out_of_memory = [](const std::string&) -> Tokens { throw std::bad_alloc(); };
  std::vector<std::string> warnings;
  try {
    Datastore::load(text, "bytes", out_of_memory, 256, "", &warnings);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("huge-corpus.txt"), std::string::npos) << what;
    EXPECT_NE(what.find("does not fit"), std::string::npos) << what;
  }
}

TEST(Datastore, AnUnwritableCacheIsAWarningAndAMissingTextAnError) {
  test::TempDir dir;
  const std::string text = dir.path("corpus.txt"), blocked = dir.path("not-a-dir");
  write_text(text, "abcabc");
  write_text(blocked, "a file where the cache directory should be");
  ByteTokenizer tokenizer;
  auto tokenize = [&](const std::string& t) { return tokenizer(t); };
  std::vector<std::string> warnings;
  auto store = Datastore::load(text, "bytes", tokenize, 256, blocked, &warnings);
  EXPECT_EQ(store->ids().size(), 6u);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("cache"), std::string::npos) << warnings[0];
  // No cache directory at all: tokenized every time, no warning.
  warnings.clear();
  Datastore::load(text, "bytes", tokenize, 256, "", &warnings);
  Datastore::load(text, "bytes", tokenize, 256, "", &warnings);
  EXPECT_EQ(tokenizer.calls, 3);
  EXPECT_TRUE(warnings.empty());
  EXPECT_THROW(Datastore::load(dir.path("missing.txt"), "bytes", tokenize, 256, "", &warnings), Error);
}

}  // namespace
}  // namespace canvas
