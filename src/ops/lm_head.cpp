// Fused LM head (see lm_head.h): lanes of the vocabulary, one logits matmul each, reduced tile by tile
// with online softmax rescaling and folded in vocabulary order; and the double-precision reference twin.
#include "ops/lm_head.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/matmul.h"
#include "ops/ops.h"
#include "ops/table_product.h"

// The row kernel uses GCC vector types wider than the baseline ISA. Every helper taking them is always
// inlined into a function compiled for the instruction set in use, so none passes them across a call
// and GCC's note that such calls changed ABI does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace canvas {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int kLanes = 16;  // one AVX-512 register, two AVX2 or four SSE registers
using Floats = float __attribute__((vector_size(4 * kLanes)));
using Ints = int32_t __attribute__((vector_size(4 * kLanes)));
using Doubles = double __attribute__((vector_size(8 * kLanes)));

void check_head_args(const TensorView& w, const float* x, int64_t m, int64_t hidden,
                     const HeadStreamOptions& opt, const HeadRowStats* stats) {
  const std::string head =
      "lm_head_stream: head '" + w.name + "' (" + dtype_name(w.type) + " " + w.shape_string() + ")";
  check(matmul_supports(w.type), head + ": unsupported weight type");
  check(w.data != nullptr && w.rows() > 0 && w.cols() > 0, head + ": empty head");
  check(w.rows() <= std::numeric_limits<int32_t>::max(), head + ": vocabulary too large for int32 token ids");
  check(hidden == w.cols(), head + ": activation rows have " + std::to_string(hidden) +
                                " values, the head's rows " + std::to_string(w.cols()));
  check(m >= 0, "lm_head_stream: negative row count " + std::to_string(m));
  check(std::isfinite(opt.temperature) && opt.temperature >= 0,
        "lm_head_stream: temperature must be finite and >= 0, got " + std::to_string(opt.temperature));
  check(std::isfinite(opt.softcap) && opt.softcap >= 0,
        "lm_head_stream: softcap must be finite and >= 0, got " + std::to_string(opt.softcap));
  check(m == 0 || x != nullptr, "lm_head_stream: null activations");
  check(m == 0 || stats != nullptr, "lm_head_stream: null stats output");
}

// Vocabulary entries per tile, the step of the row reductions and of the soft-embedding product: ~512 KiB
// of weight rows (half an L2), 256 to 1024 entries, so the tile's rows are dequantised from cache and its
// [m x tile] weights and [H x tile] f32 rows stay cache-sized.
int64_t tile_entries(const TensorView& w) {
  int64_t tile = 1024;
  while (tile > 256 && tile * w.row_size() > (int64_t(512) << 10)) tile /= 2;
  return tile;
}

// Tiles per lane: a lane is the unit of work one thread does alone, start to finish, and the span of one
// logits matmul (whose activation quantisation would cost ~20% at one tile per call).
constexpr int64_t kTilesPerLane = 8;

// The softmax reductions of one row over a contiguous stretch of the vocabulary (a tile, a lane, or
// everything so far). Sums are relative to the stretch's max M, so they never overflow, and two
// stretches merge without revisiting their logits (merge_into below).
struct RowState {
  float max = -kInf;               // M: largest logit
  float second = -kInf;            // largest logit other than the argmax one
  int32_t argmax = 0;              // first index holding M
  double sum = 0, moment = 0;      // sum e^(z - M), sum e^(z - M) (z - M)
  double t_sum = 0, t_moment = 0;  // the same of z / T: sum e^((z - M) / T), sum e^((z - M) / T) (z - M) / T
  double best = -std::numeric_limits<double>::infinity();  // best Gumbel score z / T + g
  int32_t sample = 0;
  float sample_logit = 0;
};

struct TileParams {
  float softcap;
  double temperature;
  float inv_temperature;
  bool tempered;  // T > 0 and T != 1: tempered sums differ from the plain ones
};

