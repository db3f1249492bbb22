// Random-weight models of real shapes, built in memory (no file): speed tests of released model sizes
// on machines that do not hold the weights. Shapes are data: one more model is one more table entry.
#pragma once
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"

namespace canvas::bench {

struct SyntheticShape {
  std::string name;         // "llada:8b": ARCH:SIZE as given to --synthetic
  std::string description;  // what it is the shape of
  ModelConfig config;       // as config_from_gguf would read it (vocab included)
};

// Every known shape, in a fixed order.
const std::vector<SyntheticShape>& synthetic_shapes();
// Throws Error listing the known names when `name` is not one.
const SyntheticShape& find_synthetic_shape(const std::string& name);

struct SyntheticOptions {
  DType type = DType::Q4_0;  // every matrix (embeddings, projections, output); norms and biases stay f32
  int64_t layers = 0;        // > 0: keep only the first `layers` layers
  uint64_t seed = 0;
};

// Bytes the model's tensors will take (to check memory before building).
int64_t synthetic_model_bytes(const SyntheticShape& shape, const SyntheticOptions& options);

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// The Model's tensor views point into `storage`, which lives as long as this object. `model.file` is
// null: there is no GGUF behind it (use model_footprint() rather than Model::parameter_count()).
struct SyntheticModel {
  Model model;
  std::vector<std::unique_ptr<uint8_t, FreeDeleter>> storage;
  int64_t bytes = 0;
};

// Builds the model with random weights (fixed seed -> same bytes at any thread count), filling the
// quantised blocks directly and in parallel: LLaDA-8B at Q4_0 (~4.5 GB) takes seconds, not minutes.
// Throws Error when the type is not usable by matmul or the model would not fit in available memory.
std::unique_ptr<SyntheticModel> build_synthetic_model(const SyntheticShape& shape, const SyntheticOptions& options,
                                                      ThreadPool* pool);

// Writes the shape (cut by options.layers, weights as build_synthetic_model makes them) as a GGUF in the
// layout llama.cpp's branch writes (config_to_gguf's keys, a placeholder vocabulary of the model's size,
// DiffusionGemma's diffusion.* keys with a 256-token canvas and the runtime's sampler defaults), so that
// canvas and llama.cpp can time the same file. Gemma-family shapes only (Error otherwise).
void write_synthetic_gguf(const SyntheticShape& shape, const SyntheticOptions& options, const std::string& path,
                          ThreadPool* pool);

// Fills `dst` with `elements` random values of `type` (a whole number of blocks) with standard
// deviation about `stddev`; deterministic in `seed`, independent of the thread count.
void fill_random(DType type, void* dst, int64_t elements, float stddev, uint64_t seed, ThreadPool* pool);

}  // namespace canvas::bench
