// The forward pass against the independent NumPy reference (tests/fixtures), through `canvas logits`.
#include <gtest/gtest.h>
#include <unistd.h>

#include "io/npy.h"
#include "core/error.h"
#include "model/model.h"
#include "model/pass_logits.h"
#include "test_util.h"

namespace canvas {
namespace {

struct LogitsCase {
  const char* model;
  bool causal;
};

class ReferenceLogits : public ::testing::TestWithParam<LogitsCase> {};

TEST_P(ReferenceLogits, MatchesNumpyReference) {
  const LogitsCase& c = GetParam();
  const std::string base = std::string(c.model);
  std::string ids = test::read_text(test::fixture(base + ".ids.txt"));
  while (!ids.empty() && (ids.back() == '\n' || ids.back() == ' ')) ids.pop_back();
  const std::string out = test::temp_path(base + (c.causal ? ".causal.npy" : ".bidir.npy"));
  const auto r = test::run_canvas("logits -m " + test::fixture(base + ".gguf") + " --ids " + ids + " --out " + out +
                                  (c.causal ? " --causal" : "") + " -t 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const NpyArray got = read_npy(out);
  const NpyArray want = read_npy(test::fixture(base + (c.causal ? ".causal.npy" : ".bidirectional.npy")));
  ASSERT_EQ(got.shape, want.shape);
  // 1e-5, tighter than the 1e-4 asked for, so a wrong RMSNorm epsilon (~1e-4 relative) is caught too.
  EXPECT_LT(test::relative_error(got.data, want.data), 1e-5);
  // The check can fail: the other attention view must not match.
  const NpyArray other = read_npy(test::fixture(base + (c.causal ? ".bidirectional.npy" : ".causal.npy")));
  EXPECT_GT(test::relative_error(got.data, other.data), 1e-3);
  std::remove(out.c_str());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ReferenceLogits,
                         ::testing::Values(LogitsCase{"tiny-llada", false}, LogitsCase{"tiny-llada", true},
                                           LogitsCase{"tiny-dream", false}, LogitsCase{"tiny-dream", true},
                                           LogitsCase{"tiny-llada-moe", false}, LogitsCase{"tiny-llada-moe", true}),
                         [](const auto& info) {
                           std::string name = std::string(info.param.model) + (info.param.causal ? "_causal" : "_bidir");
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

TEST(ModelLoad, ReadsConfigFromGguf) {
  const Model llada = Model::load(test::fixture("tiny-llada.gguf"));
  EXPECT_EQ(llada.config.arch, "llada");
  EXPECT_FALSE(llada.config.shift_logits);
  EXPECT_FALSE(llada.config.causal);
  EXPECT_EQ(llada.config.rope.layout, RopeLayout::Normal);
  EXPECT_FALSE(llada.config.tied_output);
  EXPECT_GE(llada.config.mask_token, 0);
  const Model dream = Model::load(test::fixture("tiny-dream.gguf"));
  EXPECT_TRUE(dream.config.shift_logits);  // key absent: Dream shifts
  EXPECT_TRUE(dream.config.qkv_bias);
  EXPECT_TRUE(dream.config.tied_output);
  EXPECT_EQ(dream.config.rope.layout, RopeLayout::Neox);
  EXPECT_LT(dream.config.n_kv_heads, dream.config.n_heads);
  const Model moe = Model::load(test::fixture("tiny-llada-moe.gguf"));
  EXPECT_TRUE(moe.config.is_moe());
  EXPECT_EQ(moe.config.n_experts_used, 2);
}

// pass_logits (canvas logits): one row per id, and its refusals: past the context, a canvas without a
// decoder, self-conditioning without a canvas.
TEST(PassLogits, RowsPerIdAndRefusals) {
  const Model model = Model::load(test::fixture("tiny-llada.gguf"));
  ThreadPool pool(2);
  EXPECT_EQ(pass_logits(model, {1, 2, 3}, false, nullptr, nullptr, &pool).size(), size_t(3 * model.config.vocab));
  const std::vector<int32_t> too_long(size_t(model.config.context_length + 1), 1), canvas = {4, 5};
  EXPECT_THROW(pass_logits(model, too_long, false, nullptr, nullptr, &pool), Error);
  EXPECT_THROW(pass_logits(model, {1, 2}, false, &canvas, nullptr, &pool), Error);
  const float zeros[1] = {0};
  EXPECT_THROW(pass_logits(model, {1, 2}, false, nullptr, zeros, &pool), Error);
}

TEST(ModelLoad, NonModelFileIsAClearError) {
  try {
    Model::load(test::fixture("tiny-llada.ids.txt"));
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("tiny-llada.ids.txt"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace canvas
