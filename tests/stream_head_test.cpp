// DiffusionGemma's entropy-bound decoding through the fused streaming LM head, on the tiny fixture
// (tests/fixtures/tiny-diffusion-gemma): a streamed decoder pass reduces to what the materialised logits
// give, a soft-embedding self-conditioning input equals the logits one, and the streamed sampler decodes
// like the materialised one near greedy, accepts by its own entropies and does not depend on threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "decode/uniform_state.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "ops/matmul.h"
#include "ops/ops.h"
#include "entropy_bound_test_util.h"
#include "test_util.h"

namespace canvas {
namespace {

std::string model_dir() { return test::fixture("tiny-diffusion-gemma"); }

const std::vector<int32_t> kPrompt = {2, 105, 17, 250, 33, 4, 198, 61, 77, 120, 9, 286};

std::vector<int32_t> random_canvas(int64_t n, int64_t vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> canvas(static_cast<size_t>(n));
  for (int32_t& t : canvas) t = int32_t(rng.below(uint64_t(vocab)));
  return canvas;
}

// |a - b| within 1e-5 of b's magnitude (at least 1: entropies and probabilities near 0 are compared
// absolutely).
void expect_near_relative(double a, double b, const std::string& what) {
  EXPECT_LE(std::fabs(a - b), 1e-5 * std::max(1.0, std::fabs(b))) << what << ": " << a << " vs " << b;
}

void expect_stats_equal(const RowStats& got, const RowStats& want, const std::string& what) {
  EXPECT_EQ(got.argmax, want.argmax) << what;
  expect_near_relative(got.max, want.max, what + " max");
  expect_near_relative(got.logsumexp, want.logsumexp, what + " logsumexp");
  expect_near_relative(got.p_top1, want.p_top1, what + " p_top1");
  expect_near_relative(got.p_top2, want.p_top2, what + " p_top2");
  expect_near_relative(got.entropy, want.entropy, what + " entropy");
}

// A decoder pass over `canvas` after the prompt in `cache`, with either self-conditioning input.
ForwardRequest decoder_request(const std::vector<int32_t>& canvas) {
  ForwardRequest req;
  req.tokens = canvas.data();
  req.n = int64_t(canvas.size());
  req.pos0 = int64_t(kPrompt.size());
  req.decoder = true;
  for (int32_t i = 0; i < int32_t(canvas.size()); ++i) req.logit_rows.push_back(i);
  return req;
}

KvCache encoded_prompt(const Model& model, int64_t canvas_length) {
  KvCache cache(model.config, int64_t(kPrompt.size()) + canvas_length);
  std::vector<int32_t> groups(kPrompt.size());
  for (size_t i = 0; i < groups.size(); ++i) groups[i] = int32_t(i);
  ForwardRequest enc;
  enc.tokens = kPrompt.data();
  enc.n = int64_t(kPrompt.size());
  enc.groups = groups.data();
  forward(model, cache, enc, nullptr);
  return cache;
}

// (a) The streamed head's plain and tempered statistics equal row_stats over the materialised logits
// (and over logits / T) of the same canvas, with and without a self-conditioning input.
TEST(StreamHead, DecoderPassStatsEqualMaterialisedLogits) {
  const Model model = Model::load(model_dir());
  const int64_t C = 16, V = model.config.vocab;
  const std::vector<int32_t> canvas = random_canvas(C, V, 3);
  ThreadPool pool(2);
  UniformStateSession session(model, int64_t(kPrompt.size()) + C, &pool);
  session.encode(kPrompt);
  const float T = 0.7f;
  HeadStreamOptions head;
  head.temperature = T;
  head.seed = 11;
  std::vector<float> logits, soft, unused;
  std::vector<HeadRowStats> stats;
  for (int pass = 0; pass < 2; ++pass) {  // pass 1: zeros; pass 2: self-conditioned on pass 1
    std::vector<float> z;  // pass 1's logits / T
    for (float v : logits) z.push_back(float(double(v) / T));
    session.decode(canvas, pass == 0 ? nullptr : &z, logits);
    std::vector<float> next_soft;
    session.decode_stream(canvas, pass == 0 ? nullptr : &soft, head, stats, next_soft);
    ASSERT_EQ(stats.size(), size_t(C));
    ASSERT_EQ(next_soft.size(), size_t(C * model.config.hidden));
    for (int64_t i = 0; i < C; ++i) {
      const float* row = &logits[size_t(i * V)];
      std::vector<float> tempered(row, row + V);
      for (float& v : tempered) v = float(double(v) / T);
      const std::string at = "pass " + std::to_string(pass) + " row " + std::to_string(i);
      expect_stats_equal(stats[size_t(i)].plain, row_stats(row, V), at + " plain");
      expect_stats_equal(stats[size_t(i)].tempered, row_stats(tempered.data(), V), at + " tempered");
      const float p_sample = float(std::exp(double(row[stats[size_t(i)].sample]) - row_stats(row, V).logsumexp));
      expect_near_relative(stats[size_t(i)].p_sample, p_sample, at + " p_sample");
    }
    soft = next_soft;
  }
}

// (b) A decoder pass fed self_cond_soft = softmax(logits / T) @ E (streamed) equals one fed the tempered
// logits themselves; both differ clearly from the pass without self-conditioning.
TEST(StreamHead, SoftEmbeddingInputEqualsTemperedLogitsInput) {
  const Model model = Model::load(model_dir());
  const int64_t C = 16, V = model.config.vocab, H = model.config.hidden;
  const std::vector<int32_t> canvas = random_canvas(C, V, 4);
  KvCache cache = encoded_prompt(model, C);
  const float T = 0.6f;

  std::vector<float> logits(size_t(C * V)), soft(size_t(C * H));
  std::vector<HeadRowStats> stats(static_cast<size_t>(C));
  ForwardRequest first = decoder_request(canvas);
  first.logits = logits.data();
  forward(model, cache, first, nullptr);
  ForwardRequest streamed = decoder_request(canvas);
  streamed.head_stats = stats.data();
  streamed.head.temperature = T;
  streamed.soft_embedding_out = soft.data();
  forward(model, cache, streamed, nullptr);

  // The soft embedding is softmax(logits / T) @ E, checked in double.
  std::vector<float> want_soft(size_t(C * H)), e_row(static_cast<size_t>(H));
  for (int64_t i = 0; i < C; ++i) {
    const float* row = &logits[size_t(i * V)];
    double top = -INFINITY, sum = 0;
    for (int64_t v = 0; v < V; ++v) top = std::max(top, double(row[v]) / T);
    for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) / T - top);
    std::vector<double> acc(static_cast<size_t>(H));
    for (int64_t v = 0; v < V; ++v) {
      get_row(model.token_embd, v, e_row.data());
      const double p = std::exp(double(row[v]) / T - top) / sum;
      for (int64_t j = 0; j < H; ++j) acc[size_t(j)] += p * e_row[size_t(j)];
    }
    for (int64_t j = 0; j < H; ++j) want_soft[size_t(i * H + j)] = float(acc[size_t(j)]);
  }
  EXPECT_LT(test::relative_error(soft, want_soft), 1e-5);

