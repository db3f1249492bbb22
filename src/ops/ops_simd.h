// Internal to ops/: kernel bodies shared by ops_avx2.cpp and ops_avx512.cpp, written once over a
// vector-traits type V (see either file for the operations V provides).
//
// Every function here is a template and each including file instantiates it only with its own V, a
// type in an unnamed namespace. Such instantiations have internal linkage, so code compiled for one
// instruction set can never be merged by the linker into a caller compiled for another (the classic
// ODR trap of per-file -m flags). Keep it that way: no non-template inline functions in this file.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>

#include "ops/ops.h"
#include "ops/ops_kernels.h"

namespace canvas::simd {

template <class V>
struct Consts {
  static constexpr float inf = std::numeric_limits<float>::infinity();
};

// ---- exp ---------------------------------------------------------------------------------------
// exp(x) with ~1 ulp error on [-87.3, 88.3]; 0 below (denormal results are flushed), +inf above, NaN for
// NaN. Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2, then Cephes' degree-6 polynomial for e^r.
// The range clamp (max/min) would turn NaN into a finite value, and every softmax built on this exp
// (attention, softmax, row_stats) would then drop a NaN that the scalar code (std::exp) keeps: a model
// with one NaN weight printed text at avx2 / avx512 where scalar stopped with "logits are not finite".
template <class V>
typename V::F exp(typename V::F x) {
  using F = typename V::F;
  const F lo = V::set1(-87.33654f), hi = V::set1(88.37f);
  const F input = x;
  const auto nan = V::unordered(x, x);
  const auto under = V::lt(x, lo);
  const auto over = V::gt(x, hi);
  x = V::min(V::max(x, lo), hi);
  const F n = V::round(V::mul(x, V::set1(1.44269504088896341f)));
  F r = V::fnmadd(n, V::set1(0.693359375f), x);
  r = V::fnmadd(n, V::set1(-2.12194440e-4f), r);
  F p = V::set1(1.9875691500e-4f);
  p = V::fmadd(p, r, V::set1(1.3981999507e-3f));
  p = V::fmadd(p, r, V::set1(8.3334519073e-3f));
  p = V::fmadd(p, r, V::set1(4.1665795894e-2f));
  p = V::fmadd(p, r, V::set1(1.6666665459e-1f));
  p = V::fmadd(p, r, V::set1(5.0000001201e-1f));
  p = V::fmadd(p, V::mul(r, r), V::add(r, V::set1(1.0f)));
  F y = V::mul(p, V::pow2i(n));  // n in [-126, 127]: 2^n is a normal float
  y = V::select(under, V::zero(), y);
  y = V::select(over, V::set1(Consts<V>::inf), y);
  return V::select(nan, input, y);
}

// ---- norms ---------------------------------------------------------------------------------------
template <class V>
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y) {
  using F = typename V::F;
  constexpr int W = V::W;
  if (n <= 0) return;
  F a0 = V::zero(), a1 = V::zero();
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    const F v0 = V::load(x + i), v1 = V::load(x + i + W);
    a0 = V::fmadd(v0, v0, a0);
    a1 = V::fmadd(v1, v1, a1);
  }
  for (; i < n; i += W) {
    const F v = (n - i >= W) ? V::load(x + i) : V::load_n(x + i, int(n - i), 0.f);
    a0 = V::fmadd(v, v, a0);
  }
  const float sum_sq = V::reduce_add(V::add(a0, a1));
  const F scale = V::set1(1.0f / std::sqrt(sum_sq / float(n) + eps));
  for (i = 0; i + W <= n; i += W) {
    F v = V::mul(V::load(x + i), scale);
    if (w) v = V::mul(v, V::load(w + i));
    V::store(y + i, v);
  }
  if (i < n) {
    const int r = int(n - i);
    F v = V::mul(V::load_n(x + i, r, 0.f), scale);
    if (w) v = V::mul(v, V::load_n(w + i, r, 0.f));
    V::store_n(y + i, v, r);
  }
}

// ---- gated activations ---------------------------------------------------------------------------
// silu(g) * u = g * u / (1 + exp(-g)).
template <class V>
typename V::F swiglu_vec(typename V::F g, typename V::F u) {
  const auto e = exp<V>(V::sub(V::zero(), g));
  return V::div(V::mul(g, u), V::add(V::set1(1.0f), e));
}
// gelu_tanh(g) * u: 0.5 g (1 + tanh(t)) = g / (1 + exp(-2t)), t = sqrt(2/pi) (g + 0.044715 g^3);
// the exp form avoids the cancellation in 1 + tanh(t) for negative t.
template <class V>
typename V::F geglu_vec(typename V::F g, typename V::F u) {
  constexpr float c = 0.7978845608028654f;  // sqrt(2/pi)
  const auto g2 = V::mul(g, g);
  const auto minus_2t = V::mul(g, V::fmadd(g2, V::set1(-2.0f * c * 0.044715f), V::set1(-2.0f * c)));
  const auto e = exp<V>(minus_2t);
  return V::div(V::mul(g, u), V::add(V::set1(1.0f), e));
}

