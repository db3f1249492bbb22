// The kernels of ops.h: run-time dispatch to the AVX2 / AVX-512 files, the portable kernels (RoPE,
// top-k, the attention driver) and the scalar references.
#include "ops/ops.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "core/error.h"
#include "ops/ops_kernels.h"

namespace canvas {

// ---- dispatch ------------------------------------------------------------------------------------
namespace {
std::atomic<int> forced_level{-1};
}  // namespace

SimdLevel ops_simd_level() {
  const int forced = forced_level.load(std::memory_order_relaxed);
  return forced < 0 ? simd_level() : SimdLevel(forced);
}
void set_ops_simd_level(SimdLevel level) {
  forced_level.store(std::min(int(level), int(simd_level())), std::memory_order_relaxed);
}
void reset_ops_simd_level() { forced_level.store(-1, std::memory_order_relaxed); }

// ---- activations ---------------------------------------------------------------------------------
// Computed in double: these are also the references the SIMD kernels are tested against.
float silu(float x) {
  const double d = x;
  return float(d / (1.0 + std::exp(-d)));
}
// 0.5 x (1 + tanh t) written as x / (1 + exp(-2t)): the same function without the cancellation of
// 1 + tanh t for negative t (which loses all digits below x ~ -8 even in double).
float gelu_tanh(float x) {
  const double d = x;
  const double t = 0.7978845608028654 * (d + 0.044715 * d * d * d);
  return float(d / (1.0 + std::exp(-2.0 * t)));
}

void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y) {
  switch (ops_simd_level()) {
    case SimdLevel::Avx512: return kernels::avx512::rms_norm(x, w, n, eps, y);
    case SimdLevel::Avx2: return kernels::avx2::rms_norm(x, w, n, eps, y);
    default: return reference::rms_norm(x, w, n, eps, y);
  }
}
void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  switch (ops_simd_level()) {
    case SimdLevel::Avx512: return kernels::avx512::swiglu(gate, up, n, out);
    case SimdLevel::Avx2: return kernels::avx2::swiglu(gate, up, n, out);
    default: return reference::swiglu(gate, up, n, out);
  }
}
void geglu(const float* gate, const float* up, int64_t n, float* out) {
  switch (ops_simd_level()) {
    case SimdLevel::Avx512: return kernels::avx512::geglu(gate, up, n, out);
    case SimdLevel::Avx2: return kernels::avx2::geglu(gate, up, n, out);
    default: return reference::geglu(gate, up, n, out);
  }
}
void softcap(float* x, int64_t n, float cap) {
  switch (ops_simd_level()) {
    case SimdLevel::Avx512: return kernels::avx512::softcap(x, n, cap);
    case SimdLevel::Avx2: return kernels::avx2::softcap(x, n, cap);
    default: return reference::softcap(x, n, cap);
  }
}
void exp_shifted(const float* x, int64_t n, float shift, float* out) {
  switch (ops_simd_level()) {
    case SimdLevel::Avx512: return kernels::avx512::exp_shifted(x, n, shift, out);
    case SimdLevel::Avx2: return kernels::avx2::exp_shifted(x, n, shift, out);
    default: return reference::exp_shifted(x, n, shift, out);
  }
}
void softmax(const float* x, int64_t n, float* out) {
  switch (ops_simd_level()) {
    case SimdLevel::Avx512: return kernels::avx512::softmax(x, n, out);
    case SimdLevel::Avx2: return kernels::avx2::softmax(x, n, out);
    default: return reference::softmax(x, n, out);
  }
}
void log_softmax(const float* x, int64_t n, float* out) {
  switch (ops_simd_level()) {
    case SimdLevel::Avx512: return kernels::avx512::log_softmax(x, n, out);
    case SimdLevel::Avx2: return kernels::avx2::log_softmax(x, n, out);
    default: return reference::log_softmax(x, n, out);
  }
}
float entropy(const float* x, int64_t n) {
  switch (ops_simd_level()) {
    case SimdLevel::Avx512: return kernels::avx512::entropy(x, n);
    case SimdLevel::Avx2: return kernels::avx2::entropy(x, n);
    default: return reference::entropy(x, n);
  }
}
double logsumexp(const float* x, int64_t n) {
  switch (ops_simd_level()) {
    case SimdLevel::Avx512: return kernels::avx512::logsumexp(x, n);
    case SimdLevel::Avx2: return kernels::avx2::logsumexp(x, n);
    default: return reference::logsumexp(x, n);
  }
}
RowStats row_stats(const float* x, int64_t n) {
  switch (ops_simd_level()) {
    case SimdLevel::Avx512: return kernels::avx512::row_stats(x, n);
    case SimdLevel::Avx2: return kernels::avx2::row_stats(x, n);
    default: return reference::row_stats(x, n);
  }
}