// Soft-embedding weights e^((z - M) / T) of two merged stretches take these factors to become relative
// to the merged max.
struct MergeScales {
  float earlier, later;
};

// Folds `later` (a stretch that follows `a`'s in the vocabulary) into `a`. Online-softmax rescaling:
// with M = max(M_a, M_b) and d = M_x - M <= 0, e^(z - M) = e^(z - M_x) e^d and (z - M) = (z - M_x) + d,
// so sum = sum_x e^d and moment = e^d (moment_x + sum_x d), summed over both. logsumexp = M + log sum,
// entropy = log sum - moment / sum. Ties in max or score keep `a`'s, the lower index.
MergeScales merge_into(RowState& a, const RowState& later, const TileParams& p) {
  const RowState& b = later;
  if (a.sum == 0) {  // a is empty
    a = b;
    return {0.f, 1.f};
  }
  const float M = std::max(a.max, b.max);
  const double da = double(a.max) - M, db = double(b.max) - M, ca = std::exp(da), cb = std::exp(db);
  a.moment = ca * (a.moment + a.sum * da) + cb * (b.moment + b.sum * db);
  a.sum = ca * a.sum + cb * b.sum;
  MergeScales scales{float(ca), float(cb)};
  if (p.tempered) {
    const double ta = da / p.temperature, tb = db / p.temperature, cta = std::exp(ta), ctb = std::exp(tb);
    a.t_moment = cta * (a.t_moment + a.t_sum * ta) + ctb * (b.t_moment + b.t_sum * tb);
    a.t_sum = cta * a.t_sum + ctb * b.t_sum;
    scales = {float(cta), float(ctb)};
  }
  if (b.max > a.max) {
    a.second = std::max(a.max, b.second);
    a.max = b.max;
    a.argmax = b.argmax;
  } else {
    a.second = std::max(a.second, b.max);
  }
  if (b.best > a.best) {
    a.best = b.best;
    a.sample = b.sample;
    a.sample_logit = b.sample_logit;
  }
  return scales;
}