template <class V, class Op>
void gated(const float* gate, const float* up, int64_t n, float* out, Op op) {
  constexpr int W = V::W;
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(out + i, op(V::load(gate + i), V::load(up + i)));
  if (i < n) {
    const int r = int(n - i);
    V::store_n(out + i, op(V::load_n(gate + i, r, 0.f), V::load_n(up + i, r, 0.f)), r);
  }
}

// ---- logit soft-capping -------------------------------------------------------------------------
// cap * tanh(y), y = x / cap, as cap * (1 - 2 / (exp(2y) + 1)) with y clamped to [-44, 44] (where tanh
// is +-1 in float). The clamp keeps NaN (max/min return their second operand when either is NaN) and
// the final + y * 0 puts it back after exp, which does not propagate it.
template <class V>
typename V::F softcap_vec(typename V::F x, typename V::F cap, typename V::F inv_cap) {
  const auto y = V::min(V::set1(44.0f), V::max(V::set1(-44.0f), V::mul(x, inv_cap)));
  const auto e = exp<V>(V::add(y, y));
  const auto t = V::sub(V::set1(1.0f), V::div(V::set1(2.0f), V::add(e, V::set1(1.0f))));
  return V::mul(cap, V::fmadd(y, V::zero(), t));
}

template <class V>
void softcap(float* x, int64_t n, float cap) {
  constexpr int W = V::W;
  const auto c = V::set1(cap), inv = V::set1(1.0f / cap);
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(x + i, softcap_vec<V>(V::load(x + i), c, inv));
  if (i < n) {
    const int r = int(n - i);
    V::store_n(x + i, softcap_vec<V>(V::load_n(x + i, r, 0.f), c, inv), r);
  }
}

// ---- softmax family ------------------------------------------------------------------------------
// out = exp(x - shift) (ops.h's exp_shifted).
template <class V>
void exp_shifted(const float* x, int64_t n, float shift, float* out) {
  constexpr int W = V::W;
  const auto s = V::set1(shift);
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(out + i, exp<V>(V::sub(V::load(x + i), s)));
  if (i < n) {
    const int r = int(n - i);
    V::store_n(out + i, exp<V>(V::sub(V::load_n(x + i, r, 0.f), s)), r);
  }
}

template <class V>
float max_of(const float* x, int64_t n) {
  using F = typename V::F;
  constexpr int W = V::W;
  const float neg_inf = -Consts<V>::inf;
  F m0 = V::set1(neg_inf), m1 = m0;
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    m0 = V::max(m0, V::load(x + i));
    m1 = V::max(m1, V::load(x + i + W));
  }
  for (; i < n; i += W) m0 = V::max(m0, (n - i >= W) ? V::load(x + i) : V::load_n(x + i, int(n - i), neg_inf));
  return V::reduce_max(V::max(m0, m1));
}

// Sum of exp(x - m) in double (accurate for rows of 262144 and more); writes exp(x - m) to out if given.
// With moment non-null also returns sum of exp(x - m) * (x - m), the entropy's second term; -inf
// logits contribute 0 to both (the difference is clamped so that 0 * -inf never happens).
template <class V>
double exp_sums(const float* x, int64_t n, float m, float* out, double* moment) {
  using F = typename V::F;
  constexpr int W = V::W;
  const F mv = V::set1(m), floor = V::set1(-1000.f);
  auto s0 = V::dzero(), s1 = V::dzero(), t0 = V::dzero(), t1 = V::dzero();
  int64_t i = 0;
  for (; i < n; i += W) {
    const int r = (n - i >= W) ? W : int(n - i);
    const F d = V::sub(r == W ? V::load(x + i) : V::load_n(x + i, r, -Consts<V>::inf), mv);
    const F e = exp<V>(d);
    if (out) {
      if (r == W) V::store(out + i, e);
      else V::store_n(out + i, e, r);
    }
    V::dacc(s0, s1, e);
    if (moment) V::dacc(t0, t1, V::mul(e, V::max(d, floor)));
  }
  if (moment) *moment = V::dreduce(t0, t1);
  return V::dreduce(s0, s1);
}

template <class V>
void scale_row(float* x, int64_t n, float s) {
  constexpr int W = V::W;
  const auto sv = V::set1(s);
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(x + i, V::mul(V::load(x + i), sv));
  if (i < n) V::store_n(x + i, V::mul(V::load_n(x + i, int(n - i), 0.f), sv), int(n - i));
}