// ---- RoPE ----------------------------------------------------------------------------------------
namespace {

struct RopeGeometry {
  int rot_dims, half, active;
};

RopeGeometry rope_geometry(const RopeParams& p) {
  check(p.head_dim > 0, "rope: head_dim must be positive, got " + std::to_string(p.head_dim));
  RopeGeometry g;
  g.rot_dims = p.rot_dims > 0 ? p.rot_dims : p.head_dim;
  check(g.rot_dims % 2 == 0 && g.rot_dims <= p.head_dim,
        "rope: rot_dims must be even and <= head_dim (" + std::to_string(p.head_dim) + "), got " +
            std::to_string(g.rot_dims));
  g.half = g.rot_dims / 2;
  g.active = p.active_pairs > 0 ? std::min(p.active_pairs, g.half) : g.half;
  return g;
}

// Dims of pair i: consecutive (Normal) or split halves (Neox).
inline void rope_pair(RopeLayout layout, int i, int half, int* a, int* b) {
  if (layout == RopeLayout::Normal) {
    *a = 2 * i;
    *b = 2 * i + 1;
  } else {
    *a = i;
    *b = i + half;
  }
}

}  // namespace

void rope(float* x, int64_t n_rows, int n_heads, const int32_t* pos, const RopeParams& p) {
  const RopeGeometry g = rope_geometry(p);
  std::vector<double> inv_freq(g.half, 0.0);
  for (int i = 0; i < g.active; ++i) inv_freq[i] = std::pow(double(p.theta), -2.0 * i / g.rot_dims);
  std::vector<float> cos_t(g.half), sin_t(g.half);
  for (int64_t r = 0; r < n_rows; ++r) {
    // One table of angles per row (position), shared by its heads.
    for (int i = 0; i < g.half; ++i) {
      const double angle = double(pos[r]) * inv_freq[i];
      cos_t[i] = float(std::cos(angle));
      sin_t[i] = float(std::sin(angle));
    }
    for (int h = 0; h < n_heads; ++h) {
      float* xh = x + (r * n_heads + h) * int64_t(p.head_dim);
      for (int i = 0; i < g.half; ++i) {
        int a, b;
        rope_pair(p.layout, i, g.half, &a, &b);
        const float x0 = xh[a], x1 = xh[b];
        xh[a] = x0 * cos_t[i] - x1 * sin_t[i];
        xh[b] = x0 * sin_t[i] + x1 * cos_t[i];
      }
    }
  }
}

// ---- top-k ---------------------------------------------------------------------------------------
std::vector<int32_t> top_k(const float* x, int64_t n, int64_t k) {
  k = std::clamp<int64_t>(k, 0, n);
  // a ranks before b: larger value, NaN last, ties to the lower index.
  auto before = [x](int32_t a, int32_t b) {
    const float va = x[a], vb = x[b];
    const bool na = std::isnan(va), nb = std::isnan(vb);
    if (na != nb) return nb;
    if (!na && va != vb) return va > vb;
    return a < b;
  };
  std::vector<int32_t> heap;  // the k best so far; heap front is the worst of them
  heap.reserve(k);
  if (k == 0) return heap;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t idx = int32_t(i);
    if (int64_t(heap.size()) < k) {
      heap.push_back(idx);
      std::push_heap(heap.begin(), heap.end(), before);
    } else if (before(idx, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), before);
      heap.back() = idx;
      std::push_heap(heap.begin(), heap.end(), before);
    }
  }
  std::sort(heap.begin(), heap.end(), before);
  return heap;
}

