// KvCache storage.
#include "model/kv_cache.h"

#include "core/error.h"
#include "model/config.h"

namespace canvas {

KvCache::KvCache(const ModelConfig& config, int64_t capacity)
    : capacity_(capacity), n_kv_heads_(config.n_kv_heads), head_dim_(config.head_dim) {
  check(capacity > 0, "KV cache capacity must be positive");
  const size_t per_layer = size_t(n_kv_heads_ * capacity_ * head_dim_);
  k_.assign(size_t(config.n_layers), std::vector<float>(per_layer));
  v_.assign(size_t(config.n_layers), std::vector<float>(per_layer));
  groups_.assign(size_t(capacity), 0);
}

int64_t KvCache::bytes() const {
  int64_t total = int64_t(groups_.size() * sizeof(int32_t));
  for (const auto& layer : k_) total += int64_t(layer.size() * sizeof(float)) * 2;
  return total;
}

}  // namespace canvas
