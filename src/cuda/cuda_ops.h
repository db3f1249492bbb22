// The CUDA backend's kernels behind plain C++ declarations (no CUDA header needed to call them):
// device memory, weights uploaded once, and the transformer's ops on device pointers, each the twin of
// the CPU op of the same name in ops/ops.h (tests/cuda_test.cpp compares them).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "core/tensor.h"
#include "ops/lm_head.h"
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
  // A scratch buffer's use: grows (contents not kept) to hold at least count T (at least one) and returns it.
  template <typename T> T* reserve(int64_t count) {
    const size_t bytes = size_t(count > 1 ? count : 1) * sizeof(T);
    if (bytes_ < bytes) grow(bytes);
    return as<T>();
  }

 private:
  void grow(size_t bytes);  // a new buffer of `bytes` (contents not kept), counted by scratch_growths
  void release();           // frees the memory (counted out of device_buffer_bytes)
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// How many times a scratch buffer has grown (DeviceBuffer::reserve reallocating) in this process: a
// recorded DeviceGraph holds the addresses of the buffers it was recorded with, so it is replayed only
// while this number has not changed. (Weights and KV caches never move while they exist.)
uint64_t scratch_growths();
// Bytes DeviceBuffers hold now, and the most they held at once in this process: canvas's own device
// memory (weights, KV caches, scratch), exactly; not the CUDA context, cuBLAS's workspace or the bench's
// roof measurements.
int64_t device_buffer_bytes();
int64_t device_buffer_peak_bytes();

// The backend's launches recorded once and replayed as one CUDA graph on its stream: for passes whose
// inputs all sit at fixed device addresses (their values change between replays). Move-only.
class DeviceGraph {
 public:
  DeviceGraph() = default;
  ~DeviceGraph();
  DeviceGraph(DeviceGraph&& other) noexcept;
  DeviceGraph& operator=(DeviceGraph&& other) noexcept;
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;

  // Records the kernels and copies on the device that `work` queues, without running them. Returns false
  // when they cannot be recorded (work threw, or queued something a graph cannot hold): then nothing was
  // run or kept, the error is cleared, `why` says what happened, and the caller runs the work as usual.
  bool record(const std::function<void()>& work, std::string* why);
  // Queues the recorded launches (record returned true).
  void replay();
  bool recorded() const { return exec_ != nullptr; }
  // Replays by every DeviceGraph of this process so far (for tests and reports).
  static uint64_t replays();

 private:
  void* exec_ = nullptr;
};

// A weight matrix [rows x cols] on the device, uploaded once. F32 stays f32 (cuBLAS sgemm); BF16 stays
// bf16; the quantised types whose blocks core/quant_block.h decodes (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
// Q5_K, Q6_K) stay in their GGUF block layout (Quant: the device holds the file's bytes, rows in order;
// the CPU's interleaved Q4_0 / Q8_0 layouts are read back into it), and the kernels dequantise inside the
// product. F16 and any other type are dequantised on the host row by row (ops get_row) and stored as
// f16, the tensor cores' input type. Products accumulate in f32.
class DeviceMatrix {
 public:
  enum class Storage { F32, F16, BF16, Quant };
  static DeviceMatrix upload(const TensorView& w);
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  Storage storage() const { return storage_; }
  // Quant storage: the GGUF type of the blocks. row_bytes: the device bytes of one row (any storage).
  DType quant_type() const { return quant_type_; }
  int64_t row_bytes() const { return row_bytes_; }
  // Device bytes the matrix holds.
  size_t bytes() const { return buffer_.bytes(); }
  const void* data() const { return buffer_.data(); }

 private:
  DeviceBuffer buffer_;
  int64_t rows_ = 0, cols_ = 0, row_bytes_ = 0;
  Storage storage_ = Storage::F32;
  DType quant_type_ = DType::F32;
};

// The storage DeviceMatrix::upload picks for a weight of this type (Quant for the block-decodable
// quantised types and their interleaved CPU layouts).
DeviceMatrix::Storage device_storage_of(DType type);

// y[m x w.rows()] = x[m x w.cols()] @ w^T, all row-major device f32. For f16/bf16 weights x is first
// rounded to the weight's type (a scratch buffer the call owns), then multiplied with f32 accumulation.
// Quant weights, by the rows m of x:
// - m <= kQuantGemvRows (an AR step, a few rows): a kernel that decodes each weight block once in
//   registers and dots it with every row of x in f32 (matmul_grouped's kernel with one group);
// - m <= kQuantTiledRows (a draft-and-verify cycle, a 32-row block): one tensor-core kernel that decodes
//   64 weight rows' blocks into shared memory as f16 and multiplies them by all m rows of x rounded to
//   f16 (f32 accumulation): each weight block is read once, where the register kernel's f32 arithmetic
//   grows with m. A matrix of few row tiles has its columns split into parts (about 256 thread blocks
//   in all, from the shape alone); the parts' sums are added in order afterwards;
// - more rows: chunk by chunk of weight rows, each chunk decoded to f16 in a bounded scratch buffer and
//   multiplied on the tensor cores (cuBLAS), with x rounded to f16 once.
void matmul(const DeviceMatrix& w, const float* x, int64_t m, float* y);

