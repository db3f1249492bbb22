// AVX-512 kernels of ops.h: the bodies of ops_simd.h instantiated with 16-lane vectors.
// GCC 12's AVX-512 headers build results from _mm512_undefined_*(), which -Wall reports as
// uninitialized wherever the intrinsics are inlined (GCC bug 105593); the warning is spurious.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "ops/ops_kernels.h"
#include "ops/ops_simd.h"

namespace canvas::kernels::avx512 {
namespace {

// The vector operations ops_simd.h is written against. Lives in an unnamed namespace on purpose
// (see ops_simd.h).
struct V {
  using F = __m512;
  using I = __m512i;
  using M = __mmask16;
  using D = __m512d;
  static constexpr int W = 16;

  static M first(int n) { return M((1u << n) - 1); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static F load_n(const float* p, int n, float fill) { return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), first(n), p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static void store_n(float* p, F v, int n) { _mm512_mask_storeu_ps(p, first(n), v); }

  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F min(F a, F b) { return _mm512_min_ps(a, b); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }   // a * b + c
  static F fnmadd(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); } // c - a * b
  static F round(F x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n for integral n in [-126, 127].
  static F pow2i(F n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
  }

  static M lt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static M gt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static M unordered(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q); }  // either is NaN
  static F select(M m, F if_true, F if_false) { return _mm512_mask_blend_ps(m, if_false, if_true); }
  static float reduce_add(F v) { return _mm512_reduce_add_ps(v); }
  static float reduce_max(F v) { return _mm512_reduce_max_ps(v); }

  // Double accumulation of float lanes: low 8 lanes into lo, high 8 into hi.
  static D dzero() { return _mm512_setzero_pd(); }
  static void dacc(D& lo, D& hi, F e) {
    lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
  }
  static double dreduce(D lo, D hi) { return _mm512_reduce_add_pd(_mm512_add_pd(lo, hi)); }

  static I iset1(int x) { return _mm512_set1_epi32(x); }
  static I iota() { return _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0); }
  static I iadd(I a, I b) { return _mm512_add_epi32(a, b); }
  static I iselect(M m, I if_true, I if_false) { return _mm512_mask_blend_epi32(m, if_false, if_true); }
  static void istore(int32_t* p, I v) { _mm512_storeu_si512(p, v); }
};

}  // namespace

void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y) { simd::rms_norm<V>(x, w, n, eps, y); }
void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  simd::gated<V>(gate, up, n, out, [](V::F g, V::F u) { return simd::swiglu_vec<V>(g, u); });
}
void geglu(const float* gate, const float* up, int64_t n, float* out) {
  simd::gated<V>(gate, up, n, out, [](V::F g, V::F u) { return simd::geglu_vec<V>(g, u); });
}
void softcap(float* x, int64_t n, float cap) { simd::softcap<V>(x, n, cap); }
void softmax(const float* x, int64_t n, float* out) { simd::softmax<V>(x, n, out); }
void log_softmax(const float* x, int64_t n, float* out) { simd::log_softmax<V>(x, n, out); }
void exp_shifted(const float* x, int64_t n, float shift, float* out) { simd::exp_shifted<V>(x, n, shift, out); }
float entropy(const float* x, int64_t n) { return simd::entropy<V>(x, n); }
double logsumexp(const float* x, int64_t n) { return simd::logsumexp<V>(x, n); }
RowStats row_stats(const float* x, int64_t n) { return simd::row_stats<V>(x, n); }
void attend_rows(const float* const* q, float* const* out, int n_rows, const float* k, const float* v,
                 int64_t head_dim, const int32_t* keys, int64_t n_visible, float scale, float softcap,
                 float* scores) {
  simd::attend_rows<V>(q, out, n_rows, k, v, head_dim, keys, n_visible, scale, softcap, scores);
}

}  // namespace canvas::kernels::avx512
