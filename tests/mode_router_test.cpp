// --mode auto's one router (decode/mode_router.h): what each kind of model runs, which options imply a
// mode, holes to diffusion, serve --mode, and the modes a server checks a request against before queueing it.
#include <gtest/gtest.h>

#include <algorithm>

#include "decode/mode_router.h"
#include "test_util.h"

namespace canvas {
namespace {

Model load(const std::string& path, bool own_checkpoint) {
  Model m = Model::load(path);
  if (own_checkpoint) {  // canvas's own DiffusionGemma checkpoints: auto picks among ar and verify
    m.config.release_form = false;
    m.config.default_mode.clear();
  }
  return m;
}

RouterOptions no_file() {
  RouterOptions o;
  o.log_name = "test";
  return o;
}

TEST(ModeRouter, EachKindOfModelRunsItsOwnMode) {
  const Model release = load(test::fixture("tiny-diffusion-gemma"), false);
  const Generator g_release(release, nullptr, {});
  const ModeRouter r_release(g_release, no_file());
  GenerationRequest r;
  EXPECT_FALSE(r_release.chooses_by_cost());
  ModeChoice c = r_release.choose(r);
  EXPECT_EQ(c.mode, DecodeMode::Diffusion);
  EXPECT_EQ(c.reason, g_release.mode_reason(r));  // the generator's own account of auto agrees
  EXPECT_EQ(r_release.candidates(r), std::vector<DecodeMode>{DecodeMode::Diffusion});

  const Model masked = Model::load(test::source_path("models/text-masked.gguf"));
  const Generator g_masked(masked, nullptr, {});
  const ModeRouter r_masked(g_masked, no_file());
  c = r_masked.choose(r);
  EXPECT_EQ(c.mode, DecodeMode::Diffusion);
  EXPECT_EQ(c.reason, "auto: a masked-diffusion model decodes by diffusion");
  // Threshold decoding is masked diffusion's: an auto request with it is checked as diffusion only.
  r.masked.threshold = 0.9f;
  EXPECT_EQ(r_masked.candidates(r), std::vector<DecodeMode>{DecodeMode::Diffusion});
  EXPECT_NE(r_masked.choose(r).reason.find("--threshold"), std::string::npos);
  r.masked.threshold = 0;

  const Model ar = Model::load(test::source_path("models/text-ar.gguf"));
  const Generator g_ar(ar, nullptr, {});
  const ModeRouter r_ar(g_ar, no_file());
  EXPECT_EQ(r_ar.choose(r).mode, DecodeMode::Ar);
  EXPECT_EQ(r_ar.candidates(r), std::vector<DecodeMode>{DecodeMode::Ar});
  r.diffusion.steps = 8;  // a diffusion option on a model without diffusion means nothing to auto
  EXPECT_EQ(r_ar.choose(r).mode, DecodeMode::Ar);
  r.diffusion.steps = 0;

  const Model own = load(test::fixture("tiny-diffusion-gemma"), true);
  const Generator g_own(own, nullptr, {});
  const ModeRouter r_own(g_own, no_file());
  EXPECT_TRUE(r_own.chooses_by_cost());
  EXPECT_EQ(r_own.candidates(r), (std::vector<DecodeMode>{DecodeMode::Ar, DecodeMode::Verify}));
  c = r_own.choose(r);  // nothing measured yet: verify measures what this model keeps (AR's text)
  EXPECT_EQ(c.mode, DecodeMode::Verify);
  EXPECT_EQ(c.draft_length, kExploreDraftLength);
  EXPECT_EQ(r_own.choose(r, 3).mode, DecodeMode::Ar);  // not under load
}

TEST(ModeRouter, OptionsImplyTheirModeAndAskedModesStay) {
  const Model own = load(test::fixture("tiny-diffusion-gemma"), true);
  const Generator g(own, nullptr, {});
  const ModeRouter router(g, no_file());
  GenerationRequest r;
  r.verify.overlap = true;
  ModeChoice c = router.choose(r);
  EXPECT_EQ(c.mode, DecodeMode::Verify);
  EXPECT_TRUE(c.overlap);
  EXPECT_EQ(c.reason, "auto: a verify option (--overlap) was given");
  EXPECT_EQ(router.candidates(r), std::vector<DecodeMode>{DecodeMode::Verify});
  r = GenerationRequest();
  r.uniform_state.canvas_length = 16;
  c = router.choose(r);
  EXPECT_EQ(c.mode, DecodeMode::Diffusion);
  EXPECT_EQ(c.reason, "auto: a diffusion option (--canvas-length) was given");
  // Defaults given again imply nothing.
  r = GenerationRequest();
  r.masked.cache = CacheMode::Prefix;
  r.verify.draft_steps = 1;
  EXPECT_EQ(verify_option_of(r), "");
  EXPECT_EQ(diffusion_option_of(r), "");
  // Holes are filled by diffusion, whatever else is given.
  r.text = "In the <|hole:4|> God created";
  r.verify.draft_length = 3;
  c = router.choose(r);
  EXPECT_EQ(c.mode, DecodeMode::Diffusion);
  EXPECT_EQ(c.reason, "auto: holes and schemas are filled by diffusion");
  // A mode asked for is taken as it is; serve --mode stands for auto.
  r = GenerationRequest();
  r.mode = DecodeMode::Ar;
  r.diffusion.steps = 8;
  EXPECT_EQ(router.choose(r).mode, DecodeMode::Ar);
  EXPECT_EQ(router.choose(r).reason, "asked for");
  RouterOptions served = no_file();
  served.default_mode = DecodeMode::Verify;
  const ModeRouter serve_router(g, served);
  r = GenerationRequest();
  EXPECT_EQ(serve_router.choose(r).mode, DecodeMode::Verify);
  EXPECT_EQ(serve_router.choose(r).reason, "serve --mode verify");
  EXPECT_EQ(serve_router.candidates(r), std::vector<DecodeMode>{DecodeMode::Verify});
  // route() sets the choice on the request.
  r.verify.overlap = true;
  router.route(r);
  EXPECT_EQ(r.mode, DecodeMode::Verify);
  EXPECT_EQ(r.mode_reason, "auto: a verify option (--overlap) was given");
}

TEST(ModeRouter, LearnsFromFinishedRunsAndKeepsThemInItsFile) {
  test::TempDir dir;
  const Model own = load(test::fixture("tiny-diffusion-gemma"), true);
  const Generator g(own, nullptr, {});
  RouterOptions o = no_file();
  o.cost_model_file = dir.path("costs.json");
  o.cost_model_key = "k";
  {
    ModeRouter router(g, o);
    EXPECT_FALSE(router.stored());
    GenerationRequest r;
    r.mode = DecodeMode::Verify;
    r.verify.draft_length = 4;
    GenerationOutput out;
    out.passes = 10;
    out.tokens.assign(20, 5);
    out.decode_ms = 40;
    out.decode_tokens = 20;
    out.verify.cycles_keeping = {0, 0, 5, 0, 0};
    router.learn(r, out, /*alone=*/true);
    out.finish_reason = "cancelled";  // a cancelled run teaches nothing
    router.learn(r, out, true);
    const CostModel cost = router.cost_model();
    EXPECT_EQ(cost.verify_observations, 1);
    EXPECT_DOUBLE_EQ(cost.verify_tokens_per_forward, 2.0);
    EXPECT_EQ(cost.acceptance.cycles(1), 5);
    ASSERT_EQ(cost.observed.count("verify k=4"), 1u);
    EXPECT_EQ(cost.observed.at("verify k=4").runs, 1);
    EXPECT_TRUE(router.written());
  }
  // What it learned is read back by the next router of the same key.
  const ModeRouter again(g, o);
  EXPECT_EQ(again.cost_model().observed.count("verify k=4"), 1u);
  EXPECT_FALSE(again.stored());  // runs without pass times: not a timed cost model
}

}  // namespace
}  // namespace canvas
