// Internal to ops/: the per-instruction-set kernels behind the dispatching functions of ops.h.
#pragma once
#include <cstdint>

#include "ops/ops.h"

namespace canvas::kernels {

// Most query rows one attention tile holds (rows share a key list and a kv head).
constexpr int kMaxTileRows = 16;

// Attention for n_rows <= kMaxTileRows (query, head) rows that see the same keys through the same kv
// head: keys[0..n_visible) in increasing order. q[t], out[t]: head_dim floats each (out[t] may be
// q[t]); k, v: the kv head's rows (key j at k + j * head_dim); scores: scratch of n_rows * n_visible
// floats. Each row's result is a function of its q and the visible keys only, bitwise the same
// whatever n_rows and whichever other rows share its tile.
using AttendRowsFn = void (*)(const float* const* q, float* const* out, int n_rows, const float* k,
                              const float* v, int64_t head_dim, const int32_t* keys, int64_t n_visible,
                              float scale, float softcap, float* scores);

namespace scalar {
void attend_rows(const float* const* q, float* const* out, int n_rows, const float* k, const float* v,
                 int64_t head_dim, const int32_t* keys, int64_t n_visible, float scale, float softcap,
                 float* scores);
}  // namespace scalar

namespace avx2 {
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y);
void swiglu(const float* gate, const float* up, int64_t n, float* out);
void geglu(const float* gate, const float* up, int64_t n, float* out);
void softcap(float* x, int64_t n, float cap);
void softmax(const float* x, int64_t n, float* out);
void log_softmax(const float* x, int64_t n, float* out);
void exp_shifted(const float* x, int64_t n, float shift, float* out);
float entropy(const float* x, int64_t n);
double logsumexp(const float* x, int64_t n);
RowStats row_stats(const float* x, int64_t n);
void attend_rows(const float* const* q, float* const* out, int n_rows, const float* k, const float* v,
                 int64_t head_dim, const int32_t* keys, int64_t n_visible, float scale, float softcap,
                 float* scores);
}  // namespace avx2

namespace avx512 {
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y);
void swiglu(const float* gate, const float* up, int64_t n, float* out);
void geglu(const float* gate, const float* up, int64_t n, float* out);
void softcap(float* x, int64_t n, float cap);
void softmax(const float* x, int64_t n, float* out);
void log_softmax(const float* x, int64_t n, float* out);
void exp_shifted(const float* x, int64_t n, float shift, float* out);
float entropy(const float* x, int64_t n);
double logsumexp(const float* x, int64_t n);
RowStats row_stats(const float* x, int64_t n);
void attend_rows(const float* const* q, float* const* out, int n_rows, const float* k, const float* v,
                 int64_t head_dim, const int32_t* keys, int64_t n_visible, float scale, float softcap,
                 float* scores);
}  // namespace avx512

}  // namespace canvas::kernels
