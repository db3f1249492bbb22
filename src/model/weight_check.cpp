#include "model/weight_check.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/tensors.h"
#include "ops/matmul.h"

namespace canvas {
namespace {

// The rows of a tensor of `rows` rows read under `scan`, in increasing order.
std::vector<int64_t> rows_to_read(const TensorView& t, WeightScan scan) {
  const int64_t rows = t.rows();
  std::vector<int64_t> out;
  if (scan == WeightScan::Full || t.bytes() <= kFullScanBytes || rows <= kSampledRows) {
    out.resize(size_t(rows));
    for (int64_t r = 0; r < rows; ++r) out[size_t(r)] = r;
    return out;
  }
  for (int64_t i = 0; i < kSampledRows; ++i) out.push_back(i * (rows - 1) / (kSampledRows - 1));
  return out;
}

// The error of a non-finite weight: the file first; a sampled scan says what a full one would add.
[[noreturn]] void broken(const std::string& path, WeightScan scan, const std::string& what) {
  throw Error(path + ": " + what + ": the file's weights are broken (NaN or Inf)" +
              (scan == WeightScan::Sampled
                   ? " (canvas reads a sample of each large tensor at load; --check-weights reads every weight)"
                   : ""));
}

int64_t check_tensor(const TensorView& t, WeightScan scan, const std::string& path) {
  if (!t.data) return 0;
  std::vector<float> row(size_t(t.cols()));
  int64_t read = 0;
  for (const int64_t r : rows_to_read(t, scan)) {
    get_row(t, r, row.data());
    read += t.cols();
    for (int64_t j = 0; j < t.cols(); ++j)
      if (!std::isfinite(row[size_t(j)]))
        broken(path, scan, "weight '" + t.name + "' (" + t.shape_string() + ") holds " +
                               std::to_string(row[size_t(j)]) + " at row " + std::to_string(r) + ", column " +
                               std::to_string(j));
  }
  return read;
}

}  // namespace

int64_t check_weights_finite(const Model& model, WeightScan scan, const std::string& path) {
  int64_t read = 0;
  for (const TensorSpec& spec : model_tensors(model.config)) {
    if (spec.kind == TensorKind::Scalar) continue;
    read += check_tensor(*weight_slot(model, spec.role, spec.layer), scan, path);
  }
  for (size_t l = 0; l < model.layers.size(); ++l)
    for (const float s : {model.layers[l].layer_scalar_decoder, model.layers[l].layer_scalar_encoder})
      if (!std::isfinite(s)) broken(path, scan, "layer " + std::to_string(l) + "'s layer scalar is " + std::to_string(s));
  return read;
}

}  // namespace canvas
