// The bounds of model/limits.h.
#include "model/limits.h"

#include "core/error.h"
#include "core/memory_limit.h"
#include "model/config.h"

namespace canvas {

int64_t checked_context_length(int64_t tokens, const std::string& origin, const std::string& key) {
  check(tokens > 0 && tokens <= kMaxContextLength,
        origin + ": " + key + " " + std::to_string(tokens) + " is not a context length canvas can hold (1.." +
            std::to_string(kMaxContextLength) + " tokens)");
  return tokens;
}

int64_t kv_cache_bytes_per_position(const ModelConfig& config) {
  int64_t total = int64_t(sizeof(int32_t));  // the position's group
  for (int64_t l = 0; l < config.n_layers; ++l) {
    const LayerAttention a = config.attention_of(l);
    total += 2 * a.n_kv_heads * a.head_dim * int64_t(sizeof(float));
  }
  return total;
}

uint64_t max_request_kv_bytes() { return usable_memory_bytes() / 2; }

}  // namespace canvas
