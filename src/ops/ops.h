// Element-wise and row-wise kernels of the transformer: norms, RoPE, activations, softmax family,
// top-k, attention. Each has a scalar reference (namespace canvas::reference) beside the SIMD path
// chosen at run time; tests compare the two on random data.
#pragma once
#include <cstdint>
#include <vector>

#include "core/cpu.h"
#include "core/thread_pool.h"

namespace canvas {

// The SIMD level the functions below dispatch on: simd_level() unless a test forced another one.
SimdLevel ops_simd_level();
// Test hook: force the level (clamped to simd_level(), so never above what the CPU and CANVAS_SIMD allow).
void set_ops_simd_level(SimdLevel level);
// Back to simd_level().
void reset_ops_simd_level();

// ---- norms -------------------------------------------------------------------------------------
// y = x * rsqrt(mean(x^2) + eps) * w over n elements; w may be null (no weight). In place allowed.
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y);

// ---- rotary position embedding -----------------------------------------------------------------
enum class RopeLayout {
  Normal,  // rotate consecutive pairs (x[2i], x[2i+1])            (llama.cpp LLAMA_ROPE_TYPE_NORM)
  Neox,    // rotate split halves (x[i], x[i + rot_dims/2])          (llama.cpp NEOX, HF rotate_half)
};
struct RopeParams {
  RopeLayout layout = RopeLayout::Normal;
  int head_dim = 0;
  int rot_dims = 0;      // dims rotated from the start of each head (partial rotation when < head_dim;
                         // 0 = head_dim); must be even
  int active_pairs = 0;  // pairs with non-zero frequency (0 = rot_dims / 2); the rest rotate by 0
  float theta = 10000.f; // inv_freq_i = theta^(-2i / rot_dims)
};
// x: n_rows rows, each n_heads heads of head_dim floats (row stride n_heads * head_dim); in place.
// Row r is at position pos[r]. Angles are computed in double, so positions up to millions stay exact
// to float precision.
void rope(float* x, int64_t n_rows, int n_heads, const int32_t* pos, const RopeParams& p);

// ---- activations -------------------------------------------------------------------------------
float silu(float x);
float gelu_tanh(float x);  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// out = act(gate) * up over n elements (SwiGLU with silu, GeGLU with gelu_tanh). out may alias gate.
void swiglu(const float* gate, const float* up, int64_t n, float* out);
void geglu(const float* gate, const float* up, int64_t n, float* out);

// ---- logit soft-capping ------------------------------------------------------------------------
// x[i] = cap * tanh(x[i] / cap) over n elements, in place (Gemma's final_logit_softcapping). The SIMD
// paths compute tanh as 1 - 2 / (exp(2y) + 1): within ~2e-7 * cap of the reference (absolute), NaN stays
// NaN and +-inf becomes +-cap. Every caller that must agree bitwise with another (the materialised head
// and the streamed one) goes through this one function.
void softcap(float* x, int64_t n, float cap);

// ---- softmax family (one row of n values) ------------------------------------------------------
void softmax(const float* x, int64_t n, float* out);
void log_softmax(const float* x, int64_t n, float* out);
// out[i] = exp(x[i] - shift) over n elements: probabilities of logits whose log-sum-exp `shift` is known
// (a softmax cut into pieces). The SIMD paths use ops_simd.h's exp (~1 ulp); NaN stays NaN.
void exp_shifted(const float* x, int64_t n, float shift, float* out);
// Entropy (nats) of softmax(x), computed without storing the probabilities.
float entropy(const float* x, int64_t n);
// log sum exp(x), the sum accumulated in double (so m + log(sum) keeps its digits for large logits);
// -inf for n <= 0.
double logsumexp(const float* x, int64_t n);

// Everything a sampler needs from one row of logits, in two streaming passes over the row (max and
// argmax, then exp sums accumulated in double) without storing probabilities:
// softmax statistics of the untempered logits (so they are meaningful at temperature 0).
struct RowStats {
  int32_t argmax = 0;
  float max = 0;        // max logit
  float logsumexp = 0;  // log sum exp(x)
  float p_top1 = 0;     // softmax probability of argmax
  float p_top2 = 0;     // second-largest probability
  float entropy = 0;    // nats
};
RowStats row_stats(const float* x, int64_t n);

// Indices of the k largest values, largest first (ties: lower index first; NaN ranks below
// everything). k is clamped to [0, n].
std::vector<int32_t> top_k(const float* x, int64_t n, int64_t k);

// ---- attention ---------------------------------------------------------------------------------
struct AttentionShape {
  int n_heads = 0;     // query heads
  int n_kv_heads = 0;  // key/value heads; query head h reads kv head h / (n_heads / n_kv_heads)
  int head_dim = 0;
  float scale = 0;     // applied to q.k (usually 1/sqrt(head_dim))
  float softcap = 0;   // > 0: scores = softcap * tanh(scores / softcap)
};
// Which keys a query sees: key j (0 <= j < n_keys) is visible to query i iff
//   key_group[j] <= query_group[i]  and  j >= window_start[i] (when window_start is non-null),
// except the keys of a tree (tree non-null): key j >= tree_key0 is visible to query i iff bit
// j - tree_key0 of tree[i] is set (neither the groups nor window_start apply to them).
// key_group and query_group null together: every key is visible (bidirectional).
// Groups express every mask we need: causal (group = position), bidirectional (all 0), block-causal
// (group = block index), and cached prefixes followed by a bidirectional canvas; the tree bits, the
// ancestors of each node of a tree of drafts verified in one pass (draft-and-verify).
struct AttentionMask {
  const int32_t* key_group = nullptr;     // [n_keys]
  const int32_t* query_group = nullptr;   // [n_queries]
  const int32_t* window_start = nullptr;  // [n_queries] or null
  const uint64_t* tree = nullptr;         // [n_queries] or null: the tree keys each query sees
  int64_t tree_key0 = 0;                  // the first of at most 64 tree keys
};
// q: n_q rows of n_heads*head_dim floats (row stride ldq).
// k, v: per kv head h, key j at k[h * kv_head_stride + j * head_dim] (the KV-cache layout).
// out: n_q rows of n_heads*head_dim floats (row stride ldo). A query that sees no key gets zeros.
// out may be q itself (same pointer and stride); it must not overlap k or v.
// For each (query, head) the result depends only on the visible keys in increasing j (softmax max,
// sum and weighted sum taken in key order), never on n_q, the thread count or invisible keys.
void attention(const float* q, int64_t n_q, int64_t ldq, const float* k, const float* v, int64_t n_keys,
               int64_t kv_head_stride, const AttentionMask& mask, const AttentionShape& shape, float* out,
               int64_t ldo, ThreadPool* pool);

namespace reference {
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y);
void rope(float* x, int64_t n_rows, int n_heads, const int32_t* pos, const RopeParams& p);
void swiglu(const float* gate, const float* up, int64_t n, float* out);
void geglu(const float* gate, const float* up, int64_t n, float* out);
void softcap(float* x, int64_t n, float cap);
void softmax(const float* x, int64_t n, float* out);
void log_softmax(const float* x, int64_t n, float* out);
void exp_shifted(const float* x, int64_t n, float shift, float* out);
float entropy(const float* x, int64_t n);
double logsumexp(const float* x, int64_t n);
RowStats row_stats(const float* x, int64_t n);
void attention(const float* q, int64_t n_q, int64_t ldq, const float* k, const float* v, int64_t n_keys,
               int64_t kv_head_stride, const AttentionMask& mask, const AttentionShape& shape, float* out,
               int64_t ldo);
}  // namespace reference

}  // namespace canvas