constexpr int64_t kQuantGemvRows = 8, kQuantTiledRows = 64;

// ---- Mixture of experts on the device: routing, the routed rows' slots, one product for all experts ----
// Nothing here comes back to the host: the host knows only n, k and the expert count.

// Each of n rows of router logits [n x n_experts]: softmax (exp and sums in double, as ops' reference
// softmax; the CPU's SIMD softmax may differ in the last bits, so an expert at a near-tie with another
// for the k-th place can differ from the CPU's choice), the k best
// experts (larger probability first, NaN last, ties to the lower index: ops top_k's order), their
// probabilities summed in that order, then the k entries in ascending expert order, each with weight p
// (normalize: p / sum), times expert_scale[e] when given (device f32, or null). Writes expert_of[r * k + j]
// and weight_of[r * k + j]. k <= 32.
void moe_route(const float* logits, int64_t n, int64_t n_experts, int64_t k, bool normalize, const float* expert_scale,
               int32_t* expert_of, float* weight_of);
// The slots of the n * k routed (row, expert) entries, grouped by expert: first[e] .. first[e + 1] are
// expert e's slots (first has n_experts + 1 entries), slot_row[s] the row slot s holds, slot_of[r * k + j]
// the slot of row r's j-th entry, begin[r] = r * k (n + 1 entries, for combine_rows). The order of an
// expert's slots is not fixed; every result is (each slot is computed on its own).
void moe_plan(const int32_t* expert_of, int64_t n, int64_t k, int64_t n_experts, int32_t* first, int32_t* slot_row,
              int32_t* slot_of, int32_t* begin);
// Grouped product, one launch for every expert: stack is n_groups matrices [rows x cols] uploaded as one
// DeviceMatrix ([n_groups * rows] x cols, a GGUF expert stack); y[s] = x[s] @ W_g^T for every slot s in
// [first[g], first[g + 1]) (device), x rows of cols floats, y rows of rows floats. Two launches: experts
// of fewer than 16 slots (and every expert of an f32 stack) in f32 on the register kernel, each warp
// owning a weight row and reading each of its blocks once per 8 slots; experts of 16 slots or more on
// the tensor cores, 64 weight rows by 16 slots a tile, the weights decoded and x rounded to f16 in shared
// memory, f32 accumulation.
void matmul_grouped(const DeviceMatrix& stack, int64_t n_groups, const int32_t* first, const float* x, float* y);

// ---- where a pass's device time goes ----
// While profiling is on, an OpSpan records a CUDA event on the stream where it starts and one where it
// ends, and synchronize() adds each finished span's device time (end - start) to the total of its path:
// the names of the spans open around it, outermost first, then its own. Spans nest (the backend's stages,
// the products' paths inside them); a nested span's time is also its parent's. Off by default: an OpSpan
// then costs a lock and a branch. A span that cannot record or read its events is dropped, never an error
// of the pass. The backend records and replays no graphs while it is on (a replayed graph would hold no
// events). `canvas bench --device cuda --profile` turns it on for one extra pass of each timed kind.
void set_profiling(bool on);
bool profiling();
struct OpTime {
  std::string name;  // the span's own name (the last of its path)
  int depth = 0;     // how many spans were open around it
  double ms = 0;     // device milliseconds, summed over the spans of this path
  int64_t spans = 0;
};
// The totals since the last call (it synchronizes first) in tree order: each path right after its
// parent's, siblings largest first; clears them.
std::vector<OpTime> take_profile();
class OpSpan {
 public:
  explicit OpSpan(const char* name);  // a string literal: kept by pointer while the span is open
  ~OpSpan();
  OpSpan(const OpSpan&) = delete;
  OpSpan& operator=(const OpSpan&) = delete;

 private:
  void* start_ = nullptr;  // the start event; null while profiling is off
};

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
// Keys that follow the cache's in attention: n rows of a pass's own K and V activations (row r, kv head h
// at k + r * ld + h * head_dim), visible to every query (a decoder canvas seeing itself).
struct ExtraKeys {
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t n = 0, ld = 0;
};
// The element type of a device KV cache: f32 (the CPU's), or f16 (half the memory; the backend's choice
// for models whose weights are not f32).
enum class KvType { F32, F16 };
inline int64_t kv_element_bytes(KvType type) { return type == KvType::F16 ? 2 : 4; }
// Attention with the CPU's layout and mask rules (ops/ops.h AttentionMask) over the n_keys keys of k / v
// (kv_type elements, the KV-cache layout), then `extra`'s (f32, not masked): one kernel, an online softmax,
// nothing written but out. The mask arrays are device int32 pointers (or null as there). out must not
// alias q here. head_dim <= 512.
void attention(const float* q, int64_t n_q, int64_t ldq, const void* k, const void* v, KvType kv_type, int64_t n_keys,
               int64_t kv_head_stride, const AttentionMask& mask, const AttentionShape& shape, float* out,
               int64_t ldo, const ExtraKeys& extra = {});

