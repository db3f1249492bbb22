// Tensor views: a typed, shaped window onto memory that someone else owns (an mmap, an arena, a vector).
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace canvas {

// Shape follows ggml: ne[0] is the contiguous (row) dimension, ne[1] counts rows, ne[2], ne[3] stack
// matrices (e.g. experts). Rows are densely packed: row r starts at data + r * row_bytes(type, ne[0]).
struct TensorView {
  std::string name;
  DType type = DType::F32;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  int n_dims = 1;
  const void* data = nullptr;

  int64_t cols() const { return ne[0]; }
  int64_t rows() const { return ne[1] * ne[2] * ne[3]; }
  int64_t elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t row_size() const { return row_bytes(type, ne[0]); }
  int64_t bytes() const { return row_size() * rows(); }
  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + r * row_size(); }
  // The i-th matrix of a stack (ne[2] index), as a 2-D view.
  TensorView matrix(int64_t i) const {
    TensorView v = *this;
    v.ne = {ne[0], ne[1], 1, 1};
    v.n_dims = 2;
    v.data = static_cast<const uint8_t*>(data) + i * ne[1] * row_size();
    return v;
  }
  const float* f32() const { return static_cast<const float*>(data); }
  std::string shape_string() const;
};

}  // namespace canvas
