// What a model's config may claim and what one request may allocate for it, checked before anything is
// sized by them.
#pragma once
#include <cstdint>
#include <string>

namespace canvas {

struct ModelConfig;

// The most tokens a model's context may hold (16M): far past any released model, and a bound on what a
// config can claim (a GGUF may say 2^62).
constexpr int64_t kMaxContextLength = int64_t(1) << 24;
// `tokens` when it is a context length in 1..kMaxContextLength, else an Error naming `origin` (the file) and
// `key`.
int64_t checked_context_length(int64_t tokens, const std::string& origin, const std::string& key);

// The bytes one position takes in a KvCache of `config` (K and V of every layer, and its group).
int64_t kv_cache_bytes_per_position(const ModelConfig& config);
// The most KV cache one request may allocate: half the memory this process may use (usable_memory_bytes).
// A context length says nothing of the machine, and a larger cache fails mid-allocation or swaps out the
// weights.
uint64_t max_request_kv_bytes();

}  // namespace canvas