template <class V>
void softmax(const float* x, int64_t n, float* out) {
  if (n <= 0) return;
  const float m = max_of<V>(x, n);
  const double sum = exp_sums<V>(x, n, m, out, nullptr);
  scale_row<V>(out, n, float(1.0 / sum));
}

template <class V>
void log_softmax(const float* x, int64_t n, float* out) {
  constexpr int W = V::W;
  if (n <= 0) return;
  const float m = max_of<V>(x, n);
  const double sum = exp_sums<V>(x, n, m, nullptr, nullptr);
  const auto lse = V::set1(float(double(m) + std::log(sum)));
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(out + i, V::sub(V::load(x + i), lse));
  if (i < n) V::store_n(out + i, V::sub(V::load_n(x + i, int(n - i), 0.f), lse), int(n - i));
}

template <class V>
double logsumexp(const float* x, int64_t n) {
  if (n <= 0) return -Consts<V>::inf;
  const float m = max_of<V>(x, n);
  if (m == -Consts<V>::inf || m == Consts<V>::inf) return m;
  return double(m) + std::log(exp_sums<V>(x, n, m, nullptr, nullptr));
}

// H = -sum p log p with p = e / s, e = exp(x - m): H = log s - (sum e (x - m)) / s.
template <class V>
float entropy(const float* x, int64_t n) {
  if (n <= 0) return 0.f;
  const float m = max_of<V>(x, n);
  double moment = 0;
  const double sum = exp_sums<V>(x, n, m, nullptr, &moment);
  return float(std::log(sum) - moment / sum);
}

// Pass 1 keeps, per lane, the two largest values and the first index of the largest; pass 2 is
// exp_sums. Lane maxima are merged so that ties go to the lowest index.
template <class V>
RowStats row_stats(const float* x, int64_t n) {
  using F = typename V::F;
  using I = typename V::I;
  constexpr int W = V::W;
  RowStats st;
  if (n <= 0) return st;
  const float neg_inf = -Consts<V>::inf;
  F top1 = V::set1(neg_inf), top2 = top1;
  I arg = V::iset1(0), lane = V::iota();
  const I step = V::iset1(W);
  for (int64_t i = 0; i < n; i += W) {
    const F v = (n - i >= W) ? V::load(x + i) : V::load_n(x + i, int(n - i), neg_inf);
    const auto better = V::gt(v, top1);
    top2 = V::max(top2, V::min(top1, v));
    top1 = V::max(top1, v);
    arg = V::iselect(better, lane, arg);
    lane = V::iadd(lane, step);
  }
  float t1[W], t2[W];
  int32_t a[W];
  V::store(t1, top1);
  V::store(t2, top2);
  V::istore(a, arg);
  float best = neg_inf, second = neg_inf;
  int32_t best_index = -1;
  for (int l = 0; l < 2 * W; ++l) {  // multiset top-2 over all lanes' top-2
    const float c = l < W ? t1[l] : t2[l - W];
    if (c > best) {
      second = best;
      best = c;
    } else if (c > second) {
      second = c;
    }
  }
  for (int l = 0; l < W; ++l)
    if (t1[l] == best && (best_index < 0 || a[l] < best_index)) best_index = a[l];
  if (best_index < 0) best_index = 0;  // NaN row
  double moment = 0;
  const double sum = exp_sums<V>(x, n, best, nullptr, &moment);
  st.argmax = best_index;
  st.max = best;
  st.logsumexp = float(double(best) + std::log(sum));
  st.p_top1 = float(1.0 / sum);
  st.p_top2 = n > 1 ? float(std::exp(double(second) - double(best)) / sum) : 0.f;
  st.entropy = float(std::log(sum) - moment / sum);
  return st;
}

// ---- attention -----------------------------------------------------------------------------------
// R dot products of a with rows b[0..R), interleaved for instruction-level parallelism. Each one's
// summation order is a function of n alone, the same for every R, so results never depend on how
// keys were grouped.
template <class V, int R>
void dots(const float* a, const float* const* b, int64_t n, float* result) {
  using F = typename V::F;
  constexpr int W = V::W;
  F a0[R], a1[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) a0[r] = a1[r] = V::zero();
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    const F x0 = V::load(a + i), x1 = V::load(a + i + W);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      a0[r] = V::fmadd(x0, V::load(b[r] + i), a0[r]);
      a1[r] = V::fmadd(x1, V::load(b[r] + i + W), a1[r]);
    }
  }
  for (; i < n; i += W) {
    if (n - i >= W) {
      const F x = V::load(a + i);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) a0[r] = V::fmadd(x, V::load(b[r] + i), a0[r]);
    } else {
      const int rest = int(n - i);
      const F x = V::load_n(a + i, rest, 0.f);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) a0[r] = V::fmadd(x, V::load_n(b[r] + i, rest, 0.f), a0[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) result[r] = V::reduce_add(V::add(a0[r], a1[r]));
}