// ---- attention -----------------------------------------------------------------------------------
namespace {

void check_attention(int64_t n_q, int64_t n_keys, const AttentionMask& mask, const AttentionShape& s) {
  check(s.n_heads > 0 && s.n_kv_heads > 0 && s.head_dim > 0,
        "attention: n_heads, n_kv_heads and head_dim must be positive");
  check(s.n_heads % s.n_kv_heads == 0, "attention: n_heads (" + std::to_string(s.n_heads) +
                                           ") must be a multiple of n_kv_heads (" +
                                           std::to_string(s.n_kv_heads) + ")");
  check(n_q >= 0 && n_keys >= 0, "attention: negative n_q or n_keys");
  check((mask.key_group == nullptr) == (mask.query_group == nullptr),
        "attention: key_group and query_group must both be set or both be null");
  check(mask.tree_key0 >= 0, "attention: negative tree_key0");
}

// Whether query i sees tree key j (j >= mask.tree_key0).
bool sees_tree_key(const AttentionMask& mask, int64_t i, int64_t j) {
  return j - mask.tree_key0 < 64 && (mask.tree[i] >> (j - mask.tree_key0) & 1);
}

bool visible(const AttentionMask& mask, int64_t i, int64_t j) {
  if (mask.tree && j >= mask.tree_key0) return sees_tree_key(mask, i, j);
  if (mask.window_start && j < mask.window_start[i]) return false;
  return !mask.key_group || mask.key_group[j] <= mask.query_group[i];
}

// Visible keys of query i in increasing order; returns their count.
int64_t visible_keys(const AttentionMask& mask, int64_t i, int64_t n_keys, int32_t* keys) {
  int64_t j = mask.window_start ? std::max<int64_t>(0, mask.window_start[i]) : 0;
  int64_t n = 0;
  const int64_t group_end = mask.tree ? std::min(n_keys, mask.tree_key0) : n_keys;
  if (!mask.key_group) {
    for (; j < group_end; ++j) keys[n++] = int32_t(j);
  } else {
    const int32_t group = mask.query_group[i];
    for (; j < group_end; ++j)
      if (mask.key_group[j] <= group) keys[n++] = int32_t(j);
  }
  if (mask.tree) j = mask.tree_key0;
  for (; j < n_keys; ++j)  // a tree's keys (none without one: j == n_keys)
    if (sees_tree_key(mask, i, j)) keys[n++] = int32_t(j);
  return n;
}

}  // namespace

namespace kernels::scalar {
namespace {
void attend_row(const float* q, float* out, const float* k, const float* v, int64_t head_dim,
                const int32_t* keys, int64_t n, float scale, float softcap, float* scores) {
  if (n == 0) {
    std::fill(out, out + head_dim, 0.f);
    return;
  }
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    const float* kj = k + int64_t(keys[j]) * head_dim;
    float s = 0;
    for (int64_t d = 0; d < head_dim; ++d) s += q[d] * kj[d];
    s *= scale;
    if (softcap > 0) s = softcap * std::tanh(s / softcap);
    scores[j] = s;
    m = std::max(m, s);
  }
  float sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    scores[j] = std::exp(scores[j] - m);
    sum += scores[j];
  }
  std::fill(out, out + head_dim, 0.f);
  for (int64_t j = 0; j < n; ++j) {
    const float* vj = v + int64_t(keys[j]) * head_dim;
    for (int64_t d = 0; d < head_dim; ++d) out[d] += scores[j] * vj[d];
  }
  const float inv = 1.0f / sum;
  for (int64_t d = 0; d < head_dim; ++d) out[d] *= inv;
}
}  // namespace

void attend_rows(const float* const* q, float* const* out, int n_rows, const float* k, const float* v,
                 int64_t head_dim, const int32_t* keys, int64_t n_visible, float scale, float softcap,
                 float* scores) {
  for (int t = 0; t < n_rows; ++t)
    attend_row(q[t], out[t], k, v, head_dim, keys, n_visible, scale, softcap, scores + t * n_visible);
}
}  // namespace kernels::scalar

namespace {

// Runs of consecutive queries that see exactly the same keys, at most max_len long.
std::vector<std::pair<int64_t, int64_t>> query_runs(const AttentionMask& mask, int64_t n_q, int64_t max_len) {
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (int64_t b = 0; b < n_q;) {
    int64_t e = b + 1;
    while (e < n_q && e - b < max_len && (!mask.query_group || mask.query_group[e] == mask.query_group[b]) &&
           (!mask.window_start || mask.window_start[e] == mask.window_start[b]) &&
           (!mask.tree || mask.tree[e] == mask.tree[b]))
      ++e;
    runs.emplace_back(b, e);
    b = e;
  }
  return runs;
}

}  // namespace

