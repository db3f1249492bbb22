// Per-layer key/value storage indexed by absolute position, with each position's visibility group.
#pragma once
#include <cstdint>
#include <vector>

namespace canvas {

struct ModelConfig;

class KvCache {
 public:
  KvCache(const ModelConfig& config, int64_t capacity);

  int64_t capacity() const { return capacity_; }
  int64_t head_stride() const { return capacity_ * head_dim_; }  // floats between kv heads
  float* keys(int64_t layer) { return k_[layer].data(); }
  float* values(int64_t layer) { return v_[layer].data(); }
  int32_t* groups() { return groups_.data(); }
  int64_t bytes() const;

 private:
  int64_t capacity_, n_kv_heads_, head_dim_;
  std::vector<std::vector<float>> k_, v_;  // [layer][kv_head][position][head_dim]
  std::vector<int32_t> groups_;           // [position]
};

}  // namespace canvas
