// KvCache storage.
#include "model/kv_cache.h"

#include <algorithm>

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

void KvCache::grow(int64_t capacity, int64_t keep) {
  check(capacity >= capacity_ && keep >= 0 && keep <= capacity_, "KvCache::grow: bad sizes");
  check(backend_state == nullptr, "KvCache::grow: the cache's K/V live on a device");
  if (capacity == capacity_) return;
  for (size_t l = 0; l < k_.size(); ++l) {
    const int64_t d = head_dim_[l], heads = int64_t(k_[l].size()) / (capacity_ * d);
    for (std::vector<float>* side : {&k_[l], &v_[l]}) {
      std::vector<float> grown(size_t(heads * capacity * d));
      for (int64_t h = 0; h < heads; ++h)
        std::copy(side->begin() + h * capacity_ * d, side->begin() + (h * capacity_ + keep) * d,
                  grown.begin() + h * capacity * d);
      side->swap(grown);
    }
  }
  groups_.resize(size_t(capacity), 0);
  capacity_ = capacity;
}

void KvCache::copy_position(int64_t from, int64_t to) {
  check(from >= 0 && from < capacity_ && to >= 0 && to < capacity_, "KvCache::copy_position: outside the cache");
  check(backend_state == nullptr, "KvCache::copy_position: the cache's K/V live on a device");
  if (from == to) return;
  for (size_t l = 0; l < k_.size(); ++l) {
    const int64_t d = head_dim_[l], heads = int64_t(k_[l].size()) / (capacity_ * d);
    for (std::vector<float>* side : {&k_[l], &v_[l]})
      for (int64_t h = 0; h < heads; ++h)
        std::copy_n(side->begin() + (h * capacity_ + from) * d, d, side->begin() + (h * capacity_ + to) * d);
  }
  groups_[size_t(to)] = groups_[size_t(from)];
}

int64_t KvCache::bytes() const {
  int64_t total = int64_t(groups_.size() * sizeof(int32_t));
  for (const auto& layer : k_) total += int64_t(layer.size() * sizeof(float)) * 2;
  return total;
}

}  // namespace canvas
