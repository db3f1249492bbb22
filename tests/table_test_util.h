// Shared helpers of the tests of products with a vocabulary table (the fused LM head, the soft
// embedding): random tables stored in a weight type, random rows.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "ops/matmul.h"

namespace canvas::test {

struct QuantizedTable {
  std::vector<uint8_t> bytes;
  TensorView view;
};

// vocab rows of `hidden` normal values (std `scale`), each quantised to `type`, as a view named `name`.
inline QuantizedTable random_table(DType type, int64_t vocab, int64_t hidden, uint64_t seed, double scale,
                                   const std::string& name) {
  QuantizedTable t;
  const int64_t rb = row_bytes(type, hidden);
  t.bytes.resize(size_t(rb * vocab));
  Rng rng(seed);
  std::vector<float> row(static_cast<size_t>(hidden));
  for (int64_t v = 0; v < vocab; ++v) {
    for (float& value : row) value = float(rng.normal() * scale);
    quantize_row(type, row.data(), t.bytes.data() + v * rb, hidden);
  }
  t.view.name = name;
  t.view.type = type;
  t.view.ne = {hidden, vocab, 1, 1};
  t.view.n_dims = 2;
  t.view.data = t.bytes.data();
  return t;
}

// n normal values with std `scale`.
inline std::vector<float> random_normals(int64_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& value : x) value = float(rng.normal() * scale);
  return x;
}

}  // namespace canvas::test
