// Step-level batching measured on the shipped text model: one forward_batch over the steps of k requests
// against the same k steps as k separate forward passes (what canvas serve does with --parallel k versus
// --parallel 1), for an AR step (2 rows: the last token and a [MASK], the masked model's AR mode) and a
// masked-diffusion step with the prefix cache (32 rows). items/s = request-steps per second; the ratio of
// the two rows at one k is the batching speed-up. Needs models/text-masked.gguf.
//   build/canvas_bench_kernels --benchmark_filter=ServeStep --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true (one command line)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"

namespace {

using namespace canvas;

const Model& text_model() {
  static const Model model = Model::load(std::string(CANVAS_SOURCE_DIR) + "/models/text-masked.gguf");
  return model;
}

ThreadPool* pool() {
  const char* env = std::getenv("CANVAS_BENCH_THREADS");
  static ThreadPool p(env ? std::atoi(env) : 2);
  return &p;
}

// k requests, each with a 16-token prompt already in its cache and `rows` new rows per step.
struct Steps {
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<KvCache*> cache_ptrs;
  std::vector<std::vector<int32_t>> tokens, groups;
  std::vector<std::vector<float>> logits;
  std::vector<ForwardRequest> requests;
  Steps(const Model& m, int64_t k, int64_t rows) {
    const int64_t prompt = 16;
    for (int64_t i = 0; i < k; ++i) {
      caches.push_back(std::make_unique<KvCache>(m.config, prompt + rows));
      cache_ptrs.push_back(caches.back().get());
      std::vector<int32_t> p(size_t(prompt), int32_t(65 + i % 26)), g(size_t(prompt), 0);
      ForwardRequest fill;
      fill.tokens = p.data();
      fill.n = prompt;
      fill.groups = g.data();
      forward(m, *caches.back(), fill, pool());
      tokens.emplace_back(size_t(rows), m.config.mask_token);
      tokens.back()[0] = int32_t(97 + i % 26);
      groups.emplace_back(size_t(rows), 1);
      logits.emplace_back(size_t(rows * m.config.vocab));
    }
    for (int64_t i = 0; i < k; ++i) {
      ForwardRequest r;
      r.tokens = tokens[size_t(i)].data();
      r.n = rows;
      r.pos0 = prompt;
      r.groups = groups[size_t(i)].data();
      for (int64_t j = 0; j < rows; ++j) r.logit_rows.push_back(int32_t(j));
      r.logits = logits[size_t(i)].data();
      requests.push_back(r);
    }
  }
};

void BM_ServeStepBatched(benchmark::State& state) {
  const Model& m = text_model();
  Steps s(m, state.range(0), state.range(1));
  for (auto _ : state) forward_batch(m, s.cache_ptrs, s.requests, pool());
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void BM_ServeStepOneByOne(benchmark::State& state) {
  const Model& m = text_model();
  Steps s(m, state.range(0), state.range(1));
  for (auto _ : state)
    for (size_t i = 0; i < s.requests.size(); ++i) forward(m, *s.cache_ptrs[i], s.requests[i], pool());
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void serve_step_args(benchmark::internal::Benchmark* b) {
  for (int64_t rows : {2, 32})
    for (int64_t k : {1, 4, 16, 64}) b->Args({k, rows});
  b->ArgNames({"requests", "rows"})->UseRealTime();
}

}  // namespace

BENCHMARK(BM_ServeStepBatched)->Apply(serve_step_args);
BENCHMARK(BM_ServeStepOneByOne)->Apply(serve_step_args);