  std::vector<float> z(logits.size());
  for (size_t k = 0; k < z.size(); ++k) z[k] = float(double(logits[k]) / T);
  std::vector<float> from_logits(logits.size()), from_soft(logits.size());
  ForwardRequest with_logits = decoder_request(canvas);
  with_logits.self_cond = z.data();
  with_logits.logits = from_logits.data();
  forward(model, cache, with_logits, nullptr);
  ForwardRequest with_soft = decoder_request(canvas);
  with_soft.self_cond_soft = soft.data();
  with_soft.logits = from_soft.data();
  forward(model, cache, with_soft, nullptr);
  EXPECT_LT(test::relative_error(from_soft, from_logits), 1e-5);
  EXPECT_GT(test::relative_error(from_logits, logits), 1e-3);  // the input reaches the decoder

  // Both inputs at once is an error; so is a soft embedding without the fused head.
  ForwardRequest both = with_soft;
  both.self_cond = z.data();
  EXPECT_THROW(forward(model, cache, both, nullptr), Error);
  ForwardRequest soft_only = with_soft;
  soft_only.soft_embedding_out = soft.data();
  EXPECT_THROW(forward(model, cache, soft_only, nullptr), Error);
}

// Runs the sampler on the fixture through a UniformStateSession and records every StepEvent's accepted
// positions (sorted), confidences and canvas, and the tempered entropies each streamed pass returned.
struct Recorded {
  EntropyBoundResult result;
  std::vector<std::vector<int64_t>> accepted;  // per step, sorted
  std::vector<std::vector<int64_t>> accepted_in_order;
  std::vector<std::vector<float>> confidence;
  std::vector<std::vector<float>> entropies;    // streamed passes only
  std::vector<std::vector<HeadRowStats>> stats;  // streamed passes only
  std::vector<std::vector<int32_t>> canvases;   // the region after each step
  std::vector<uint64_t> row_ids;                // the noise row ids of every streamed pass
};