[[gnu::always_inline]] inline Floats splat(float v) {
  return Floats{} + v;
}
[[gnu::always_inline]] inline Floats load(const float* p) {
  Floats v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
[[gnu::always_inline]] inline void store(float* p, Floats v) {
  std::memcpy(p, &v, sizeof v);
}
[[gnu::always_inline]] inline Floats vmax(Floats a, Floats b) {
  return a > b ? a : b;
}
[[gnu::always_inline]] inline Floats vmin(Floats a, Floats b) {
  return a < b ? a : b;
}
[[gnu::always_inline]] inline Doubles widen(Floats v) {
  return __builtin_convertvector(v, Doubles);
}

// exp(x) for x <= 0 with ~1 ulp error, 0 below -87.3, NaN for NaN: Cody-Waite reduction x = n ln2 + r,
// |r| <= ln2/2, and Cephes' degree-6 polynomial for e^r (the same as ops_simd.h's exp, which says why
// NaN must come through).
[[gnu::always_inline]] inline Floats vexp(Floats x) {
  const Floats lo = splat(-87.33654f), magic = splat(12582912.f);  // 1.5 * 2^23: adding it rounds
  const Floats input = x;
  const auto nan = x != x;
  const auto under = x < lo;
  x = vmax(x, lo);
  const Floats n = (x * 1.44269504088896341f + magic) - magic;
  Floats r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  Floats p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + (r + 1.f);
  const Ints pow2n = (__builtin_convertvector(n, Ints) + 127) << 23;  // n >= -126: a normal float
  const Floats y = p * std::bit_cast<Floats>(pow2n);
  return nan ? input : under ? Floats{} : y;
}

template <class V>
double lane_sum(V v) {
  double s = 0;
  for (int l = 0; l < kLanes; ++l) s += v[l];
  return s;
}

// The state of one row over one tile: z[0, n) are the tile's logits (vocabulary v0 + i) in a buffer with
// room for n rounded up to kLanes; softcap and the padding are applied here, in place. Writes the tile's
// soft-embedding weights e^((z - M) / T) (e^(z - M) when not tempered) to probs when non-null.
// `best` is the best Gumbel score before this tile: entries that cannot beat it are skipped.
[[gnu::always_inline]] inline RowState tile_state_body(float* z, int64_t n, int64_t v0, const TileParams& p,
                                                       uint64_t key, double best, float* probs) {
  const int64_t n_pad = (n + kLanes - 1) / kLanes * kLanes;
  if (p.softcap > 0) softcap(z, n, p.softcap);  // as the materialised head in model.cpp: logits agree bitwise
  std::fill(z + n, z + n_pad, -kInf);  // padding: never a max, e^-inf = 0

  // Max, its first index and the runner-up: per lane the two largest values and the first index of the
  // largest, then across lanes (the runner-up is the largest value once one copy of the max is set aside).
  Floats top = splat(-kInf), runner = top;
  Ints index, top_index{};
  for (int l = 0; l < kLanes; ++l) index[l] = l;
  for (int64_t i = 0; i < n_pad; i += kLanes, index += kLanes) {
    const Floats v = load(z + i);
    runner = vmax(runner, vmin(top, v));
    top_index = v > top ? index : top_index;
    top = vmax(top, v);
  }
  RowState s;
  for (int l = 0; l < kLanes; ++l) s.max = std::max(s.max, top[l]);
  int32_t arg = std::numeric_limits<int32_t>::max();
  bool max_seen = false;
  for (int l = 0; l < kLanes; ++l) {
    s.second = std::max(s.second, runner[l]);
    if (top[l] == s.max) arg = std::min(arg, top_index[l]);
    if (top[l] == s.max && !max_seen)
      max_seen = true;
    else
      s.second = std::max(s.second, top[l]);
  }
  s.argmax = int32_t(v0 + arg);

  // Exp sums relative to M: float exps, double sums.
  const Floats mv = splat(s.max), floor = splat(-1000.f), inv_t = splat(p.inv_temperature);
  Doubles sum{}, moment{}, t_sum{}, t_moment{};
  for (int64_t i = 0; i < n_pad; i += kLanes) {
    const Floats d = load(z + i) - mv;
    const Floats e = vexp(d);
    sum += widen(e);
    moment += widen(e * vmax(d, floor));  // the floor keeps 0 * -inf out
    if (p.tempered) {
      const Floats dt = d * inv_t;
      const Floats et = vexp(dt);
      t_sum += widen(et);
      t_moment += widen(et * vmax(dt, floor));
      if (probs) store(probs + i, et);
    } else if (probs) {
      store(probs + i, e);
    }
  }
  s.sum = lane_sum(sum);
  s.moment = lane_sum(moment);
  s.t_sum = lane_sum(t_sum);
  s.t_moment = lane_sum(t_moment);

  // Gumbel-max. Entry i can only beat `best` if g_i > best - z_i / T >= best - M / T, i.e. if
  // u_i > u_min = exp(-exp(-(best - M / T))): testing the hash-derived u first skips the two logs for
  // nearly every entry. The margins cover rounding, so skipping never changes the result.
  if (p.temperature > 0) {
    auto threshold = [&](double score) {
      const double bound = score - double(s.max) / p.temperature;
      return std::exp(-std::exp(-(bound - 1e-9 * (1 + std::fabs(bound))))) - 1e-15;
    };
    double u_min = threshold(best);
    for (int64_t i = 0; i < n; ++i) {
      const double u = head_noise_uniform(key, v0 + i);
      if (u <= u_min) continue;
      const double score = double(z[i]) / p.temperature + head_gumbel(u);
      if (score > best) {
        best = s.best = score;
        s.sample = int32_t(v0 + i);
        s.sample_logit = z[i];
        u_min = threshold(best);
      }
    }
  }
  return s;
}

using TileStateFn = RowState (*)(float*, int64_t, int64_t, const TileParams&, uint64_t, double, float*);

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma"))) RowState tile_state_avx512(
    float* z, int64_t n, int64_t v0, const TileParams& p, uint64_t key, double best, float* probs) {
  return tile_state_body(z, n, v0, p, key, best, probs);
}
__attribute__((target("avx2,fma"))) RowState tile_state_avx2(float* z, int64_t n, int64_t v0,
                                                             const TileParams& p, uint64_t key, double best,
                                                             float* probs) {
  return tile_state_body(z, n, v0, p, key, best, probs);
}
RowState tile_state_baseline(float* z, int64_t n, int64_t v0, const TileParams& p, uint64_t key, double best,
                             float* probs) {
  return tile_state_body(z, n, v0, p, key, best, probs);
}

