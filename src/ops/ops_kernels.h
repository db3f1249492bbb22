// Internal to ops/: the per-instruction-set kernels behind the dispatching functions of ops.h.
#pragma once
#include <cstdint>

#include "ops/ops.h"

namespace canvas::kernels {

// Attention for one (query, head) pair over the visible keys keys[0..n_visible), given in increasing
// order. q: head_dim floats; k, v: this kv head's rows (key j at k + j * head_dim); scores: scratch of
// n_visible floats; out: head_dim floats (may be q). The result is a function of the visible keys only.
using AttendHeadFn = void (*)(const float* q, const float* k, const float* v, int64_t head_dim,
                              const int32_t* keys, int64_t n_visible, float scale, float softcap,
                              float* scores, float* out);

namespace scalar {
void attend_head(const float* q, const float* k, const float* v, int64_t head_dim, const int32_t* keys,
                 int64_t n_visible, float scale, float softcap, float* scores, float* out);
}  // namespace scalar

namespace avx2 {
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y);
void swiglu(const float* gate, const float* up, int64_t n, float* out);
void geglu(const float* gate, const float* up, int64_t n, float* out);
void softmax(const float* x, int64_t n, float* out);
void log_softmax(const float* x, int64_t n, float* out);
float entropy(const float* x, int64_t n);
RowStats row_stats(const float* x, int64_t n);
void attend_head(const float* q, const float* k, const float* v, int64_t head_dim, const int32_t* keys,
                 int64_t n_visible, float scale, float softcap, float* scores, float* out);
}  // namespace avx2

namespace avx512 {
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y);
void swiglu(const float* gate, const float* up, int64_t n, float* out);
void geglu(const float* gate, const float* up, int64_t n, float* out);
void softmax(const float* x, int64_t n, float* out);
void log_softmax(const float* x, int64_t n, float* out);
float entropy(const float* x, int64_t n);
RowStats row_stats(const float* x, int64_t n);
void attend_head(const float* q, const float* k, const float* v, int64_t head_dim, const int32_t* keys,
                 int64_t n_visible, float scale, float softcap, float* scores, float* out);
}  // namespace avx512

}  // namespace canvas::kernels