Recorded run_sampler(const Model& model, const EntropyBoundParams& p, int threads) {
  Recorded run;
  ThreadPool pool(threads);
  UniformStateSession session(model, uniform_state_capacity(int64_t(kPrompt.size()), p), &pool);
  session.encode(kPrompt);
  DiffusionModelHooks hooks = session.hooks();
  const auto decode_stream = hooks.decode_stream;
  if (p.stream_head) hooks.decode = nullptr;  // the streamed path must not need the materialising hook
  hooks.decode_stream = [&](const std::vector<int32_t>& canvas, const std::vector<float>* soft,
                            const HeadStreamOptions& head, std::vector<HeadRowStats>& stats,
                            std::vector<float>& soft_out) {
    decode_stream(canvas, soft, head, stats, soft_out);
    run.row_ids.insert(run.row_ids.end(), head.row_ids, head.row_ids + canvas.size());
    run.stats.push_back(stats);
    std::vector<float> h;
    for (const HeadRowStats& s : stats) h.push_back(s.tempered.entropy);
    run.entropies.push_back(h);
  };
  DecodeCallbacks callbacks;
  callbacks.on_step = [&](const StepEvent& e) {
    std::vector<int64_t> in_order;
    const int64_t offset = int64_t(e.canvas->size()) - p.canvas_length;
    for (int64_t i : e.committed) in_order.push_back(i - offset);
    std::vector<int64_t> sorted = in_order;
    std::sort(sorted.begin(), sorted.end());
    run.accepted_in_order.push_back(in_order);
    run.accepted.push_back(sorted);
    run.confidence.push_back(e.confidence);
    run.canvases.push_back(*e.canvas);
  };
  run.result = generate_entropy_bound(hooks, p, callbacks, &pool);
  return run;
}

// (c) Near greedy (T = 1e-4: every sample is the argmax on both paths) the streamed sampler decodes what
// the materialised one decodes: tokens, steps and the accepted set of every step.
TEST(StreamHead, NearGreedySamplerEqualsMaterialised) {
  const Model model = Model::load(model_dir());
  EntropyBoundParams p = test::small_entropy_bound_params();
  p.t_min = p.t_max = 1e-4f;
  const Recorded materialised = run_sampler(model, p, 2);
  p.stream_head = true;
  const Recorded streamed = run_sampler(model, p, 2);
  EXPECT_EQ(streamed.result.tokens, materialised.result.tokens);
  EXPECT_EQ(streamed.result.steps_per_canvas, materialised.result.steps_per_canvas);
  EXPECT_EQ(streamed.result.passes, materialised.result.passes);
  EXPECT_EQ(streamed.accepted, materialised.accepted);
  EXPECT_EQ(streamed.canvases, materialised.canvases);  // the re-noising draws too
  ASSERT_EQ(streamed.confidence.size(), materialised.confidence.size());
  for (size_t s = 0; s < streamed.confidence.size(); ++s)
    EXPECT_LT(test::relative_error(streamed.confidence[s], materialised.confidence[s]), 1e-5) << "step " << s;
  EXPECT_EQ(int64_t(streamed.result.tokens.size()), p.max_new_tokens);
}

// (d) The streamed path's tokens depend on the seed only, not on the thread count; every draw has its
// own noise row; a different seed gives different tokens.
TEST(StreamHead, SameSeedSameTokensAtAnyThreadCount) {
  const Model model = Model::load(model_dir());
  EntropyBoundParams p = test::small_entropy_bound_params();
  p.stream_head = true;
  const Recorded one = run_sampler(model, p, 1);
  const Recorded two = run_sampler(model, p, 2);
  EXPECT_EQ(one.result.tokens, two.result.tokens);
  EXPECT_EQ(one.result.steps_per_canvas, two.result.steps_per_canvas);
  EXPECT_EQ(one.canvases, two.canvases);
  EXPECT_EQ(one.confidence, two.confidence);
  // Every draw has its own noise row: unique per (canvas, step, position).
  std::vector<uint64_t> ids = one.row_ids;
  EXPECT_EQ(ids.size(), size_t(one.result.passes * p.canvas_length));
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end()) << "a noise row id repeats";
  p.seed = 6;
  EXPECT_NE(run_sampler(model, p, 2).result.tokens, one.result.tokens);
}

