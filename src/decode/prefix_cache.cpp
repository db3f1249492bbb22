// PrefixCache: K/V kept between generations.
#include "decode/prefix_cache.h"

#include <algorithm>

#include "model/model.h"

namespace canvas {

KvCache& PrefixCache::acquire(const Model& model, const std::vector<int32_t>& prompt, int64_t capacity,
                              int64_t* reused) {
  if (cache_ && model_ == &model && cache_->capacity() < capacity && !cache_->backend_state) {
    // Grow geometrically, keeping the K/V: a conversation's prompt gets longer every turn.
    cache_->grow(std::max(capacity, 2 * cache_->capacity()), int64_t(tokens_.size()));
  } else if (!cache_ || model_ != &model || cache_->capacity() < capacity) {
    cache_ = std::make_unique<KvCache>(model.config, capacity);
    model_ = &model;
    tokens_.clear();
  }
  const auto mismatch = std::mismatch(tokens_.begin(), tokens_.end(), prompt.begin(), prompt.end());
  const int64_t common = int64_t(mismatch.first - tokens_.begin());
  *reused = std::max<int64_t>(0, std::min<int64_t>(common, int64_t(prompt.size()) - 1));
  tokens_.clear();
  return *cache_;
}

}  // namespace canvas
