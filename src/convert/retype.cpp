// Tensor re-typing shared by convert and quantize, and the report of what was written.
#include "convert/retype.h"

#include <cmath>

#include "core/error.h"
#include "ops/matmul.h"

namespace canvas {

DType stored_type(const TensorView& t, DType requested, std::string* reason) {
  reason->clear();
  if (t.n_dims == 1) {
    if (requested != DType::F32) *reason = "1-D tensors stay f32";
    return DType::F32;
  }
  const DTypeInfo& info = dtype_info(requested);
  if (info.block_size > 1 && t.ne[0] % info.block_size != 0) {
    const DType fallback = t.ne[0] % kQK == 0 ? DType::Q8_0 : DType::F16;
    *reason = "rows of " + std::to_string(t.ne[0]) + " values are not whole " +
              std::to_string(info.block_size) + "-value blocks of " + dtype_name(requested) +
              (fallback == DType::Q8_0 ? "; q8_0's 32-value blocks fit" : "; no block type fits");
    return fallback;
  }
  return requested;
}

void add_retyped(GgufWriter& w, const std::string& name, const TensorView& t, DType type,
                 std::deque<std::vector<uint8_t>>& storage) {
  std::vector<int64_t> shape(t.ne.begin(), t.ne.begin() + t.n_dims);
  if (type == t.type) {
    w.add_tensor(name, type, shape, t.data, uint64_t(t.bytes()));
    return;
  }
  check(matmul_supports(t.type) || t.type == DType::F32,
        "tensor " + t.name + " is stored as " + dtype_name(t.type) + ", which canvas cannot convert");
  const int64_t cols = t.ne[0], rows = t.rows(), out_row = row_bytes(type, cols);
  storage.emplace_back(size_t(out_row * rows));
  std::vector<float> row(static_cast<size_t>(cols)), back(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(t.type, t.row(r), row.data(), cols);
    uint8_t* out = storage.back().data() + r * out_row;
    quantize_row(type, row.data(), out, cols);
    // Read the row back: a value beyond what the type's f16 (block) scales hold (|x| above 65504, or
    // ~8e6 for q8_0) would otherwise be written as Inf or NaN and make a file every load refuses.
    dequantize_row(type, out, back.data(), cols);
    for (int64_t j = 0; j < cols; ++j)
      if (!std::isfinite(back[size_t(j)]))
        throw Error("tensor " + t.name + " row " + std::to_string(r) + ": value " + std::to_string(row[size_t(j)]) +
                    (std::isfinite(row[size_t(j)]) ? " does not fit " + std::string(dtype_name(type)) +
                                                         " (its f16 scales overflow); keep this tensor in f32"
                                                   : " is not finite in the source"));
  }
  w.add_tensor(name, type, shape, storage.back().data(), storage.back().size());
}

uint32_t llama_file_type(DType type) {
  switch (type) {
    case DType::F32:
      return 0;
    case DType::F16:
      return 1;
    case DType::Q4_0:
      return 2;
    case DType::Q4_1:
      return 3;
    case DType::Q8_0:
      return 7;
    case DType::Q5_0:
      return 8;
    case DType::Q5_1:
      return 9;
    case DType::Q4_K:
      return 14;
    case DType::Q5_K:
      return 16;
    case DType::Q6_K:
      return 18;
    case DType::BF16:
      return 32;
    default:
      throw Error(std::string("no llama.cpp file type for ") + dtype_name(type));
  }
}

void RetypeReport::note(const std::string& name, const TensorView& t, DType requested, DType stored,
                        const std::string& reason) {
  ++tensors_;
  ++counts_[dtype_name(stored)];
  if (stored != requested && t.n_dims > 1)
    fallbacks_.push_back("  " + name + ": " + dtype_name(stored) + " instead of " + dtype_name(requested) +
                         " (" + reason + ")");
}

std::string RetypeReport::summary() const {
  std::string out = std::to_string(tensors_) + " tensors:";
  bool first = true;
  for (const auto& [type, n] : counts_) {
    out += (first ? " " : ", ") + std::to_string(n) + " " + type;
    first = false;
  }
  return out;
}

std::string RetypeReport::fallbacks() const {
  std::string out;
  for (const std::string& line : fallbacks_) out += line + "\n";
  return out;
}

}  // namespace canvas
