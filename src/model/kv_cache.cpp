// KvCache storage.
#include "model/kv_cache.h"

#include "core/error.h"
#include "model/config.h"

namespace canvas {

KvCache::KvCache(const ModelConfig& config, int64_t capacity) : capacity_(capacity) {

  check(capacity > 0, "KV cache capacity must be positive");
  for (int64_t l = 0; l < config.n_layers; ++l) {
    const LayerAttention a = config.attention_of(l);
    const size_t per_layer = size_t(a.n_kv_heads * capacity_ * a.head_dim);
    head_dim_.push_back(a.head_dim);
    k_.emplace_back(per_layer);
    v_.emplace_back(per_layer);
  }
  groups_.assign(size_t(capacity), 0);
}

int64_t KvCache::bytes() const {
  int64_t total = int64_t(groups_.size() * sizeof(int32_t));
  for (const auto& layer : k_) total += int64_t(layer.size() * sizeof(float)) * 2;
  return total;
}

}  // namespace canvas
