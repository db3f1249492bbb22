// The cost model behind --mode auto (decode/cost_model.h): pass times, verify's acceptance, the choice
// among the modes that write AR's text, and the file it is kept in, which canvas writes only where it made
// it (never through a link, over another file, or into a pipe).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>
#include <string>

#include "decode/cost_model.h"
#include "serve_process.h"
#include "test_util.h"

namespace canvas {
namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

CostModel flat_costs() {
  CostModel cost;
  cost.passes = {{1, 1.0}, {4, 1.1}, {30, 4.0}};
  cost.per_row_ms = 0.1;
  return cost;
}

TEST(CostModel, PassTimesInterpolateBetweenMeasuredSizes) {
  const CostModel cost = flat_costs();
  EXPECT_DOUBLE_EQ(cost.pass_ms(1), 1.0);
  EXPECT_DOUBLE_EQ(cost.pass_ms(2.5), 1.05);
  EXPECT_DOUBLE_EQ(cost.pass_ms(30), 4.0);
  EXPECT_DOUBLE_EQ(cost.pass_ms(40), 5.0);  // past the last size: the line's slope
  CostModel line;
  line.fixed_ms = 2, line.per_row_ms = 0.5;
  EXPECT_DOUBLE_EQ(line.pass_ms(4), 4.0);
}

TEST(CostModel, AcceptanceGivesTokensPerCycleForShorterDrafts) {
  VerifyAcceptance a;
  a.add({2, 0, 0, 2});  // K = 3: two cycles kept nothing, two kept all three
  EXPECT_EQ(a.cycles(3), 4);
  EXPECT_EQ(a.cycles(4), 0);
  EXPECT_DOUBLE_EQ(a.tokens_per_cycle(3), 1 + 1.5);
  EXPECT_DOUBLE_EQ(a.tokens_per_cycle(1), 1 + 0.5);  // min(kept, 1)
  a.add({0, 4});  // K = 1 counts for k = 1 only
  EXPECT_EQ(a.cycles(1), 8);
  EXPECT_DOUBLE_EQ(a.tokens_per_cycle(1), 1 + 6.0 / 8);
  EXPECT_DOUBLE_EQ(a.tokens_per_cycle(3), 2.5);
}

TEST(CostModel, AutoMeasuresVerifyFirstThenTakesTheFastestMeasured) {
  CostModel cost = flat_costs();
  ModeChoice c = choose_ar_text_mode(cost, 1, false);
  EXPECT_EQ(c.mode, DecodeMode::Verify);  // acceptance unmeasured: verify measures it (AR's text)
  EXPECT_EQ(c.draft_length, kExploreDraftLength);
  EXPECT_EQ(choose_ar_text_mode(cost, 3, false).mode, DecodeMode::Ar);  // not under load
  std::vector<int64_t> cycles(size_t(kExploreDraftLength + 1), 0);
  cycles[3] = 40;  // every cycle keeps 3 drafts
  cost.acceptance.add(cycles);
  // Then AR runs once, to be measured.
  c = choose_ar_text_mode(cost, 1, false);
  EXPECT_EQ(c.mode, DecodeMode::Ar);
  EXPECT_NE(c.reason.find("ar runs once to be measured"), std::string::npos) << c.reason;
  cost.observe("ar", 40.0, 64);  // 0.625 ms per token, against an estimate of 1 ms: estimates are scaled by 0.625
  // k = 3 drafts, 4 tokens per cycle of 2 passes of 4 rows (2.2 ms): 0.55 ms per token estimated, 0.34 scaled.
  c = choose_ar_text_mode(cost, 1, false);
  EXPECT_EQ(c.mode, DecodeMode::Verify);
  EXPECT_EQ(c.draft_length, 3);
  EXPECT_FALSE(c.overlap);
  EXPECT_NEAR(c.ms_per_token, 0.55 * 0.625, 1e-9);
  EXPECT_NE(c.reason.find("verify k=3 is the fastest"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("estimated"), std::string::npos) << c.reason;
  // Whole runs measured here outweigh estimates: verify k=3 ran slower than AR, so AR.
  cost.observe(ar_text_setting(DecodeMode::Verify, 3, false), 64.0, 64);  // 1 ms per token
  c = choose_ar_text_mode(cost, 1, false);
  EXPECT_EQ(c.mode, DecodeMode::Ar) << c.reason;
  EXPECT_NE(c.reason.find("measured"), std::string::npos) << c.reason;
  // ... and the other estimates are scaled by how the measured runs compared with theirs.
  GenerationRequest r;
  r.verify.draft_length = 9;
  c.apply(r);
  EXPECT_EQ(r.mode, DecodeMode::Ar);
  EXPECT_EQ(r.verify.draft_length, 0);
  EXPECT_EQ(r.mode_reason, c.reason);
  EXPECT_EQ(ar_text_setting(DecodeMode::Verify, 2, true), "verify k=2 overlapped");
  EXPECT_EQ(ar_text_setting(DecodeMode::Diffusion, 0, false), "");
}

// A user's first runs are not each another experiment: at load 1 auto runs at most kMaxExploredSettings
// settings, then picks among those alone, and noise of +-4% per run does not flip the choice between two
// settings within kSwitchMargin of each other.
TEST(CostModel, AutoExploresAFewSettingsThenSettles) {
  for (const bool can_overlap : {false, true}) {
    CostModel cost = flat_costs();
    std::vector<int64_t> cycles(size_t(kExploreDraftLength + 1), 0);
    auto true_ms = [](const ModeChoice& c) {  // this machine's real speeds: ar and verify k=8 about equal
      if (c.mode == DecodeMode::Ar) return 0.50;
      return c.overlap ? 0.60 + 0.05 * double(c.draft_length) : 0.50 + 0.03 * double(std::abs(c.draft_length - 8));
    };
    std::set<std::string> settings;
    std::vector<std::string> chosen;
    for (int run = 0; run < 24; ++run) {
      const ModeChoice c = choose_ar_text_mode(cost, 1, can_overlap);
      const std::string name = ar_text_setting(c.mode, c.draft_length, c.overlap);
      settings.insert(name);
      chosen.push_back(name);
      if (c.mode == DecodeMode::Verify) {
        std::vector<int64_t> kept(size_t(c.draft_length + 1), 0);
        kept[size_t(std::min<int64_t>(3, c.draft_length))] = 20;  // every cycle keeps 3 drafts
        cost.acceptance.add(kept);
      }
      const double noise = run % 2 == 0 ? 0.96 : 1.04;
      cost.observe(name, 64 * true_ms(c) * noise, 64);
    }
    EXPECT_LE(int64_t(settings.size()), kMaxExploredSettings) << can_overlap;
    for (size_t run = size_t(kMaxExploredSettings) + 1; run < chosen.size(); ++run)
      EXPECT_EQ(chosen[run], chosen[run - 1]) << "run " << run << ", overlap " << can_overlap;
  }
  // The setting run most often stays while another measured one is within kSwitchMargin of it, and gives way
  // to one clearly faster.
  CostModel cost = flat_costs();
  std::vector<int64_t> cycles(size_t(kExploreDraftLength + 1), 0);
  cycles[3] = 40;
  cost.acceptance.add(cycles);
  cost.observed["ar"] = {0.50, 6};
  cost.observed["verify k=3"] = {0.70, 1};
  cost.observed["verify k=8"] = {0.49, 1};
  ModeChoice c = choose_ar_text_mode(cost, 1, false);
  EXPECT_EQ(c.mode, DecodeMode::Ar) << c.reason;
  EXPECT_NE(c.reason.find("stays"), std::string::npos) << c.reason;
  cost.observed["verify k=8"] = {0.45, 1};
  c = choose_ar_text_mode(cost, 1, false);
  EXPECT_EQ(c.mode, DecodeMode::Verify) << c.reason;
  EXPECT_EQ(c.draft_length, 8);
}

// With a datastore, auto judges AR, the datastore chains and trees by their measured runs: AR first, then
// each setting in turn while the last measured is the fastest so far, then the fastest measured.
TEST(CostModel, AutoWithADatastoreMeasuresSettingsInTurnAndStopsWhenOneIsSlower) {
  CostModel cost;
  auto setting = [](int64_t tree) { return ar_text_setting(DecodeMode::Verify, 4, false, true, tree); };
  EXPECT_EQ(setting(0), "verify k=4 datastore");
  EXPECT_EQ(setting(16), "verify tree=16 datastore");
  ModeChoice c = choose_datastore_mode(cost);
  EXPECT_EQ(c.mode, DecodeMode::Ar);
  EXPECT_NE(c.reason.find("ar runs once to be measured"), std::string::npos) << c.reason;
  cost.observe("ar", 64.0, 64);  // 1 ms per token
  c = choose_datastore_mode(cost);
  EXPECT_EQ(c.mode, DecodeMode::Verify);
  EXPECT_EQ(c.draft_tree, 0);  // the chains
  EXPECT_NE(c.reason.find("verify k=4 datastore runs to be measured"), std::string::npos) << c.reason;
  cost.observe(setting(0), 48.0, 64);  // 0.75: faster, so the smallest tree is tried
  c = choose_datastore_mode(cost);
  EXPECT_EQ(c.draft_tree, kDatastoreTrees[0]);
  cost.observe(setting(kDatastoreTrees[0]), 40.0, 64);  // 0.625: faster again, the next tree
  c = choose_datastore_mode(cost);
  EXPECT_EQ(c.draft_tree, kDatastoreTrees[1]);
  cost.observe(setting(kDatastoreTrees[1]), 56.0, 64);  // 0.875: slower than the best, no larger tree
  c = choose_datastore_mode(cost);
  EXPECT_EQ(c.mode, DecodeMode::Verify);
  EXPECT_EQ(c.draft_tree, kDatastoreTrees[0]);
  EXPECT_NEAR(c.ms_per_token, 0.625, 1e-9);
  EXPECT_NE(c.reason.find("is the fastest of ar and verify with the datastore"), std::string::npos) << c.reason;
  GenerationRequest r;
  c.apply(r);
  EXPECT_EQ(r.verify.draft_tree, kDatastoreTrees[0]);
  EXPECT_EQ(r.verify.draft_length, 4);
  // Where the chains are slower than AR, no tree is tried: AR.
  CostModel slow;
  slow.observe("ar", 64.0, 64);
  slow.observe(setting(0), 80.0, 64);
  c = choose_datastore_mode(slow);
  EXPECT_EQ(c.mode, DecodeMode::Ar) << c.reason;
  EXPECT_NE(c.reason.find("ar is the fastest"), std::string::npos) << c.reason;
  c.apply(r);
  EXPECT_EQ(r.verify.draft_tree, 0);
  // Without trees (a device runs the passes), the chains are the last setting tried.
  CostModel device;
  device.observe("ar", 64.0, 64);
  device.observe(setting(0), 48.0, 64);
  c = choose_datastore_mode(device, false);
  EXPECT_EQ(c.mode, DecodeMode::Verify);
  EXPECT_EQ(c.draft_tree, 0);
  EXPECT_NE(c.reason.find("verify k=4 datastore is the fastest"), std::string::npos) << c.reason;
}

// Issue 61 A: generate with a datastore saves a cost model of runs alone (fixed_ms 0, per_row_ms 0, no
// passes); once verify's acceptance was measured, auto at load 2 found no estimate above 0 and dereferenced
// nothing (serve died with SIGSEGV). Such a model is untimed, and auto takes AR, saying why.
TEST(CostModel, WithoutPassTimesAutoTakesArAtEveryLoad) {
  test::TempDir dir;
  const std::string file = dir.path("costs.json");
  write_text(file, R"({"key": "k", "fixed_ms": 0, "per_row_ms": 0, "passes": [],
    "verify_cycles_keeping": {"8": [8, 0, 0, 0, 0, 0, 0, 0, 4]},
    "observed_ms_per_token": {"verify k=4 datastore": [2.0, 1]}})");
  const std::optional<CostModel> cost = CostModel::load(file, "k");
  ASSERT_TRUE(cost);
  EXPECT_FALSE(cost->timed());
  EXPECT_TRUE(flat_costs().timed());
  for (const bool overlap : {false, true})
    for (int64_t load = 1; load <= 4; ++load) {
      const ModeChoice c = choose_ar_text_mode(*cost, load, overlap);
      EXPECT_EQ(c.mode, DecodeMode::Ar) << c.reason;
      EXPECT_FALSE(c.reason.empty());
    }
  EXPECT_NE(choose_ar_text_mode(*cost, 2, false).reason.find("no pass times"), std::string::npos);
  // Timing it keeps what the runs taught.
  CostModel timed = *cost;
  timed.take_pass_times(flat_costs());
  EXPECT_TRUE(timed.timed());
  EXPECT_EQ(timed.acceptance.cycles(1), 12);
  EXPECT_EQ(timed.observed.count("verify k=4 datastore"), 1u);
}

TEST(CostModel, SavedAndReadBackWithItsKey) {
  test::TempDir dir;
  const std::string file = dir.path("sub/costs.json");
  CostModel cost = flat_costs();
  cost.fixed_ms = 0.5;
  cost.acceptance.add({1, 2, 3});
  cost.observe("ar", 16, 8);
  EXPECT_EQ(cost.save(file, "key A"), "");
  const std::optional<CostModel> back = CostModel::load(file, "key A");
  ASSERT_TRUE(back);
  EXPECT_EQ(back->passes, cost.passes);
  EXPECT_EQ(back->acceptance.cycles_keeping, cost.acceptance.cycles_keeping);
  EXPECT_DOUBLE_EQ(back->observed.at("ar").ms_per_token, 2.0);
  EXPECT_FALSE(CostModel::load(file, "key B"));
  EXPECT_EQ(cost.save(file, "key B"), "");  // a cost model of another key is replaced
  EXPECT_TRUE(CostModel::load(file, "key B"));
}

TEST(CostModel, WritesOnlyFilesThatAreCostModels) {
  test::TempDir dir;
  const CostModel cost = flat_costs();
  // Another file (a model, a text) is left as it was, and the warning says why.
  const std::string other = dir.path("notes.txt");
  write_text(other, "my notes\n");
  std::string warning = cost.save(other, "k");
  EXPECT_NE(warning.find("not a cost-model file"), std::string::npos) << warning;
  EXPECT_EQ(test::read_text(other), "my notes\n");
  // A link is never followed, whatever it points at.
  const std::string target = dir.path("target.json");
  ASSERT_EQ(cost.save(target, "k"), "");
  const std::string before = test::read_text(target);
  std::filesystem::create_symlink(target, dir.path("link.json"));
  warning = cost.save(dir.path("link.json"), "other key");
  EXPECT_NE(warning.find("link"), std::string::npos) << warning;
  EXPECT_EQ(test::read_text(target), before);
  EXPECT_FALSE(CostModel::load(dir.path("link.json"), "k"));
  // A pipe is neither waited on nor written.
  const std::string fifo = dir.path("fifo.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_FALSE(CostModel::load(fifo, "k"));
  EXPECT_NE(cost.save(fifo, "k").find("not a regular file"), std::string::npos);
  // /proc's files read as empty regular files: not cost models, so left alone with that reason.
  EXPECT_NE(cost.save("/proc/self/status", "k").find("not a cost-model file"), std::string::npos);
  // A failed write is a warning, not an error.
  warning = cost.save("/proc/no-such-dir/costs.json", "k");
  EXPECT_NE(warning.find("not written"), std::string::npos) << warning;
  // A file too large to be a cost model is not read.
  const std::string big = dir.path("big.json");
  write_text(big, std::string(size_t(CostModel::kMaxFileBytes) + 1, ' '));
  EXPECT_FALSE(CostModel::load(big, "k"));
}

// serve --cost-model naming the served model, a pipe, or a folder that cannot be written: serve starts,
// answers, and leaves each as it was.
TEST(CostModelCli, ServeNeverOverwritesWhatItDidNotWrite) {
  test::TempDir dir;
  const std::string model = dir.path("m.gguf");
  std::filesystem::copy_file(test::source_path("models/text-ar.gguf"), model);
  const std::string bytes = test::read_text(model);
  {
    test::ServerProcess server("-m " + model + " --cost-model " + model, "");
    ASSERT_NE(server.port(), 0) << server.log();
    EXPECT_NE(server.log().find("warning: --cost-model"), std::string::npos) << server.log();
    EXPECT_NE(server.log().find("the file is left as it was"), std::string::npos) << server.log();
  }
  EXPECT_TRUE(test::read_text(model) == bytes) << "the model was changed";
  const std::string fifo = dir.path("c.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  test::ServerProcess server("--cost-model " + fifo, "models/text-ar.gguf");
  ASSERT_NE(server.port(), 0) << server.log();
  EXPECT_NE(server.log().find("not a regular file"), std::string::npos) << server.log();
}

}  // namespace
}  // namespace canvas
