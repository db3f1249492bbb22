// Per-layer key/value storage indexed by absolute position, with each position's visibility group.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace canvas {

struct ModelConfig;

class KvCache {
 public:
  // Each layer gets its own KV-head count and head dim (ModelConfig::attention_of), so Gemma 4's
  // sliding and full layers of different widths share one cache.
  KvCache(const ModelConfig& config, int64_t capacity);

  int64_t capacity() const { return capacity_; }
  // Floats between kv heads of a layer (capacity * that layer's head dim).
  int64_t head_stride(int64_t layer) const { return capacity_ * head_dim_[size_t(layer)]; }
  int64_t head_stride() const { return head_stride(0); }  // layer 0's (every layer's in uniform models)
  float* keys(int64_t layer) { return k_[size_t(layer)].data(); }
  float* values(int64_t layer) { return v_[size_t(layer)].data(); }
  const float* keys(int64_t layer) const { return k_[size_t(layer)].data(); }
  const float* values(int64_t layer) const { return v_[size_t(layer)].data(); }
  int32_t* groups() { return groups_.data(); }
  int64_t bytes() const;
  // More positions, keeping the K/V and groups of positions [0, keep). Host caches only (throws when a
  // backend holds the K/V).
  void grow(int64_t capacity, int64_t keep);
  // Position `from`'s K/V and group copied to position `to` (a tree pass's kept rows moved to the
  // positions they stand for). Host caches only.
  void copy_position(int64_t from, int64_t to);
  // A forward backend's own copy of this cache (e.g. its K/V in device memory, which then hold the K/V
  // instead of the host arrays here), created by the backend on first use and freed with the cache.
  std::shared_ptr<void> backend_state;
  KvCache(KvCache&&) = default;
  KvCache& operator=(KvCache&&) = default;
  KvCache(const KvCache&) = delete;  // a copy would share backend_state
  KvCache& operator=(const KvCache&) = delete;

 private:
  int64_t capacity_;
  std::vector<int64_t> head_dim_;          // [layer]
  std::vector<std::vector<float>> k_, v_;  // [layer][kv_head][position][head_dim]
  std::vector<int32_t> groups_;            // [position]
};

}  // namespace canvas