// Scratch of the calling thread, grown on demand (lanes run back to back on the same threads).
float* scratch(std::vector<float>& buffer, int64_t n) {
  if (int64_t(buffer.size()) < n) buffer.resize(size_t(n));
  return buffer.data();
}

RowStats finish_stats(const RowState& s, double sum, double moment, double temperature) {
  RowStats st;
  const double top = double(s.max) / temperature;
  st.argmax = s.argmax;
  st.max = float(top);
  st.logsumexp = float(top + std::log(sum));
  st.p_top1 = float(1.0 / sum);
  st.p_top2 = float(std::exp(double(s.second) / temperature - top) / sum);
  st.entropy = float(std::log(sum) - moment / sum);
  return st;
}

}  // namespace

void lm_head_stream(const TensorView& w, const float* x, int64_t m, int64_t hidden,
                    const HeadStreamOptions& opt, HeadRowStats* stats, float* soft_embedding,
                    ThreadPool* pool) {
  check_head_args(w, x, m, hidden, opt, stats);
  if (m == 0) return;
  const int64_t V = w.rows(), H = hidden, tile = tile_entries(w), lane = kTilesPerLane * tile;
  const int64_t n_lanes = (V + lane - 1) / lane;
  // Row strides of the per-thread logits [m x lane] and weights [m x tile] (no wider than the vocabulary).
  auto padded = [](int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; };
  const int64_t lane_stride = padded(std::min(lane, V)), tile_stride = padded(std::min(tile, V));
  const double T = opt.temperature;
  // (1 / T is clamped to a finite float so that 0 * (1 / T) stays 0 for T near the smallest doubles.)
  const float inv_t = T > 0 ? float(std::min(1.0 / T, double(std::numeric_limits<float>::max()))) : 1.f;
  const TileParams params{opt.softcap, T, inv_t, T > 0 && T != 1};
  const bool soft = soft_embedding != nullptr;
  TileStateFn tile_state = tile_state_baseline;
  if (ops_simd_level() == SimdLevel::Avx512)
    tile_state = tile_state_avx512;
  else if (ops_simd_level() == SimdLevel::Avx2)
    tile_state = tile_state_avx2;
  std::vector<uint64_t> keys(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i)
    keys[size_t(i)] = head_noise_key(opt.seed, opt.row_ids ? opt.row_ids[i] : uint64_t(i));

  // Lanes run in waves, each lane on one thread with its own states (and soft-embedding sums); after a
  // wave its lanes are folded into the totals in lane order. The fold order is fixed whatever the wave
  // size, so the wave size (~32 MiB of lane results, but at least 4 lanes per thread) may depend on the
  // thread count.
  const int64_t lane_bytes = m * int64_t(sizeof(RowState) + (soft ? H * sizeof(float) : 0));
  const int64_t threads = pool ? pool->size() : 1;
  const int64_t wave = std::min(n_lanes, std::max(4 * threads, (int64_t(32) << 20) / lane_bytes));
  std::vector<RowState> totals(static_cast<size_t>(m)), lane_states(size_t(wave * m));
  std::vector<float> lane_soft(soft ? size_t(wave * m * H) : 0);

  // One lane: its [m x lane] logits in one matmul (one activation quantisation per lane), then per tile
  // each row's tile state merged into the lane's and (soft) the tile's weights times its rows as stored
  // (table_rows_product: each row dequantised once, no transpose).
  auto run_lane = [&](int64_t lane_index, RowState* states, float* soft_sums) {
    thread_local std::vector<float> logits_buffer, probs_buffer, partial_buffer;
    thread_local std::vector<MergeScales> scales;
    const int64_t begin = lane_index * lane, end = std::min(V, begin + lane);
    float* logits = scratch(logits_buffer, m * lane_stride);
    TensorView rows_of_lane = w;  // rows [begin, end) of w: quantised rows are whole blocks, densely packed
    rows_of_lane.ne = {w.cols(), end - begin, 1, 1};
    rows_of_lane.n_dims = 2;
    rows_of_lane.data = w.row(begin);
    matmul(rows_of_lane, x, H, m, logits, lane_stride, nullptr);
    float* probs = soft ? scratch(probs_buffer, m * tile_stride) : nullptr;
    float* partial = soft ? scratch(partial_buffer, m * H) : nullptr;
    scales.resize(size_t(m));
    std::fill(states, states + m, RowState{});
    if (soft) std::fill(soft_sums, soft_sums + m * H, 0.f);
    for (int64_t v0 = begin; v0 < end; v0 += tile) {
      const int64_t n = std::min(tile, end - v0);
      for (int64_t i = 0; i < m; ++i) {
        const RowState t = tile_state(logits + i * lane_stride + (v0 - begin), n, v0, params, keys[size_t(i)],
                                      states[i].best, soft ? probs + i * tile_stride : nullptr);
        scales[size_t(i)] = merge_into(states[i], t, params);
      }
      if (!soft) continue;
      table_rows_product(w, v0, n, probs, tile_stride, m, partial, H, false, nullptr);
      for (int64_t i = 0; i < m; ++i) {
        const MergeScales sc = scales[size_t(i)];
        float* sums = soft_sums + i * H;
        const float* add = partial + i * H;
        for (int64_t j = 0; j < H; ++j) sums[j] = sums[j] * sc.earlier + add[j] * sc.later;
      }
    }
  };

  if (soft) std::fill(soft_embedding, soft_embedding + m * H, 0.f);
  ThreadPool::Busy busy(pool);
  for (int64_t l0 = 0; l0 < n_lanes; l0 += wave) {
    const int64_t count = std::min(wave, n_lanes - l0);
    parallel_for_dynamic(pool, count, 1, [&](int64_t b, int64_t e) {
      for (int64_t l = b; l < e; ++l)
        run_lane(l0 + l, &lane_states[size_t(l * m)], soft ? &lane_soft[size_t(l * m * H)] : nullptr);
    }, uint64_t(std::bit_width(uint64_t(m))) << 1 | uint64_t(soft));  // a lane's cost grows with the rows
    parallel_for(pool, m, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        for (int64_t l = 0; l < count; ++l) {
          const MergeScales sc = merge_into(totals[size_t(i)], lane_states[size_t(l * m + i)], params);
          if (!soft) continue;
          float* sums = soft_embedding + i * H;
          const float* add = &lane_soft[size_t((l * m + i) * H)];
          for (int64_t j = 0; j < H; ++j) sums[j] = sums[j] * sc.earlier + add[j] * sc.later;
        }
    }, uint64_t(std::bit_width(uint64_t(count))) << 1 | uint64_t(soft));
  }

  for (int64_t i = 0; i < m; ++i) {
    const RowState& s = totals[size_t(i)];
    HeadRowStats& out = stats[i];
    out.plain = finish_stats(s, s.sum, s.moment, 1.0);
    out.tempered = params.tempered ? finish_stats(s, s.t_sum, s.t_moment, T) : out.plain;
    out.sample = T > 0 ? s.sample : s.argmax;
    const float sample_logit = T > 0 ? s.sample_logit : s.max;
    out.p_sample = float(std::exp(double(sample_logit) - double(s.max)) / s.sum);
    if (soft) {
      const float norm = float(1.0 / (params.tempered ? s.t_sum : s.sum));
      for (int64_t j = 0; j < H; ++j) soft_embedding[i * H + j] *= norm;
    }
  }
}

