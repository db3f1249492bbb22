// The CUDA backend's kernels behind plain C++ declarations (no CUDA header needed to call them):
// device memory, weights uploaded once, and the transformer's ops on device pointers, each the twin of
// the CPU op of the same name in ops/ops.h (tests/cuda_test.cpp compares them).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "ops/ops.h"

namespace canvas::cuda {

// True when a CUDA device can be used; otherwise false and, if reason is non-null, why (no driver, no
// device, ...). Never throws.
bool available(std::string* reason = nullptr);
// "NAME (sm_XY, N GiB)" of device 0; throws Error when none is available.
std::string device_description();
// Waits for every kernel queued so far; throws Error naming the failed kernel's error, if any.
void synchronize();

// Device memory of a fixed size, freed on destruction. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void upload(const void* host, size_t bytes, size_t offset = 0);
  void download(void* host, size_t bytes, size_t offset = 0) const;
  size_t bytes() const { return bytes_; }
  void* data() { return ptr_; }
  const void* data() const { return ptr_; }
  template <typename T> T* as() { return static_cast<T*>(ptr_); }
  template <typename T> const T* as() const { return static_cast<const T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A weight matrix [rows x cols] on the device, uploaded once. F32 stays f32 (cuBLAS sgemm); BF16 stays
// bf16; F16 and every quantised type (Q8_0, Q4_0, K-quants, ...) are dequantised on the host row by
// row (ops get_row, so interleaved layouts are read correctly) and stored as f16, the tensor cores'
// input type. Products accumulate in f32.
class DeviceMatrix {
 public:
  enum class Storage { F32, F16, BF16 };
  static DeviceMatrix upload(const TensorView& w);
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  Storage storage() const { return storage_; }
  const void* data() const { return buffer_.data(); }

 private:
  DeviceBuffer buffer_;
  int64_t rows_ = 0, cols_ = 0;
  Storage storage_ = Storage::F32;
};

// y[m x w.rows()] = x[m x w.cols()] @ w^T, all row-major device f32. For f16/bf16 weights x is first
// rounded to the weight's type (a scratch buffer the call owns), then multiplied with f32 accumulation.
void matmul(const DeviceMatrix& w, const float* x, int64_t m, float* y);

// ---- element-wise and row-wise ops: device pointers, same meaning as ops/ops.h ----
// rows rows of n elements: y = x * rsqrt(mean(x^2) + eps) * w (w may be null). In place allowed.
void rms_norm(const float* x, const float* w, int64_t rows, int64_t n, float eps, float* y);
// n_rows rows of n_heads heads; row r at position pos[r] (device int32). RopeParams as on the CPU,
// proportional RoPE (active_pairs < rot_dims / 2) included.
void rope(float* x, int64_t n_rows, int n_heads, const int32_t* pos, const RopeParams& p);
void swiglu(const float* gate, const float* up, int64_t n, float* out);
void geglu(const float* gate, const float* up, int64_t n, float* out);
// x = c * tanh(x / c) over n elements (c > 0).
void softcap(float* x, int64_t n, float c);
// out[i] = row_stats(logits row i) for rows rows of vocab logits; out is device memory of RowStats.
void row_stats(const float* logits, int64_t rows, int64_t vocab, RowStats* out);
// Attention with the CPU's layout and mask rules (ops/ops.h AttentionMask): the mask arrays are device
// int32 pointers (or null as there). out must not alias q here.
void attention(const float* q, int64_t n_q, int64_t ldq, const float* k, const float* v, int64_t n_keys,
               int64_t kv_head_stride, const AttentionMask& mask, const AttentionShape& shape, float* out,
               int64_t ldo);

}  // namespace canvas::cuda