void attention(const float* q, int64_t n_q, int64_t ldq, const float* k, const float* v, int64_t n_keys,
               int64_t kv_head_stride, const AttentionMask& mask, const AttentionShape& shape, float* out,
               int64_t ldo, ThreadPool* pool) {
  check_attention(n_q, n_keys, mask, shape);
  if (n_q == 0) return;
  kernels::AttendRowsFn attend = kernels::scalar::attend_rows;
  switch (ops_simd_level()) {
    case SimdLevel::Avx512: attend = kernels::avx512::attend_rows; break;
    case SimdLevel::Avx2: attend = kernels::avx2::attend_rows; break;
    default: break;
  }
  const int n_kv = shape.n_kv_heads, group = shape.n_heads / shape.n_kv_heads;
  const int64_t hd = shape.head_dim;
  // Work items are tiles: a run of queries with identical visibility times a chunk of the query heads
  // of one kv head, so each K/V row loaded serves every row of the tile. Tiling never changes a bit
  // of the result (see AttendRowsFn), so tiles shrink freely until every thread has work; but only when
  // the loop is large enough to be handed out at all (~2^18 multiply-adds: an AR step's attention on a
  // small model runs on the caller, where smaller tiles only cost K/V reloads).
  int head_chunk = group;
  while (head_chunk > kernels::kMaxTileRows || group % head_chunk) --head_chunk;
  int64_t run_len = std::max(1, kernels::kMaxTileRows / head_chunk);
  auto runs = query_runs(mask, n_q, run_len);
  const bool worth_splitting = pool && !pool->serial_now() && n_q * n_keys * hd * shape.n_heads >= (int64_t(1) << 18);
  const int64_t threads = worth_splitting ? pool->size() : 1;
  auto n_items = [&] { return int64_t(runs.size()) * n_kv * (group / head_chunk); };
  if (threads > 1 && n_items() < 4 * threads && run_len > 1) runs = query_runs(mask, n_q, run_len = 1);
  if (threads > 1 && n_items() < 4 * threads) head_chunk = 1;
  const int chunks = group / head_chunk;

  // Items claimed in chunks (about four per thread), so a thread slowed by another process takes fewer; the
  // pool times loops per class, and an item's cost grows with the keys it reads.
  const int64_t items = n_items();
  const int64_t chunk = std::max<int64_t>(1, items / (4 * threads));
  const uint64_t cost_shape = uint64_t(std::bit_width(uint64_t(n_keys))) | uint64_t(hd) << 8 | uint64_t(std::bit_width(uint64_t(n_q))) << 24;
  parallel_for_dynamic(pool, items, chunk, [&](int64_t begin, int64_t end) {
    thread_local std::vector<int32_t> keys;
    thread_local std::vector<float> scores;
    if (int64_t(keys.size()) < n_keys) keys.resize(n_keys);
    if (int64_t(scores.size()) < kernels::kMaxTileRows * n_keys) scores.resize(kernels::kMaxTileRows * n_keys);
    const float* q_rows[kernels::kMaxTileRows];
    float* out_rows[kernels::kMaxTileRows];
    int64_t current = -1, n_visible = 0;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t r = item / (n_kv * chunks);
      const int kv = int(item / chunks % n_kv), chunk = int(item % chunks);
      if (r != current) {
        n_visible = visible_keys(mask, runs[r].first, n_keys, keys.data());
        current = r;
      }
      int rows = 0;
      for (int64_t i = runs[r].first; i < runs[r].second; ++i)
        for (int c = 0; c < head_chunk; ++c) {
          const int64_t h = int64_t(kv) * group + int64_t(chunk) * head_chunk + c;
          q_rows[rows] = q + i * ldq + h * hd;
          out_rows[rows++] = out + i * ldo + h * hd;
        }
      attend(q_rows, out_rows, rows, k + kv * kv_head_stride, v + kv * kv_head_stride, hd, keys.data(), n_visible,
             shape.scale, shape.softcap, scores.data());
    }
  }, cost_shape);
}

// ---- references ----------------------------------------------------------------------------------
namespace reference {

void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y) {
  if (n <= 0) return;
  double sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) sum_sq += double(x[i]) * x[i];
  const float scale = float(1.0 / std::sqrt(sum_sq / double(n) + eps));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * (w ? w[i] : 1.0f);
}