namespace reference {

namespace {
// Softmax statistics of z / T by definition, two passes in double; also returns log sum exp(z / T).
RowStats stats_of(const double* z, int64_t n, double T, double* log_sum) {
  int64_t arg = 0;
  for (int64_t v = 1; v < n; ++v)
    if (z[v] > z[arg]) arg = v;
  double second = -std::numeric_limits<double>::infinity();
  for (int64_t v = 0; v < n; ++v)
    if (v != arg) second = std::max(second, z[v]);
  const double top = z[arg] / T;
  double sum = 0, moment = 0;
  for (int64_t v = 0; v < n; ++v) {
    const double d = z[v] / T - top, e = std::exp(d);
    sum += e;
    if (e > 0) moment += e * d;
  }
  RowStats st;
  st.argmax = int32_t(arg);
  st.max = float(top);
  st.logsumexp = float(top + std::log(sum));
  st.p_top1 = float(1.0 / sum);
  st.p_top2 = float(std::exp(second / T - top) / sum);
  st.entropy = float(std::log(sum) - moment / sum);
  *log_sum = top + std::log(sum);
  return st;
}
}  // namespace

void lm_head_stream(const TensorView& w, const float* x, int64_t m, int64_t hidden,
                    const HeadStreamOptions& opt, HeadRowStats* stats, float* soft_embedding) {
  check_head_args(w, x, m, hidden, opt, stats);
  if (m == 0) return;
  const int64_t V = w.rows(), H = hidden;
  const double T = opt.temperature, cap = opt.softcap, soft_T = T > 0 ? T : 1.0;
  std::vector<float> raw(size_t(m * V));
  matmul_reference(w, x, H, m, raw.data(), V);
  std::vector<double> z(raw.size()), soft_lse(static_cast<size_t>(m));
  for (size_t k = 0; k < raw.size(); ++k)
    z[k] = cap > 0 ? cap * std::tanh(double(raw[k]) / cap) : double(raw[k]);

  for (int64_t i = 0; i < m; ++i) {
    const double* zi = &z[size_t(i * V)];
    double lse = 0, t_lse = 0;
    stats[i].plain = stats_of(zi, V, 1.0, &lse);
    stats[i].tempered = stats_of(zi, V, T > 0 ? T : 1.0, &t_lse);
    int64_t sample = stats[i].plain.argmax;
    if (T > 0) {
      const uint64_t key = head_noise_key(opt.seed, opt.row_ids ? opt.row_ids[i] : uint64_t(i));
      double best = -std::numeric_limits<double>::infinity();
      for (int64_t v = 0; v < V; ++v) {
        const double score = zi[v] / T + head_gumbel(head_noise_uniform(key, v));
        if (score > best) {
          best = score;
          sample = v;
        }
      }
    }
    stats[i].sample = int32_t(sample);
    stats[i].p_sample = float(std::exp(zi[sample] - lse));
    soft_lse[size_t(i)] = T > 0 ? t_lse : lse;
  }

  if (soft_embedding) {
    std::vector<double> acc(size_t(m * H), 0.0);
    std::vector<float> row(static_cast<size_t>(H));
    for (int64_t v = 0; v < V; ++v) {
      get_row(w, v, row.data());
      for (int64_t i = 0; i < m; ++i) {
        const double p = std::exp(z[size_t(i * V + v)] / soft_T - soft_lse[size_t(i)]);
        for (int64_t j = 0; j < H; ++j) acc[size_t(i * H + j)] += p * row[size_t(j)];
      }
    }
    for (int64_t k = 0; k < m * H; ++k) soft_embedding[k] = float(acc[size_t(k)]);
  }
}

}  // namespace reference
}  // namespace canvas