// (e) Every streamed step accepts exactly entropy_bound_accept of the streamed tempered entropies, keeps
// the Gumbel sample at accepted positions with confidence p_sample, and commits the last step's plain
// argmax canvas.
TEST(StreamHead, AcceptsByTheStreamedEntropies) {
  const Model model = Model::load(model_dir());
  EntropyBoundParams p = test::small_entropy_bound_params();
  p.stream_head = true;
  p.entropy_bound = 4.0f;
  const Recorded run = run_sampler(model, p, 2);
  ASSERT_EQ(run.accepted_in_order.size(), run.stats.size());
  ASSERT_EQ(run.stats.size(), size_t(run.result.passes));
  bool some_rejected = false, some_sample_not_argmax = false;
  int64_t step_in_canvas = 0;
  size_t canvas_index = 0;
  std::vector<int32_t> committed;
  for (size_t s = 0; s < run.stats.size(); ++s) {
    std::vector<float> h;
    for (float e : run.entropies[s]) h.push_back(std::max(e, 0.f));
    EXPECT_EQ(run.accepted_in_order[s], entropy_bound_accept(h, p.entropy_bound)) << "step " << s;
    some_rejected |= run.accepted[s].size() < size_t(p.canvas_length);
    const int64_t offset = int64_t(run.canvases[s].size()) - p.canvas_length;
    for (size_t k = 0; k < run.accepted_in_order[s].size(); ++k) {
      const int64_t i = run.accepted_in_order[s][k];
      const HeadRowStats& st = run.stats[s][size_t(i)];
      EXPECT_EQ(run.canvases[s][size_t(offset + i)], st.sample) << "step " << s << " position " << i;
      EXPECT_EQ(run.confidence[s][k], st.p_sample);
      some_sample_not_argmax |= st.sample != st.plain.argmax;
    }
    if (++step_in_canvas == run.result.steps_per_canvas[canvas_index]) {  // the canvas's last step
      for (const HeadRowStats& st : run.stats[s]) committed.push_back(st.plain.argmax);
      step_in_canvas = 0;
      ++canvas_index;
    }
  }
  committed.resize(size_t(p.max_new_tokens));
  EXPECT_EQ(run.result.tokens, committed);
  EXPECT_TRUE(some_rejected) << "the bound should leave some positions to re-noise";
  EXPECT_TRUE(some_sample_not_argmax) << "at T >= 0.4 some accepted sample should not be the argmax";
}

TEST(StreamHead, StreamWithoutTheHookIsAClearError) {
  DiffusionModelHooks hooks;
  hooks.vocab = 10;
  hooks.decode = [](const std::vector<int32_t>&, const std::vector<float>*, std::vector<float>&) {};
  hooks.encode = [](const std::vector<int32_t>&) {};
  EntropyBoundParams p = test::small_entropy_bound_params();
  p.stream_head = true;
  try {
    generate_entropy_bound(hooks, p);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("decode_stream"), std::string::npos) << e.what();
  }
}

using test::json_number;
using test::json_tokens;

TEST(StreamHeadCli, GenerateChatAndBench) {
  auto r = test::run_canvas("generate --help");
  EXPECT_NE(r.output.find("--stream-head"), std::string::npos);
  const std::string base = "generate -s 0 -m " + model_dir() + " -p 'the sea' -n 20 --block-length 10 --steps 4 --json";
  const auto one = test::run_canvas(base + " --stream-head -t 1", false);
  const auto two = test::run_canvas(base + " --stream-head -t 2", false);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_FALSE(json_tokens(one.output).empty()) << one.output;
  EXPECT_EQ(json_tokens(one.output), json_tokens(two.output));
  r = test::run_canvas("generate -s 0 -m " + model_dir() + " -p hi -n 4 --mode ar --stream-head");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--stream-head applies to"), std::string::npos) << r.output;
  test::TempDir tmp;
  const std::string input = tmp.path("lines.txt");
  std::ofstream(input) << "hi\n";
  r = test::run_canvas("chat -m " + model_dir() + " -n 8 --steps 3 --stream-head --verbose < " + input);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tokens_per_forward"), std::string::npos) << r.output;
  r = test::run_canvas("bench --synthetic diffusion-gemma:tiny --layers 2 -p 8 --block-length 16 --warmup 0 "
                       "--repeats 1 -t 2 --no-roofs --modes stream,self-cond");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("decoder, canvas 16, stream head + soft emb"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("decoder, canvas 16, self-cond logits"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace canvas