// One request of a batched pass, for one layer: where its keys are. attention_batch and scatter_kv read
// an array of these in device memory, and a row-to-request map.
struct AttentionSegment {
  void* k = nullptr;  // the request's cache, this layer's K and V (KvType elements), from the first key
  void* v = nullptr;  //   it sees (scatter_kv: from position 0)
  int64_t kv_head_stride = 0;
  int64_t row0 = 0;     // the request's first row in the pass
  AttentionMask mask;   // device arrays; the query arrays indexed from row0 (row0 + i is the request's row i)
  int32_t n_keys = 0;   // the cache's keys it sees
  int32_t own_keys = 0; // then the pass's own K/V rows row0 .. row0 + own_keys - 1 (a decoder canvas), unmasked
};
// attention() for every request of a pass in one launch: row i (of n_rows) belongs to request
// seg_of_row[i] and attends over segs[seg_of_row[i]]'s keys, then its own rows of own_k / own_v (rows of
// own_ld floats). segs and seg_of_row are device memory, read when the kernel runs: a recorded pass
// replayed later reads the key counts uploaded for that replay.
void attention_batch(const float* q, int64_t n_rows, int64_t ldq, const AttentionSegment* segs,
                     const int32_t* seg_of_row, KvType kv_type, const float* own_k, const float* own_v, int64_t own_ld,
                     const AttentionShape& shape, float* out, int64_t ldo);
// The pass's K and V rows (n rows of heads x head_dim floats) into their requests' caches, one launch:
// row i to segs[seg_of_row[i]]'s K / V at position pos[i] (device int32), as kv_type elements.
void scatter_kv(const float* k, const float* v, int64_t n, int64_t heads, int64_t head_dim, const int32_t* pos,
                const AttentionSegment* segs, const int32_t* seg_of_row, KvType kv_type);

// ---- the forward pass's data movement and element-wise steps (cuda/cuda_backend.cpp) ----
// Device pointers throughout; "rows" are row-major f32 rows.

// out[i] = row rows[i] of table (any storage) as f32, times scale. Quant rows are decoded on the device
// with core/quant_block.h, the CPU's own decoder, so they equal ops get_row's exactly.
void embed_rows(const DeviceMatrix& table, const int32_t* rows, int64_t n, float scale, float* out);
// x += y over n elements.
void add(float* x, const float* y, int64_t n);
// x = (x + y) * s over n elements.
void add_then_scale(float* x, const float* y, int64_t n, float s);
// x[r][j] += bias[j] for rows rows of width elements.
void add_to_rows(float* x, const float* bias, int64_t rows, int64_t width);
// x[r][j] *= scale[j] * s (scale null: x *= s).
void scale_columns(float* x, const float* scale, int64_t rows, int64_t width, float s);
// dst[i] = src[rows[i]] for rows of width floats.
void gather_rows(const float* src, int64_t width, const int32_t* rows, int64_t n, float* dst);
// Mixture-of-experts output: out[r] = sum over k in [begin[r], begin[r+1]) of weight[k] * results[slot[k]],
// in that order (the CPU's ascending expert order).
void combine_rows(const float* results, int64_t width, const int32_t* begin, const int32_t* slot, const float* weight,
                  int64_t n_rows, float* out);
// out[r][j] = act(gu[r][j]) * gu[r][width + j] (act: GELU-tanh if gelu, else SiLU): an expert's fused [gate; up] product split and gated.
void glu_halves(const float* gu, int64_t rows, int64_t width, bool gelu, float* out);
// p[r] = softmax(x[r] * inv_temperature), in place allowed.
void softmax_rows(const float* x, int64_t rows, int64_t n, float inv_temperature, float* p);
// y[m x w.cols()] = x[m x w.rows()] @ w (w not transposed): softmax(logits) @ E, the soft embedding.
void matmul_transposed(const DeviceMatrix& w, const float* x, int64_t m, float* y);
// The fused head's statistics (ops/lm_head.h HeadRowStats) of rows rows of final logits (soft-cap
// already applied): plain and tempered row statistics, the Gumbel-max sample with the CPU's noise
// (seed, row_ids[i] (device; null: i), vocabulary index) and its plain probability.
void head_stats(const float* logits, int64_t rows, int64_t vocab, float temperature, uint64_t seed,
                const uint64_t* row_ids, HeadRowStats* out);
// Synchronous copies between host and device memory, and within the device.
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void copy_on_device(void* dst, const void* src, size_t bytes);
void fill_zero(void* dst, size_t bytes);

}  // namespace canvas::cuda