// out[d0, d0 + U*W) (the last vector possibly partial: `last` lanes) += sum_{j0 <= j < j1} p_j v_j in
// key order, starting from zero when `first`. The running sums pass through `out` between key blocks
// unchanged (float in, float out), so blocking keys does not change a single bit.
template <class V, int U, bool Partial>
void weighted_sum_block(const float* v, int64_t head_dim, const int32_t* keys, const float* p, int64_t j0,
                        int64_t j1, int64_t d0, int last, bool first, float* out) {
  using F = typename V::F;
  static_assert(!Partial || U == 1);
  F acc[U];
#pragma GCC unroll 8
  for (int u = 0; u < U; ++u) {
    if (first) acc[u] = V::zero();
    else acc[u] = Partial ? V::load_n(out + d0, last, 0.f) : V::load(out + d0 + u * V::W);
  }
  for (int64_t j = j0; j < j1; ++j) {
    const F pj = V::set1(p[j]);
    const float* row = v + int64_t(keys[j]) * head_dim + d0;
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) acc[u] = V::fmadd(pj, Partial ? V::load_n(row, last, 0.f) : V::load(row + u * V::W), acc[u]);
  }
#pragma GCC unroll 8
  for (int u = 0; u < U; ++u) {
    if (Partial) V::store_n(out + d0, acc[u], last);
    else V::store(out + d0 + u * V::W, acc[u]);
  }
}

// Attention of n_rows query rows that share one key list and one kv head (see AttendRowsFn). Rows are
// processed together only so that each K and V row is loaded once per tile; every row's arithmetic is
// exactly what it would be alone.
template <class V>
void attend_rows(const float* const* q, float* const* out, int n_rows, const float* k, const float* v,
                 int64_t head_dim, const int32_t* keys, int64_t n, float scale, float softcap, float* scores) {
  using F = typename V::F;
  constexpr int W = V::W;
  if (n == 0) {
    for (int t = 0; t < n_rows; ++t)
      for (int64_t d = 0; d < head_dim; ++d) out[t][d] = 0.f;
    return;
  }
  // 1. q.k for every row and visible key, four keys at a time.
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float* rows[4];
    for (int r = 0; r < 4; ++r) rows[r] = k + int64_t(keys[j + r]) * head_dim;
    for (int t = 0; t < n_rows; ++t) dots<V, 4>(q[t], rows, head_dim, scores + t * n + j);
  }
  for (; j < n; ++j) {
    const float* row = k + int64_t(keys[j]) * head_dim;
    for (int t = 0; t < n_rows; ++t) dots<V, 1>(q[t], &row, head_dim, scores + t * n + j);
  }
  // 2. per row: scale, softcap, max; p_j = exp(s_j - max) element-wise; their sum in key order.
  float sums[kernels::kMaxTileRows];
  for (int t = 0; t < n_rows; ++t) {
    float* s = scores + t * n;
    float m = -Consts<V>::inf;
    for (j = 0; j < n; ++j) {
      float x = s[j] * scale;
      if (softcap > 0) x = softcap * std::tanh(x / softcap);
      s[j] = x;
      m = x > m ? x : m;
    }
    const F mv = V::set1(m);
    for (j = 0; j + W <= n; j += W) V::store(s + j, exp<V>(V::sub(V::load(s + j), mv)));
    if (j < n) V::store_n(s + j, exp<V>(V::sub(V::load_n(s + j, int(n - j), m), mv)), int(n - j));
    float sum = 0;
    for (j = 0; j < n; ++j) sum += s[j];
    sums[t] = sum;
  }
  // 3. out = sum_j p_j v_j / sum: blocks of keys (whose V rows stay in L1 across the tile's rows),
  // blocks of dims held in registers, keys in order within each dim.
  constexpr int64_t kKeyBlock = 32;
  for (int64_t j0 = 0; j0 < n; j0 += kKeyBlock) {
    const int64_t j1 = j0 + kKeyBlock < n ? j0 + kKeyBlock : n;
    const bool first = j0 == 0;
    for (int t = 0; t < n_rows; ++t) {
      const float* p = scores + t * n;
      int64_t d = 0;
      for (; d + 4 * W <= head_dim; d += 4 * W)
        weighted_sum_block<V, 4, false>(v, head_dim, keys, p, j0, j1, d, W, first, out[t]);
      for (; d + W <= head_dim; d += W) weighted_sum_block<V, 1, false>(v, head_dim, keys, p, j0, j1, d, W, first, out[t]);
      if (d < head_dim)
        weighted_sum_block<V, 1, true>(v, head_dim, keys, p, j0, j1, d, int(head_dim - d), first, out[t]);
    }
  }
  for (int t = 0; t < n_rows; ++t) scale_row<V>(out[t], head_dim, 1.0f / sums[t]);
}

}  // namespace canvas::simd
