// AVX2/FMA kernels of ops.h: the bodies of ops_simd.h instantiated with 8-lane vectors.
#include <immintrin.h>

#include "ops/ops_kernels.h"
#include "ops/ops_simd.h"

namespace canvas::kernels::avx2 {
namespace {

// The vector operations ops_simd.h is written against. Lives in an unnamed namespace on purpose
// (see ops_simd.h). Masks are all-ones/all-zeros float lanes.
struct V {
  using F = __m256;
  using I = __m256i;
  using M = __m256;
  using D = __m256d;
  static constexpr int W = 8;

  static __m256i first(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static F load_n(const float* p, int n, float fill) {
    const __m256i m = first(n);
    return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
  }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static void store_n(float* p, F v, int n) { _mm256_maskstore_ps(p, first(n), v); }

  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F min(F a, F b) { return _mm256_min_ps(a, b); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }   // a * b + c
  static F fnmadd(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); } // c - a * b
  static F round(F x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n for integral n in [-126, 127].
  static F pow2i(F n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  }

  static M lt(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static M gt(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static M unordered(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_UNORD_Q); }  // either is NaN
  static F select(M m, F if_true, F if_false) { return _mm256_blendv_ps(if_false, if_true, m); }
  static float reduce_add(F v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float reduce_max(F v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }

  // Double accumulation of float lanes: low 4 lanes into lo, high 4 into hi.
  static D dzero() { return _mm256_setzero_pd(); }
  static void dacc(D& lo, D& hi, F e) {
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  static double dreduce(D lo, D hi) {
    const __m256d s = _mm256_add_pd(lo, hi);
    __m128d t = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    t = _mm_add_sd(t, _mm_unpackhi_pd(t, t));
    return _mm_cvtsd_f64(t);
  }

  static I iset1(int x) { return _mm256_set1_epi32(x); }
  static I iota() { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
  static I iadd(I a, I b) { return _mm256_add_epi32(a, b); }
  static I iselect(M m, I if_true, I if_false) {
    return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(if_false), _mm256_castsi256_ps(if_true), m));
  }
  static void istore(int32_t* p, I v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
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

}  // namespace canvas::kernels::avx2