void rope(float* x, int64_t n_rows, int n_heads, const int32_t* pos, const RopeParams& p) {
  const RopeGeometry g = rope_geometry(p);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int h = 0; h < n_heads; ++h) {
      float* xh = x + (r * n_heads + h) * int64_t(p.head_dim);
      for (int i = 0; i < g.half; ++i) {
        const double inv_freq = i < g.active ? std::pow(double(p.theta), -2.0 * i / g.rot_dims) : 0.0;
        const double angle = double(pos[r]) * inv_freq;
        const float c = float(std::cos(angle)), s = float(std::sin(angle));
        int a, b;
        rope_pair(p.layout, i, g.half, &a, &b);
        const float x0 = xh[a], x1 = xh[b];
        xh[a] = x0 * c - x1 * s;
        xh[b] = x0 * s + x1 * c;
      }
    }
  }
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = silu(gate[i]) * up[i];
}
void geglu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_tanh(gate[i]) * up[i];
}
void softcap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = float(double(cap) * std::tanh(double(x[i]) / double(cap)));
}

namespace {
float max_of(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  return m;
}
}  // namespace

void softmax(const float* x, int64_t n, float* out) {
  if (n <= 0) return;
  const float m = max_of(x, n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - m);
  for (int64_t i = 0; i < n; ++i) out[i] = float(std::exp(double(x[i]) - m) / sum);
}

void log_softmax(const float* x, int64_t n, float* out) {
  if (n <= 0) return;
  const float m = max_of(x, n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - m);
  const double lse = m + std::log(sum);
  for (int64_t i = 0; i < n; ++i) out[i] = float(double(x[i]) - lse);
}

void exp_shifted(const float* x, int64_t n, float shift, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = float(std::exp(double(x[i]) - double(shift)));
}

float entropy(const float* x, int64_t n) { return n <= 0 ? 0.f : row_stats(x, n).entropy; }

double logsumexp(const float* x, int64_t n) {
  if (n <= 0) return -std::numeric_limits<float>::infinity();
  const float m = max_of(x, n);
  if (std::isinf(m)) return m;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - m);
  return m + std::log(sum);
}

RowStats row_stats(const float* x, int64_t n) {
  RowStats st;
  if (n <= 0) return st;
  int64_t arg = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[arg]) arg = i;
  const double m = x[arg];
  double second = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i)
    if (i != arg) second = std::max(second, double(x[i]));
  double sum = 0, moment = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = double(x[i]) - m, e = std::exp(d);
    sum += e;
    if (e > 0) moment += e * d;
  }
  st.argmax = int32_t(arg);
  st.max = float(m);
  st.logsumexp = float(m + std::log(sum));
  st.p_top1 = float(1.0 / sum);
  st.p_top2 = n > 1 ? float(std::exp(second - m) / sum) : 0.f;
  st.entropy = float(std::log(sum) - moment / sum);
  return st;
}

void attention(const float* q, int64_t n_q, int64_t ldq, const float* k, const float* v, int64_t n_keys,
               int64_t kv_head_stride, const AttentionMask& mask, const AttentionShape& shape, float* out,
               int64_t ldo) {
  check_attention(n_q, n_keys, mask, shape);
  const int64_t hd = shape.head_dim;
  const int group = shape.n_heads / shape.n_kv_heads;
  std::vector<float> scores(n_keys), acc(hd);
  for (int64_t i = 0; i < n_q; ++i) {
    for (int h = 0; h < shape.n_heads; ++h) {
      const float* qh = q + i * ldq + h * hd;
      const float* kh = k + (h / group) * kv_head_stride;
      const float* vh = v + (h / group) * kv_head_stride;
      float m = -std::numeric_limits<float>::infinity();
      bool any = false;
      for (int64_t j = 0; j < n_keys; ++j) {
        if (!visible(mask, i, j)) continue;
        float s = 0;
        for (int64_t d = 0; d < hd; ++d) s += qh[d] * kh[j * hd + d];
        s *= shape.scale;
        if (shape.softcap > 0) s = shape.softcap * std::tanh(s / shape.softcap);
        scores[j] = s;
        m = std::max(m, s);
        any = true;
      }
      std::fill(acc.begin(), acc.end(), 0.f);
      float sum = 0;
      for (int64_t j = 0; j < n_keys; ++j) {
        if (!visible(mask, i, j)) continue;
        const float p = std::exp(scores[j] - m);
        sum += p;
        for (int64_t d = 0; d < hd; ++d) acc[d] += p * vh[j * hd + d];
      }
      float* oh = out + i * ldo + h * hd;
      for (int64_t d = 0; d < hd; ++d) oh[d] = any ? acc[d] / sum : 0.f;
    }
  }
}

}  // namespace reference
}  // namespace canvas
