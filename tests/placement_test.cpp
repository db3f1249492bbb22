// Placement per operation (model/placement.h): the partial backend runs only the matrix products, the rest
// falls back to the CPU's executor, and every model gives the CPU's logits bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "bench/synthetic.h"
#include "model/model.h"
#include "model/placement.h"
#include "test_util.h"

namespace canvas {
namespace {

// The logits (and fused-head statistics) of the passes a decode loop makes: a prompt, an AR step, a block
// with groups, and on decoder models the decoder's passes (with and without self-conditioning, the fused
// head, kept canvas K/V over part of the canvas) and a batch mixing an encoder and a decoder request.
std::vector<std::vector<float>> passes(const Model& m, ThreadPool* pool) {
  const ModelConfig& c = m.config;
  const int64_t V = c.vocab;
  std::vector<std::vector<float>> out;
  std::vector<int32_t> tokens(32), zeros(32, 0), ones(32, 1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919 + 13) % uint64_t(V));
  KvCache cache(c, 48);
  ForwardRequest prompt;
  prompt.tokens = tokens.data();
  prompt.n = 10;
  prompt.groups = zeros.data();
  for (int i = 0; i < 10; ++i) prompt.logit_rows.push_back(i);
  out.emplace_back(size_t(10 * V));
  prompt.logits = out.back().data();
  forward(m, cache, prompt, pool);
  ForwardRequest block;
  block.tokens = tokens.data() + 10;
  block.n = 6;
  block.pos0 = 10;
  block.groups = ones.data();
  block.logit_rows = {0, 5};
  out.emplace_back(size_t(2 * V));
  block.logits = out.back().data();
  forward(m, cache, block, pool);
  if (!c.has_decoder) return out;
  std::vector<float> previous(size_t(6 * V));
  for (size_t i = 0; i < previous.size(); ++i) previous[i] = float(int((i * 2654435761u) % 1000) - 500) / 100.f;
  ForwardRequest canvas;
  canvas.decoder = true;
  canvas.tokens = tokens.data() + 16;
  canvas.n = 6;
  canvas.pos0 = 16;
  canvas.self_cond = previous.data();
  canvas.logit_rows = {0, 1, 2, 3, 4, 5};
  out.emplace_back(size_t(6 * V));
  canvas.logits = out.back().data();
  forward(m, cache, canvas, pool);
  std::vector<HeadRowStats> stats(6);
  ForwardRequest fused = canvas;
  fused.logits = nullptr;
  fused.head_stats = stats.data();
  fused.head.temperature = 0.7f;
  fused.head.seed = 5;
  forward(m, cache, fused, pool);
  out.emplace_back();
  for (const HeadRowStats& s : stats) out.back().insert(out.back().end(), {s.plain.entropy, float(s.sample), s.p_sample});
  KvCache kept(c, 6);
  ForwardRequest full = canvas;
  full.canvas_kv = &kept;
  out.emplace_back(size_t(6 * V));
  full.logits = out.back().data();
  forward(m, cache, full, pool);
  const int32_t rows[] = {1, 4};
  ForwardRequest part = full;
  part.n = 2;
  part.canvas_rows = rows;
  part.logit_rows = {0, 1};
  out.emplace_back(size_t(2 * V));
  part.logits = out.back().data();
  forward(m, cache, part, pool);
  KvCache other(c, 48);
  ForwardRequest encoder = prompt, decoder = canvas;
  out.emplace_back(size_t(10 * V));
  encoder.logits = out.back().data();
  out.emplace_back(size_t(6 * V));
  decoder.logits = out.back().data();
  KvCache* caches[] = {&other, &cache};
  const ForwardRequest mixed[] = {encoder, decoder};
  forward_batch(m, caches, mixed, pool);
  return out;
}

void expect_bitwise_equal(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                          const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size()) << what << " pass " << i;
    EXPECT_EQ(0, std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float))) << what << " pass " << i;
  }
}

void check_through_partial_backend(Model m, const std::string& what) {
  ThreadPool pool(2);
  const auto cpu = passes(m, &pool);
  m.primitives = make_partial_backend();
  const auto placed = passes(m, &pool);
  expect_bitwise_equal(cpu, placed, what);
  const PlacementStats s = m.primitives->stats();
  EXPECT_GT(s.on_backend[size_t(Primitive::Matmul)], 0) << what;
  EXPECT_EQ(s.on_cpu[size_t(Primitive::Matmul)], 0) << what;
  EXPECT_GT(s.on_cpu[size_t(Primitive::Attention)], 0) << what;
  EXPECT_EQ(s.on_backend[size_t(Primitive::Attention)], 0) << what;
  EXPECT_GT(s.copies_to_backend, 0) << what;
  EXPECT_GT(s.copies_to_cpu, 0) << what;
}

TEST(Placement, ShippedModelsThroughThePartialBackendGiveTheCpuLogits) {
  for (const char* name : {"text-dg.gguf", "text-dg-chat.gguf", "text-masked.gguf", "text-ar.gguf", "sudoku-masked.gguf"})
    check_through_partial_backend(Model::load(test::source_path(std::string("models/") + name)), name);
}

TEST(Placement, FixturesThroughThePartialBackendGiveTheCpuLogits) {
  for (const char* path : {"tests/fixtures/tiny-llada.gguf", "tests/fixtures/tiny-dream.gguf",
                           "tests/fixtures/tiny-llada-moe.gguf", "tests/fixtures/tiny-diffusion-gemma"})
    check_through_partial_backend(Model::load(test::source_path(path)), path);
  ThreadPool pool(2);
  for (const char* shape : {"diffusion-gemma:tiny", "llada-moe:tiny"}) {
    bench::SyntheticOptions options;
    options.type = DType::Q8_0;
    options.seed = 3;
    const auto synthetic = bench::build_synthetic_model(bench::find_synthetic_shape(shape), options, &pool);
    check_through_partial_backend(synthetic->model, shape);
  }
}

TEST(Placement, PrimitivesKeptOnTheCpuRunThere) {
  ThreadPool pool(2);
  bench::SyntheticOptions options;
  options.type = DType::Q8_0;
  const auto synthetic = bench::build_synthetic_model(bench::find_synthetic_shape("llada-moe:tiny"), options, &pool);
  Model m = synthetic->model;
  const auto cpu = passes(m, &pool);
  m.primitives = make_partial_backend();
  // Layer 0's products stay on the CPU, the others go to the backend.
  m.primitives->keep_on_cpu = [](Primitive p, int64_t layer) { return p == Primitive::Matmul && layer == 0; };
  expect_bitwise_equal(cpu, passes(m, &pool), "llada-moe:tiny, layer 0 kept");
  const PlacementStats s = m.primitives->stats();
  EXPECT_GT(s.on_cpu[size_t(Primitive::Matmul)], 0);
  EXPECT_GT(s.on_backend[size_t(Primitive::Matmul)], 0);
}

}  // namespace
}  // namespace canvas
