// The CUDA backend's kernels against the CPU ops they mirror; every test skips, saying why, where the
// build has no CUDA backend or the machine no usable device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/matmul.h"
#include "ops/ops.h"

#include "bench/synthetic.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/placement.h"
#include "test_util.h"

#if CANVAS_HAVE_CUDA
#include "cuda/cuda_backend.h"
#include "cuda/cuda_module.h"
#include "cuda/cuda_ops.h"
#endif

namespace canvas {
namespace {

#if !CANVAS_HAVE_CUDA

TEST(Cuda, BackendBuilt) { GTEST_SKIP() << "built without the CUDA backend (no nvcc / cuBLAS found)"; }

#else

// Which weights stay in their blocks on the device (no device needed to ask).
TEST(Cuda, StorageOfEachWeightType) {
  using S = cuda::DeviceMatrix::Storage;
  EXPECT_EQ(cuda::device_storage_of(DType::F32), S::F32);
  EXPECT_EQ(cuda::device_storage_of(DType::BF16), S::BF16);
  EXPECT_EQ(cuda::device_storage_of(DType::F16), S::F16);
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K,
                  DType::Q6_K, DType::Q4_0_R16, DType::Q8_0_R16})
    EXPECT_EQ(cuda::device_storage_of(t), S::Quant) << dtype_name(t);
  EXPECT_EQ(cuda::device_storage_of(DType::Q2_K), S::F16);  // no device decoder: f16 copies
}

// The DiffusionGemma-26B-A4B shape at Q4_0 with a 4096-token cache, as this backend lays it out: the
// weights' device bytes are their file bytes (every matrix Q4_0, routers and vectors f32), plus the KV
// cache (f16: the backend's choice for a quantised model). A plan, not a measurement: bench --device cuda
// reports what a device actually holds.
TEST(Cuda, DiffusionGemma26BAtQ4_0PlansUnder16GiB) {
  const bench::SyntheticShape& shape = bench::find_synthetic_shape("diffusion-gemma:26b-a4b");
  bench::SyntheticOptions options;
  options.type = DType::Q4_0;
  const double gib = double(int64_t(1) << 30);
  const double weights = double(bench::synthetic_model_bytes(shape, options)) / gib;
  const double cache = double(cuda::device_cache_bytes(shape.config, 4096, cuda::KvType::F16)) / gib;
  std::printf("  26B-A4B q4_0: weights %.2f GiB + 4096-token f16 KV cache %.2f GiB = %.2f GiB\n", weights, cache,
              weights + cache);
  EXPECT_LE(weights + cache, 14.5);  // leaves 1.5 GiB of the 16 for the CUDA context and a pass's buffers
}

#define SKIP_WITHOUT_DEVICE()                                        \
  do {                                                               \
    std::string why;                                                 \
    if (!cuda::available(&why)) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)

std::vector<float> random_vector(Rng& rng, size_t n, double scale = 1.0) {
  std::vector<float> v(n);
  for (float& x : v) x = float(rng.normal() * scale);
  return v;
}

template <typename T>
cuda::DeviceBuffer to_device(const std::vector<T>& host) {
  cuda::DeviceBuffer b(host.size() * sizeof(T));
  b.upload(host.data(), host.size() * sizeof(T));
  return b;
}

template <typename T>
std::vector<T> to_host(const cuda::DeviceBuffer& b, size_t n) {
  cuda::synchronize();
  std::vector<T> host(n);
  b.download(host.data(), n * sizeof(T));
  return host;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::abs(double(got[i]) - want[i]));
    norm = std::max(norm, std::abs(double(want[i])));
  }
  EXPECT_LE(worst, rel * std::max(norm, 1e-6)) << what << ": max abs error " << worst << " of max |x| " << norm;
}

TEST(Cuda, DeviceIsDescribed) {
  SKIP_WITHOUT_DEVICE();
  const std::string d = cuda::device_description();
  EXPECT_NE(d.find("sm_"), std::string::npos) << d;
}

// The backend's count of its own device memory: up by a buffer's size while it lives, down after; the
// peak keeps the most. A moved buffer is counted once.
TEST(Cuda, BufferBytesFollowAllocations) {
  SKIP_WITHOUT_DEVICE();
  const int64_t before = cuda::device_buffer_bytes();
  {
    cuda::DeviceBuffer a(size_t(3) << 20);
    EXPECT_EQ(cuda::device_buffer_bytes() - before, int64_t(3) << 20);
    cuda::DeviceBuffer b(std::move(a));
    EXPECT_EQ(cuda::device_buffer_bytes() - before, int64_t(3) << 20);
    b.reserve<float>(int64_t(1) << 20);  // 4 MiB: grows (the old one freed after)
    EXPECT_EQ(cuda::device_buffer_bytes() - before, int64_t(4) << 20);
    EXPECT_GE(cuda::device_buffer_peak_bytes(), before + (int64_t(7) << 20));  // both, for a moment
  }
  EXPECT_EQ(cuda::device_buffer_bytes(), before);
}

TEST(Cuda, RmsNormMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(1);
  const int64_t rows = 7, n = 1000;
  const auto x = random_vector(rng, rows * n), w = random_vector(rng, n);
  std::vector<float> want(x.size());
  for (int64_t r = 0; r < rows; ++r) reference::rms_norm(&x[r * n], w.data(), n, 1e-6f, &want[r * n]);
  auto dx = to_device(x), dw = to_device(w);
  cuda::DeviceBuffer dy(x.size() * 4);
  cuda::rms_norm(dx.as<float>(), dw.as<float>(), rows, n, 1e-6f, dy.as<float>());
  expect_close(to_host<float>(dy, x.size()), want, 1e-5, "rms_norm");
  // No weight, in place.
  for (int64_t r = 0; r < rows; ++r) reference::rms_norm(&x[r * n], nullptr, n, 1e-6f, &want[r * n]);
  cuda::rms_norm(dx.as<float>(), nullptr, rows, n, 1e-6f, dx.as<float>());
  expect_close(to_host<float>(dx, x.size()), want, 1e-5, "rms_norm without weight");
}

TEST(Cuda, RopeMatchesCpuIncludingProportional) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(2);
  const int64_t rows = 5;
  const int heads = 3;
  for (RopeLayout layout : {RopeLayout::Normal, RopeLayout::Neox}) {
    for (int active : {0, 4}) {  // 0: every pair rotates; 4 of 16 pairs: DiffusionGemma's proportional RoPE
      RopeParams p;
      p.layout = layout;
      p.head_dim = 32;
      p.active_pairs = active;
      p.theta = 1e6f;
      const auto x = random_vector(rng, size_t(rows * heads * p.head_dim));
      const std::vector<int32_t> pos = {0, 1, 17, 4095, 123456};
      std::vector<float> want = x;
      reference::rope(want.data(), rows, heads, pos.data(), p);
      auto dx = to_device(x);
      auto dpos = to_device(pos);
      cuda::rope(dx.as<float>(), rows, heads, dpos.as<int32_t>(), p);
      expect_close(to_host<float>(dx, x.size()), want, 1e-5, "rope");
    }
  }
}

TEST(Cuda, GatedActivationsAndSoftcapMatchCpu) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(3);
  const size_t n = 3001;
  const auto g = random_vector(rng, n, 3), u = random_vector(rng, n);
  auto dg = to_device(g), du = to_device(u);
  cuda::DeviceBuffer dout(n * 4);
  std::vector<float> want(n);
  reference::swiglu(g.data(), u.data(), int64_t(n), want.data());
  cuda::swiglu(dg.as<float>(), du.as<float>(), int64_t(n), dout.as<float>());
  expect_close(to_host<float>(dout, n), want, 1e-5, "swiglu");
  reference::geglu(g.data(), u.data(), int64_t(n), want.data());
  cuda::geglu(dg.as<float>(), du.as<float>(), int64_t(n), dout.as<float>());
  expect_close(to_host<float>(dout, n), want, 1e-5, "geglu");
  for (size_t i = 0; i < n; ++i) want[i] = 30.f * std::tanh(g[i] * 20 / 30.f);
  std::vector<float> scaled(n);
  for (size_t i = 0; i < n; ++i) scaled[i] = g[i] * 20;
  auto ds = to_device(scaled);
  cuda::softcap(ds.as<float>(), int64_t(n), 30.f);
  expect_close(to_host<float>(ds, n), want, 1e-5, "softcap");
}

TEST(Cuda, RowStatsMatchCpu) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(4);
  const int64_t rows = 6, vocab = 50000;
  auto x = random_vector(rng, size_t(rows * vocab), 4);
  x[size_t(2 * vocab + 7)] = 100;  // a near one-hot row
  x[size_t(3 * vocab + 11)] = 50;  // a tie for the maximum: the lower index wins
  x[size_t(3 * vocab + 900)] = 50;
  auto dx = to_device(x);
  cuda::DeviceBuffer dst(size_t(rows) * sizeof(RowStats));
  cuda::row_stats(dx.as<float>(), rows, vocab, dst.as<RowStats>());
  const auto got = to_host<RowStats>(dst, size_t(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const RowStats want = reference::row_stats(&x[size_t(r * vocab)], vocab);
    EXPECT_EQ(got[size_t(r)].argmax, want.argmax) << "row " << r;
    EXPECT_NEAR(got[size_t(r)].logsumexp, want.logsumexp, 1e-4) << "row " << r;
    EXPECT_NEAR(got[size_t(r)].entropy, want.entropy, 1e-4) << "row " << r;
    EXPECT_NEAR(got[size_t(r)].p_top1, want.p_top1, 1e-5) << "row " << r;
    EXPECT_NEAR(got[size_t(r)].p_top2, want.p_top2, 1e-5) << "row " << r;
  }
}

void check_attention(int head_dim) {
  SCOPED_TRACE("head_dim " + std::to_string(head_dim));
  Rng rng(5);
  AttentionShape shape;
  shape.n_heads = 4;
  shape.n_kv_heads = 2;
  shape.head_dim = head_dim;
  shape.scale = 1.f / std::sqrt(float(head_dim));
  const int64_t n_q = 9, n_keys = 40, stride = n_keys * shape.head_dim;
  const auto q = random_vector(rng, size_t(n_q * shape.n_heads * shape.head_dim));
  const auto k = random_vector(rng, size_t(shape.n_kv_heads * stride));
  const auto v = random_vector(rng, size_t(shape.n_kv_heads * stride));
  // Groups: a cached prefix of 31 keys (causal) and a bidirectional canvas of 9 (group 31), queries are
  // the canvas; a sliding window for some queries; and one query that sees nothing.
  std::vector<int32_t> key_group(n_keys), query_group(n_q, 31), window(n_q, 0);
  for (int64_t j = 0; j < n_keys; ++j) key_group[size_t(j)] = int32_t(std::min<int64_t>(j, 31));
  for (int64_t i = 0; i < n_q; ++i) window[size_t(i)] = int32_t(i % 3 == 0 ? 25 : 0);
  window[4] = 36;  // query 4 sees keys 36 .. 39 only: half the warps see none
  query_group[8] = -1;
  auto dq = to_device(q), dk = to_device(k), dv = to_device(v);
  auto dkg = to_device(key_group), dqg = to_device(query_group), dw = to_device(window);
  const int64_t ld = shape.n_heads * shape.head_dim;
  for (int variant = 0; variant < 3; ++variant) {
    AttentionMask mask, dmask;
    if (variant >= 1) {
      mask.key_group = key_group.data();
      mask.query_group = query_group.data();
      dmask.key_group = dkg.as<int32_t>();
      dmask.query_group = dqg.as<int32_t>();
    }
    if (variant == 2) {
      mask.window_start = window.data();
      dmask.window_start = dw.as<int32_t>();
    }
    AttentionShape s = shape;
    s.softcap = variant == 1 ? 5.f : 0.f;
    std::vector<float> want(size_t(n_q * ld));
    reference::attention(q.data(), n_q, ld, k.data(), v.data(), n_keys, stride, mask, s, want.data(), ld);
    cuda::DeviceBuffer dout(want.size() * 4);
    cuda::attention(dq.as<float>(), n_q, ld, dk.as<float>(), dv.as<float>(), cuda::KvType::F32, n_keys, stride, dmask,
                    s, dout.as<float>(), ld);
    expect_close(to_host<float>(dout, want.size()), want, 1e-5, "attention");
  }
  // A decoder canvas: the cache's keys 12 .. 39 in place, then the canvas's own 9 K/V rows, all visible;
  // the CPU's twin reads the same keys copied into one array.
  const int64_t first = 12, cached = n_keys - first, kv_width = shape.n_kv_heads * shape.head_dim;
  const auto ck = random_vector(rng, size_t(n_q * kv_width)), cv = random_vector(rng, size_t(n_q * kv_width));
  const int64_t keys = cached + n_q, joined_stride = keys * shape.head_dim;
  std::vector<float> jk(size_t(shape.n_kv_heads * joined_stride)), jv(jk.size());
  for (int64_t h = 0; h < shape.n_kv_heads; ++h)
    for (int64_t j = 0; j < keys; ++j)
      for (int64_t d = 0; d < shape.head_dim; ++d) {
        const size_t at = size_t(h * joined_stride + j * shape.head_dim + d);
        const size_t in_cache = size_t(h * stride + (first + j) * shape.head_dim + d);
        const size_t in_rows = size_t((j - cached) * kv_width + h * shape.head_dim + d);
        jk[at] = j < cached ? k[in_cache] : ck[in_rows];
        jv[at] = j < cached ? v[in_cache] : cv[in_rows];
      }
  std::vector<float> want(size_t(n_q * ld));
  reference::attention(q.data(), n_q, ld, jk.data(), jv.data(), keys, joined_stride, AttentionMask{}, shape,
                       want.data(), ld);
  auto dck = to_device(ck), dcv = to_device(cv);
  cuda::ExtraKeys extra;
  extra.k = dck.as<float>();
  extra.v = dcv.as<float>();
  extra.n = n_q;
  extra.ld = kv_width;
  cuda::DeviceBuffer dout(want.size() * 4);
  cuda::attention(dq.as<float>(), n_q, ld, dk.as<float>() + first * shape.head_dim,
                  dv.as<float>() + first * shape.head_dim, cuda::KvType::F32, cached, stride, AttentionMask{}, shape,
                  dout.as<float>(), ld, extra);
  expect_close(to_host<float>(dout, want.size()), want, 1e-5, "attention, cache then canvas rows");
  // A canvas right after a cache that holds nothing it may see: its own rows only.
  reference::attention(q.data(), n_q, ld, jk.data() + cached * shape.head_dim, jv.data() + cached * shape.head_dim,
                       n_q, joined_stride, AttentionMask{}, shape, want.data(), ld);
  cuda::attention(dq.as<float>(), n_q, ld, dk.as<float>(), dv.as<float>(), cuda::KvType::F32, 0, stride,
                  AttentionMask{}, shape, dout.as<float>(), ld, extra);
  expect_close(to_host<float>(dout, want.size()), want, 1e-5, "attention, canvas rows only");
  // The masked attention over an f16 cache (groups and window): the twin reads the same f16 values.
  std::vector<uint16_t> kh(k.size()), vh(v.size());
  std::vector<float> kr(k.size()), vr(v.size());
  for (size_t i = 0; i < k.size(); ++i) {
    kh[i] = f32_to_f16(k[i]);
    vh[i] = f32_to_f16(v[i]);
    kr[i] = f16_to_f32(kh[i]);
    vr[i] = f16_to_f32(vh[i]);
  }
  AttentionMask mask, dmask;
  mask.key_group = key_group.data();
  mask.query_group = query_group.data();
  mask.window_start = window.data();
  dmask.key_group = dkg.as<int32_t>();
  dmask.query_group = dqg.as<int32_t>();
  dmask.window_start = dw.as<int32_t>();
  reference::attention(q.data(), n_q, ld, kr.data(), vr.data(), n_keys, stride, mask, shape, want.data(), ld);
  auto dkh = to_device(kh), dvh = to_device(vh);
  cuda::attention(dq.as<float>(), n_q, ld, dkh.data(), dvh.data(), cuda::KvType::F16, n_keys, stride, dmask, shape,
                  dout.as<float>(), ld);
  expect_close(to_host<float>(dout, want.size()), want, 1e-5, "attention, f16 cache");
}

// Head sizes of the fixtures (16), of most models (64) and of Gemma 4's global layers (512): lanes idle,
// one dim each, and 16 dims each.
TEST(Cuda, AttentionMatchesCpuUnderEveryMask) {
  SKIP_WITHOUT_DEVICE();
  for (int head_dim : {16, 64, 512}) check_attention(head_dim);
}

// Two requests of one pass, each with its own cache of its own size: request B (rows 0 .. 2, a decoder
// canvas's) sees cache B's positions 4 .. 19 in place and then its own three K/V rows; request A (rows
// 3 .. 7, an encoder's) writes its K/V rows into cache A at positions 30 .. 34 (scatter_kv) and attends
// over it causally with groups and a sliding window, its mask arrays indexed from its first row. One
// attention_batch launch for both, against the CPU per request.
TEST(Cuda, BatchedAttentionMatchesEachRequestAlone) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(21);
  AttentionShape shape;
  shape.n_heads = 4;
  shape.n_kv_heads = 2;
  shape.head_dim = 64;
  shape.scale = 0.125f;
  const int64_t D = shape.head_dim, ld = shape.n_heads * D, kv_width = shape.n_kv_heads * D;
  const int64_t rows_b = 3, rows_a = 5, rows = rows_a + rows_b, a0 = rows_b, cap_a = 40, cap_b = 24, cached_a = 30;
  const int64_t first_b = 4, seen_b = 16;
  const auto q = random_vector(rng, size_t(rows * ld));
  const auto own_k = random_vector(rng, size_t(rows * kv_width)), own_v = random_vector(rng, size_t(rows * kv_width));
  auto ka = random_vector(rng, size_t(shape.n_kv_heads * cap_a * D)), va = random_vector(rng, ka.size());
  const auto kb = random_vector(rng, size_t(shape.n_kv_heads * cap_b * D)), vb = random_vector(rng, kb.size());
  // Per row of the pass; B's rows hold values A's mask must not read (a mask indexed by the pass's row
  // instead of A's would see them).
  std::vector<int32_t> pos(static_cast<size_t>(rows), 0), key_group(static_cast<size_t>(cap_a)),
      query_group(static_cast<size_t>(rows), -1), window(static_cast<size_t>(rows), 1000),
      seg_of_row = {1, 1, 1, 0, 0, 0, 0, 0};
  for (int64_t j = 0; j < cap_a; ++j) key_group[size_t(j)] = int32_t(j);
  for (int64_t i = 0; i < rows_a; ++i) {
    pos[size_t(a0 + i)] = int32_t(cached_a + i);
    query_group[size_t(a0 + i)] = int32_t(cached_a + i);
    window[size_t(a0 + i)] = int32_t(i % 2 ? cached_a + i - 7 : 0);
  }
  auto dq = to_device(q), dok = to_device(own_k), dov = to_device(own_v), dka = to_device(ka), dva = to_device(va),
       dkb = to_device(kb), dvb = to_device(vb), dpos = to_device(pos), dkg = to_device(key_group),
       dqg = to_device(query_group), dwin = to_device(window), dseg = to_device(seg_of_row);
  std::vector<cuda::AttentionSegment> segs(2);
  segs[0].k = dka.data();
  segs[0].v = dva.data();
  segs[0].kv_head_stride = cap_a * D;
  segs[0].row0 = a0;
  segs[0].mask.key_group = dkg.as<int32_t>();
  segs[0].mask.query_group = dqg.as<int32_t>() + a0;
  segs[0].mask.window_start = dwin.as<int32_t>() + a0;
  segs[0].n_keys = int32_t(cached_a + rows_a);
  segs[1].k = dkb.as<float>() + first_b * D;
  segs[1].v = dvb.as<float>() + first_b * D;
  segs[1].kv_head_stride = cap_b * D;
  segs[1].n_keys = int32_t(seen_b);
  segs[1].own_keys = int32_t(rows_b);
  auto dsegs = to_device(segs);
  const auto* dsegs_ptr = dsegs.as<cuda::AttentionSegment>();
  // A's rows into cache A (the pass's rows from a0, their request found through seg_of_row); the host
  // twin does the same copy.
  cuda::scatter_kv(dok.as<float>() + a0 * kv_width, dov.as<float>() + a0 * kv_width, rows_a, shape.n_kv_heads, D,
                   dpos.as<int32_t>() + a0, dsegs_ptr, dseg.as<int32_t>() + a0, cuda::KvType::F32);
  for (int64_t i = 0; i < rows_a; ++i)
    for (int64_t h = 0; h < shape.n_kv_heads; ++h)
      for (int64_t d = 0; d < D; ++d) {
        const size_t at = size_t(h * cap_a * D + pos[size_t(a0 + i)] * D + d);
        const size_t from = size_t((a0 + i) * kv_width + h * D + d);
        ka[at] = own_k[from];
        va[at] = own_v[from];
      }
  expect_close(to_host<float>(dka, ka.size()), ka, 0, "scatter_kv, K");
  expect_close(to_host<float>(dva, va.size()), va, 0, "scatter_kv, V");
  cuda::DeviceBuffer dout(size_t(rows * ld) * 4);
  cuda::attention_batch(dq.as<float>(), rows, ld, dsegs_ptr, dseg.as<int32_t>(), cuda::KvType::F32, dok.as<float>(),
                        dov.as<float>(), kv_width, shape, dout.as<float>(), ld);
  const std::vector<float> got = to_host<float>(dout, size_t(rows * ld));
  std::vector<float> want_a(size_t(rows_a * ld)), want_b(size_t(rows_b * ld));
  AttentionMask mask;
  mask.key_group = key_group.data();
  mask.query_group = query_group.data() + a0;
  mask.window_start = window.data() + a0;
  reference::attention(q.data() + a0 * ld, rows_a, ld, ka.data(), va.data(), cached_a + rows_a, cap_a * D, mask,
                       shape, want_a.data(), ld);
  // B's keys joined into one array for the CPU: cache B's positions 4 .. 19, then its own rows 0 .. 2.
  const int64_t keys_b = seen_b + rows_b;
  std::vector<float> jk(size_t(shape.n_kv_heads * keys_b * D)), jv(jk.size());
  for (int64_t h = 0; h < shape.n_kv_heads; ++h)
    for (int64_t j = 0; j < keys_b; ++j)
      for (int64_t d = 0; d < D; ++d) {
        const size_t at = size_t(h * keys_b * D + j * D + d);
        const size_t in_cache = size_t(h * cap_b * D + (first_b + j) * D + d);
        const size_t in_rows = size_t((j - seen_b) * kv_width + h * D + d);
        jk[at] = j < seen_b ? kb[in_cache] : own_k[in_rows];
        jv[at] = j < seen_b ? vb[in_cache] : own_v[in_rows];
      }
  reference::attention(q.data(), rows_b, ld, jk.data(), jv.data(), keys_b, keys_b * D, AttentionMask{}, shape,
                       want_b.data(), ld);
  expect_close(std::vector<float>(got.begin(), got.begin() + rows_b * ld), want_b, 1e-5, "batched attention, B");
  expect_close(std::vector<float>(got.begin() + rows_b * ld, got.end()), want_a, 1e-5, "batched attention, A");
}

// A weight matrix of `type` [n x k] from random values, its bytes kept alive by the returned object.
struct HostWeights {
  std::vector<uint8_t> bytes;
  TensorView view;
  std::vector<float> values;  // the exact values (get_row), row-major
};
HostWeights random_weights(Rng& rng, DType type, int64_t n, int64_t k) {
  HostWeights h;
  const auto wf = random_vector(rng, size_t(n * k), 0.05);
  h.bytes.resize(size_t(row_bytes(type, k) * n));
  for (int64_t r = 0; r < n; ++r) quantize_row(type, &wf[size_t(r * k)], h.bytes.data() + r * row_bytes(type, k), k);
  h.view.name = "w";
  h.view.type = type;
  h.view.ne = {k, n, 1, 1};
  h.view.n_dims = 2;
  h.view.data = h.bytes.data();
  h.values.resize(size_t(n * k));
  for (int64_t r = 0; r < n; ++r) get_row(h.view, r, &h.values[size_t(r * k)]);
  return h;
}

// The f32 product with the weights' exact values: the device multiplies those (decoded in registers, or
// as f16 copies on the tensor cores); the CPU's quantised kernels round the activations to int8 blocks
// instead, so this, not matmul(), is the twin.
std::vector<float> exact_product(const HostWeights& w, const std::vector<float>& x, int64_t m) {
  TensorView wd = w.view;
  wd.type = DType::F32;
  wd.data = w.values.data();
  std::vector<float> y(size_t(m * w.view.rows()));
  matmul(wd, x.data(), m, y.data(), nullptr);  // f32 weights: a plain f32 product
  return y;
}

// cuda::matmul of m random rows of x (drawn from rng) with w uploaded as dw, against exact_product.
void check_product(Rng& rng, const HostWeights& w, const cuda::DeviceMatrix& dw, int64_t m, double tolerance,
                   const std::string& what) {
  const auto x = random_vector(rng, size_t(m * w.view.cols()));
  const std::vector<float> want = exact_product(w, x, m);
  auto dx = to_device(x);
  cuda::DeviceBuffer dy(want.size() * 4);
  cuda::matmul(dw, dx.as<float>(), m, dy.as<float>());
  expect_close(to_host<float>(dy, want.size()), want, tolerance, what.c_str());
}

// y = x W^T for f32 (sgemm, tight), bf16 (tensor cores, activations rounded to bf16), f16, and every
// quantised type kept in its blocks on the device: 1, 5 and 8 rows take the register kernel (f32, tight),
// 9 to 64 rows the fused tiles (16, 32 and 64 slots a tile; 96 weight rows: a partial second tile of 64;
// 512 columns in two parts of 8 blocks, summed after), 65 and 100 rows the decoded-f16 chunks and cuBLAS.
// The quantised matrices hold their file bytes.
TEST(Cuda, MatmulMatchesCpuForEveryStorage) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(6);
  const int64_t n = 96, k = 512;
  struct Case {
    DType type;
    double tolerance;  // for the f32 paths; the f16 tensor-core path takes 2e-3
  };
  for (const Case c :
       {Case{DType::F32, 1e-5}, Case{DType::BF16, 2e-2}, Case{DType::F16, 2e-3}, Case{DType::Q8_0, 1e-5},
        Case{DType::Q4_0, 1e-5}, Case{DType::Q4_1, 1e-5}, Case{DType::Q5_0, 1e-5}, Case{DType::Q5_1, 1e-5},
        Case{DType::Q4_K, 1e-5}, Case{DType::Q5_K, 1e-5}, Case{DType::Q6_K, 1e-5}}) {
    const HostWeights w = random_weights(rng, c.type, n, k);
    const cuda::DeviceMatrix dwm = cuda::DeviceMatrix::upload(w.view);
    const bool quant = cuda::device_storage_of(c.type) == cuda::DeviceMatrix::Storage::Quant;
    EXPECT_EQ(dwm.storage() == cuda::DeviceMatrix::Storage::Quant, quant) << dtype_name(c.type);
    if (quant) {
      EXPECT_EQ(dwm.bytes(), w.bytes.size()) << dtype_name(c.type) << " is not kept in its blocks";
    }
    for (int64_t m : {1, 5, 8, 9, 16, 32, 40, 64, 65, 100}) {
      check_product(rng, w, dwm, m, quant && m > cuda::kQuantGemvRows ? 2e-3 : c.tolerance,
                    std::string(dtype_name(c.type)) + ", m = " + std::to_string(m));
    }
  }
}

// A fused-tile product of one row tile with many columns: 2624 columns (82 blocks) in 10 parts, nine of
// 9 blocks and a last one of 1, each part's sums added after; 16 and 40 rows of x.
TEST(Cuda, FusedTilesOverManyColumnParts) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(24);
  const int64_t n = 64, k = 2624;
  const HostWeights w = random_weights(rng, DType::Q4_0, n, k);
  const cuda::DeviceMatrix dwm = cuda::DeviceMatrix::upload(w.view);
  for (int64_t m : {16, 40}) check_product(rng, w, dwm, m, 2e-3, "q4_0 [64 x 2624], " + std::to_string(m) + " rows");
}

// The CPU's interleaved Q4_0 / Q8_0 layouts go up as the file's blocks: embedding rows read back exactly
// as get_row reads them, and the product matches.
TEST(Cuda, InterleavedWeightsGoUpInTheFileLayout) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(8);
  const int64_t n = 40, k = 256;  // 40 rows: the last interleaved group is padded
  for (DType type : {DType::Q4_0, DType::Q8_0}) {
    HostWeights w = random_weights(rng, type, n, k);
    std::vector<uint8_t> inter(size_t(interleaved_bytes(w.view)));
    TensorView wi = w.view;
    interleave_for_matmul(wi, inter.data(), nullptr);
    ASSERT_TRUE(is_interleaved(wi.type));
    const cuda::DeviceMatrix dwm = cuda::DeviceMatrix::upload(wi);
    EXPECT_EQ(dwm.quant_type(), type);
    EXPECT_EQ(dwm.bytes(), w.bytes.size());
    std::vector<int32_t> rows(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) rows[size_t(r)] = int32_t(n - 1 - r);
    auto drows = to_device(rows);
    cuda::DeviceBuffer out(size_t(n * k) * 4);
    cuda::embed_rows(dwm, drows.as<int32_t>(), n, 2.f, out.as<float>());
    std::vector<float> want(size_t(n * k));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < k; ++j) want[size_t(r * k + j)] = w.values[size_t((n - 1 - r) * k + j)] * 2.f;
    const std::vector<float> got = to_host<float>(out, want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << dtype_name(type) << ": embedding rows differ";
    const auto x = random_vector(rng, size_t(3 * k));
    auto dx = to_device(x);
    cuda::DeviceBuffer dy(size_t(3 * n) * 4);
    cuda::matmul(dwm, dx.as<float>(), 3, dy.as<float>());
    expect_close(to_host<float>(dy, size_t(3 * n)), exact_product(w, x, 3), 1e-5, dtype_name(type));
  }
}

// Embedding rows of every quantised type read back exactly as get_row gives them (types with a minimum
// included: value = scale * q + min, two roundings on both sides, never one fused multiply-add).
TEST(Cuda, EmbeddingRowsOfEveryQuantisedTypeAreExact) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(12);
  const int64_t n = 9, k = 512;
  for (DType type : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K,
                     DType::Q6_K}) {
    const HostWeights w = random_weights(rng, type, n, k);
    const cuda::DeviceMatrix dwm = cuda::DeviceMatrix::upload(w.view);
    std::vector<int32_t> rows = {8, 0, 3, 3, 5};
    auto drows = to_device(rows);
    cuda::DeviceBuffer out(rows.size() * size_t(k) * 4);
    cuda::embed_rows(dwm, drows.as<int32_t>(), int64_t(rows.size()), 1.f, out.as<float>());
    const std::vector<float> got = to_host<float>(out, rows.size() * size_t(k));
    for (size_t i = 0; i < rows.size(); ++i)
      EXPECT_EQ(std::memcmp(&got[i * size_t(k)], &w.values[size_t(rows[i]) * size_t(k)], size_t(k) * 4), 0)
          << dtype_name(type) << " row " << rows[i];
  }
}

// y = x W (the soft embedding, softmax(logits) @ E) with W in its blocks: chunks of W's rows decoded to
// f16 and summed into y; the twin is the f32 product with W's exact values.
TEST(Cuda, TransposedMatmulOfQuantisedWeights) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(9);
  const int64_t n = 200, k = 64, m = 7;  // W: n rows (the vocabulary) of k (hidden)
  for (DType type : {DType::Q8_0, DType::Q4_0, DType::Q5_1}) {
    const HostWeights w = random_weights(rng, type, n, k);
    const auto x = random_vector(rng, size_t(m * n));
    std::vector<float> want(size_t(m * k), 0.f);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < k; ++j) want[size_t(i * k + j)] += x[size_t(i * n + r)] * w.values[size_t(r * k + j)];
    const cuda::DeviceMatrix dwm = cuda::DeviceMatrix::upload(w.view);
    auto dx = to_device(x);
    cuda::DeviceBuffer dy(want.size() * 4);
    cuda::matmul_transposed(dwm, dx.as<float>(), m, dy.as<float>());
    expect_close(to_host<float>(dy, want.size()), want, 2e-3, dtype_name(type));
  }
}

// A matrix larger than one decode chunk (64 MiB of f16): 70 rows of x decode it in three chunks of rows,
// each product written at its rows of y; the transposed product sums the chunks into y; the register
// kernel (1, 5 rows) and the fused tiles (40 rows; 40003 weight rows end in a partial tile) on long,
// odd-sized rows.
TEST(Cuda, QuantisedProductsOverSeveralDecodeChunks) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(10);
  // 14528 rows a chunk (a multiple of 64), three chunks; 72 blocks a row, so the register kernel's lanes
  // take 3 or 2 blocks each; rows not a multiple of the 8 a thread block takes.
  const int64_t n = 40003, k = 2304;
  const HostWeights w = random_weights(rng, DType::Q4_0, n, k);
  const cuda::DeviceMatrix dwm = cuda::DeviceMatrix::upload(w.view);
  for (int64_t m : {1, 5, 40, 70})
    check_product(rng, w, dwm, m, m > cuda::kQuantGemvRows ? 2e-3 : 1e-5,
                  "q4_0 [40003 x 2304], " + std::to_string(m) + " rows");
  const int64_t mt = 3;
  const auto xt = random_vector(rng, size_t(mt * n), 0.01);
  std::vector<float> want(size_t(mt * k), 0.f);
  for (int64_t i = 0; i < mt; ++i)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < k; ++j) want[size_t(i * k + j)] += xt[size_t(i * n + r)] * w.values[size_t(r * k + j)];
  auto dxt = to_device(xt);
  cuda::DeviceBuffer dyt(want.size() * 4);
  cuda::matmul_transposed(dwm, dxt.as<float>(), mt, dyt.as<float>());
  expect_close(to_host<float>(dyt, want.size()), want, 2e-3, "q4_0 [40003 x 2304] transposed, 3 rows");
}

// ---- Mixture of experts on the device ----

// Routing: the CPU's softmax and top_k on the same logits (rows with tied logits included) give the same
// experts in ascending order and the same weights; normalised or not, with a per-expert scale or not.
void check_routing(int64_t E) {
  SCOPED_TRACE("experts " + std::to_string(E));
  Rng rng(21);
  const int64_t n = 37, K = 8;
  std::vector<float> logits = random_vector(rng, size_t(n * E), 2.0);
  for (int64_t e = 0; e < E; ++e) logits[size_t(3 * E + e)] = float(e % 4);  // row 3: ties everywhere
  for (int64_t e = 0; e < E; ++e) logits[size_t(5 * E + e)] = 0.f;           // row 5: all equal
  const std::vector<float> scale = random_vector(rng, size_t(E));
  auto dlogits = to_device(logits);
  auto dscale = to_device(scale);
  for (const bool normalize : {false, true}) {
    for (const bool scaled : {false, true}) {
      cuda::DeviceBuffer experts(size_t(n * K) * 4), weights(size_t(n * K) * 4);
      cuda::moe_route(dlogits.as<float>(), n, E, K, normalize, scaled ? dscale.as<float>() : nullptr,
                      experts.as<int32_t>(), weights.as<float>());
      const auto got_e = to_host<int32_t>(experts, size_t(n * K));
      const auto got_w = to_host<float>(weights, size_t(n * K));
      std::vector<float> probs(static_cast<size_t>(E));
      for (int64_t r = 0; r < n; ++r) {
        softmax(&logits[size_t(r * E)], E, probs.data());
        std::vector<int32_t> top = top_k(probs.data(), E, K);
        float total = 0;
        for (int32_t e : top) total += probs[size_t(e)];
        std::sort(top.begin(), top.end());
        for (int64_t j = 0; j < K; ++j) {
          const int32_t e = top[size_t(j)];
          ASSERT_EQ(got_e[size_t(r * K + j)], e) << "row " << r << " entry " << j;
          float want = normalize ? probs[size_t(e)] / total : probs[size_t(e)];
          if (scaled) want *= scale[size_t(e)];
          EXPECT_NEAR(got_w[size_t(r * K + j)], want, 2e-6 * std::max(1.f, std::abs(want))) << "row " << r;
        }
      }
    }
  }
}

TEST(Cuda, MoeRoutingMatchesTheCpu) {
  SKIP_WITHOUT_DEVICE();
  for (int64_t experts : {128, 20}) check_routing(experts);  // 20: fewer experts than a warp's lanes
}

// The slots: every entry has one slot, an expert's slots are contiguous from first[e], each slot holds
// its entry's row, and begin[r] = r * k.
TEST(Cuda, MoePlanGivesEveryEntryASlotOfItsExpert) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(22);
  const int64_t n = 400, E = 16, K = 3;  // 1200 entries: more than the block's 1024 threads
  std::vector<int32_t> expert_of(static_cast<size_t>(n * K));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < K; ++j)
      expert_of[size_t(r * K + j)] = int32_t((r * 7 + j * 5 + int64_t(rng.below(2))) % (E - 2));
  auto dexp = to_device(expert_of);
  cuda::DeviceBuffer first(size_t(E + 1) * 4), slot_row(size_t(n * K) * 4), slot_of(size_t(n * K) * 4),
      begin(size_t(n + 1) * 4);
  cuda::moe_plan(dexp.as<int32_t>(), n, K, E, first.as<int32_t>(), slot_row.as<int32_t>(), slot_of.as<int32_t>(),
                 begin.as<int32_t>());
  const auto f = to_host<int32_t>(first, size_t(E + 1));
  const auto rows = to_host<int32_t>(slot_row, size_t(n * K));
  const auto slots = to_host<int32_t>(slot_of, size_t(n * K));
  const auto b = to_host<int32_t>(begin, size_t(n + 1));
  std::vector<int64_t> count(static_cast<size_t>(E), 0);
  for (int32_t e : expert_of) ++count[size_t(e)];
  int64_t run = 0;
  for (int64_t e = 0; e < E; ++e) {
    EXPECT_EQ(f[size_t(e)], run) << "expert " << e;
    run += count[size_t(e)];
  }
  EXPECT_EQ(f[size_t(E)], n * K);
  std::vector<int> used(size_t(n * K), 0);
  for (int64_t i = 0; i < n * K; ++i) {
    const int32_t s = slots[size_t(i)], e = expert_of[size_t(i)];
    ASSERT_GE(s, f[size_t(e)]);
    ASSERT_LT(s, f[size_t(e + 1)]);
    EXPECT_EQ(rows[size_t(s)], i / K);
    ++used[size_t(s)];
  }
  for (int u : used) EXPECT_EQ(u, 1);
  for (int64_t r = 0; r <= n; ++r) EXPECT_EQ(b[size_t(r)], r * K);
}

// One launch for every expert: each slot's row against its expert's matrix, for every storage (float rows
// that are not whole 32-blocks included). Experts of fewer than 16 slots (0, 1, 3, 7, 9: more than one
// tile of 8) take the register kernel, f32, tight; experts of 16 and 40 slots (three tiles of 16, the last
// partial) the tensor cores, f16 inputs (f32 stacks: the register kernel for all). 70 rows: partial
// thread blocks in both kernels.
TEST(Cuda, GroupedProductMatchesEachExpertsProduct) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(23);
  const std::vector<int32_t> first = {0, 3, 3, 12, 13, 13, 20, 60, 76};  // 8 experts, 76 slots
  const int64_t E = 8, slots = 76, register_slots = 20, rows = 70;
  auto dfirst = to_device(first);
  struct Case {
    DType type;
    int64_t cols;
  };
  for (const Case c :
       {Case{DType::F32, 40}, Case{DType::F32, 64}, Case{DType::F16, 72}, Case{DType::BF16, 64},
        Case{DType::Q8_0, 256}, Case{DType::Q4_0, 2304}, Case{DType::Q4_K, 256}, Case{DType::Q6_K, 512}}) {
    HostWeights w = random_weights(rng, c.type, E * rows, c.cols);
    w.view.ne = {c.cols, rows, E, 1};  // a stack of E matrices
    w.view.n_dims = 3;
    const cuda::DeviceMatrix dw = cuda::DeviceMatrix::upload(w.view);
    const auto x = random_vector(rng, size_t(slots * c.cols));
    std::vector<float> want(size_t(slots * rows), 0.f);
    for (int64_t e = 0; e < E; ++e)
      for (int64_t s = first[size_t(e)]; s < first[size_t(e + 1)]; ++s)
        for (int64_t r = 0; r < rows; ++r) {
          double acc = 0;
          for (int64_t j = 0; j < c.cols; ++j)
            acc += double(x[size_t(s * c.cols + j)]) * w.values[size_t((e * rows + r) * c.cols + j)];
          want[size_t(s * rows + r)] = float(acc);
        }
    auto dx = to_device(x);
    cuda::DeviceBuffer dy(want.size() * 4);
    cuda::matmul_grouped(dw, E, dfirst.as<int32_t>(), dx.as<float>(), dy.as<float>());
    const std::vector<float> got = to_host<float>(dy, want.size());
    const auto split = std::ptrdiff_t(register_slots * rows);
    const std::string name = std::string(dtype_name(c.type)) + ", cols " + std::to_string(c.cols);
    expect_close(std::vector<float>(got.begin(), got.begin() + split),
                 std::vector<float>(want.begin(), want.begin() + split), 1e-5, (name + ", register kernel").c_str());
    expect_close(std::vector<float>(got.begin() + split, got.end()),
                 std::vector<float>(want.begin() + split, want.end()), 2e-3,
                 (name + ", tensor cores").c_str());
  }
}

// ---- whole forward passes: the CUDA executor against the CPU forward on the same model ----

// max |a - b| / max |b|, printed so a run on a device shows how close the twins are.
double report_error(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  const double e = test::relative_error(got, want);
  std::printf("  %-58s relative error %.2e\n", what.c_str(), e);
  return e;
}

struct TwinModels {
  Model cpu, gpu;
};
TwinModels load_twins(const std::string& path) {
  TwinModels t;
  t.cpu = Model::load(path);
  t.gpu = t.cpu;
  t.gpu.primitives = cuda::make_backend(t.gpu);
  return t;
}

// One forward of r with the logits of every row.
std::vector<float> every_row_logits(const Model& m, KvCache& cache, ForwardRequest r) {
  for (int64_t i = 0; i < r.n; ++i) r.logit_rows.push_back(int32_t(i));
  std::vector<float> logits(size_t(r.n * m.config.vocab));
  r.logits = logits.data();
  forward(m, cache, r, nullptr);
  return logits;
}

std::vector<float> encoder_logits(const Model& m, KvCache& cache, const std::vector<int32_t>& tokens, int64_t pos0,
                                  const std::vector<int32_t>& groups) {
  ForwardRequest r;
  r.tokens = tokens.data();
  r.n = int64_t(tokens.size());
  r.pos0 = pos0;
  r.groups = groups.data();
  return every_row_logits(m, cache, r);
}

// A prompt in blocks of 4 (block-causal groups), then 4 more tokens against the cache it left: the
// second pass reads K/V the first one wrote on the device. Then a batch of two requests.
void check_encoder(const TwinModels& t, double tolerance, const std::string& name) {
  const ModelConfig& c = t.cpu.config;
  Rng rng(11);
  std::vector<int32_t> prompt(12), more(4), groups(16);
  for (int32_t& id : prompt) id = int32_t(rng.below(uint64_t(c.vocab)));
  for (int32_t& id : more) id = int32_t(rng.below(uint64_t(c.vocab)));
  for (size_t i = 0; i < groups.size(); ++i) groups[i] = int32_t(i / 4);
  KvCache cpu_cache(c, 32), gpu_cache(c, 32);
  const std::vector<int32_t> g0(groups.begin(), groups.begin() + 12), g1(groups.begin() + 12, groups.end());
  EXPECT_LE(report_error(encoder_logits(t.gpu, gpu_cache, prompt, 0, g0), encoder_logits(t.cpu, cpu_cache, prompt, 0, g0),
                         name + ": encoder, 12-token prompt"),
            tolerance);
  EXPECT_LE(report_error(encoder_logits(t.gpu, gpu_cache, more, 12, g1), encoder_logits(t.cpu, cpu_cache, more, 12, g1),
                         name + ": encoder, 4 tokens after the cache"),
            tolerance);
  // Two requests in one batch, each on its own cache (of its own size: one attention launch for both).
  KvCache a(c, 16), b(c, 24);
  std::vector<float> la(size_t(12 * c.vocab)), lb(size_t(4 * c.vocab));
  ForwardRequest ra, rb;
  ra.tokens = prompt.data();
  ra.n = 12;
  ra.groups = g0.data();
  rb.tokens = more.data();
  rb.n = 4;
  rb.groups = g1.data();
  for (int i = 0; i < 12; ++i) ra.logit_rows.push_back(i);
  for (int i = 0; i < 4; ++i) rb.logit_rows.push_back(i);
  ra.logits = la.data();
  rb.logits = lb.data();
  KvCache* caches[] = {&a, &b};
  const ForwardRequest reqs[] = {ra, rb};
  forward_batch(t.gpu, caches, reqs, nullptr);
  KvCache ca(c, 16), cb(c, 16);
  EXPECT_LE(report_error(la, encoder_logits(t.cpu, ca, prompt, 0, g0), name + ": batch of two, first"), tolerance);
  EXPECT_LE(report_error(lb, encoder_logits(t.cpu, cb, more, 0, g1), name + ": batch of two, second"), tolerance);
}

TEST(CudaForward, MatchesCpuOnEveryFamily) {
  SKIP_WITHOUT_DEVICE();
  for (const char* f : {"tiny-llada.gguf", "tiny-dream.gguf", "tiny-llada-moe.gguf", "tiny-diffusion-gemma"}) {
    const TwinModels t = load_twins(test::fixture(f));
    check_encoder(t, 1e-4, f);
  }
}

// DiffusionGemma's decoder: a canvas after a cached prompt, with self-conditioning from zeros, from the
// previous pass's logits and as a soft embedding, and the fused head's statistics and soft embedding.
// exact_choices: the twins must pick the same argmax on every row and the same Gumbel sample on all but
// one (models whose twins differ only in rounding order); off for quantised twins, whose logits differ
// by the CPU's int8 activation rounding, where a random toy model's near-ties may flip.
void check_decoder(const TwinModels& t, double tolerance, const std::string& name, bool exact_choices = true) {
  const ModelConfig& c = t.cpu.config;
  ASSERT_TRUE(c.has_decoder);
  Rng rng(12);
  const int64_t P = 10, N = 12;  // the prompt outlasts the fixture's sliding window of 8
  std::vector<int32_t> prompt(P), canvas(N), groups(P, 0);
  for (int32_t& id : prompt) id = int32_t(rng.below(uint64_t(c.vocab)));
  for (int32_t& id : canvas) id = int32_t(rng.below(uint64_t(c.vocab)));
  for (int64_t i = 0; i < P; ++i) groups[size_t(i)] = int32_t(i);
  KvCache cpu_cache(c, P + N), gpu_cache(c, P + N);
  encoder_logits(t.cpu, cpu_cache, prompt, 0, groups);
  encoder_logits(t.gpu, gpu_cache, prompt, 0, groups);
  auto decode = [&](const Model& m, KvCache& cache, const float* self_cond, const float* soft, HeadRowStats* stats,
                    float* soft_out) {
    ForwardRequest r;
    r.tokens = canvas.data();
    r.n = N;
    r.pos0 = P;
    r.decoder = true;
    r.self_cond = self_cond;
    r.self_cond_soft = soft;
    for (int64_t i = 0; i < N; ++i) r.logit_rows.push_back(int32_t(i));
    std::vector<float> logits(size_t(N * c.vocab));
    std::vector<uint64_t> ids(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) ids[size_t(i)] = uint64_t(1000 + 7 * i);
    if (stats) {
      r.head_stats = stats;
      r.head.temperature = 0.7f;
      r.head.seed = 99;
      r.head.row_ids = ids.data();
      r.soft_embedding_out = soft_out;
    } else {
      r.logits = logits.data();
    }
    forward(m, cache, r, nullptr);
    return logits;
  };
  const std::vector<float> cpu0 = decode(t.cpu, cpu_cache, nullptr, nullptr, nullptr, nullptr);
  EXPECT_LE(report_error(decode(t.gpu, gpu_cache, nullptr, nullptr, nullptr, nullptr), cpu0, name + ": decoder, self-cond zeros"),
            tolerance);
  EXPECT_LE(report_error(decode(t.gpu, gpu_cache, cpu0.data(), nullptr, nullptr, nullptr),
                         decode(t.cpu, cpu_cache, cpu0.data(), nullptr, nullptr, nullptr), name + ": decoder, self-cond logits"),
            tolerance);
  std::vector<float> soft_in(size_t(N * c.hidden));
  for (float& v : soft_in) v = float(rng.normal() * 0.1);
  EXPECT_LE(report_error(decode(t.gpu, gpu_cache, nullptr, soft_in.data(), nullptr, nullptr),
                         decode(t.cpu, cpu_cache, nullptr, soft_in.data(), nullptr, nullptr),
                         name + ": decoder, self-cond soft embedding"),
            tolerance);
  std::vector<HeadRowStats> cs(static_cast<size_t>(N)), gs(static_cast<size_t>(N));
  std::vector<float> csoft(size_t(N * c.hidden)), gsoft(csoft.size());
  decode(t.cpu, cpu_cache, nullptr, soft_in.data(), cs.data(), csoft.data());
  decode(t.gpu, gpu_cache, nullptr, soft_in.data(), gs.data(), gsoft.data());
  EXPECT_LE(report_error(gsoft, csoft, name + ": fused head, soft embedding out"), tolerance);
  std::vector<float> cv, gv;
  int same_sample = 0;
  for (int64_t i = 0; i < N; ++i) {
    const HeadRowStats &a = cs[size_t(i)], &b = gs[size_t(i)];
    if (exact_choices) {
      EXPECT_EQ(a.plain.argmax, b.plain.argmax) << "row " << i;
    }
    same_sample += a.sample == b.sample;
    for (const HeadRowStats* s : {&a, &b}) {
      auto& out = s == &a ? cv : gv;
      for (float f : {s->plain.max, s->plain.logsumexp, s->plain.p_top1, s->plain.p_top2, s->plain.entropy,
                      s->tempered.max, s->tempered.logsumexp, s->tempered.p_top1, s->tempered.entropy})
        out.push_back(f);
      if (exact_choices || a.sample == b.sample) out.push_back(s->p_sample);  // another sample: another p
    }
  }
  EXPECT_LE(report_error(gv, cv, name + ": fused head, row statistics"), tolerance);
  // The Gumbel sample is the same draw on both (same noise); a row may differ only at a near-tie.
  if (exact_choices) {
    EXPECT_GE(same_sample, N - 1) << "samples agree on " << same_sample << " of " << N << " rows";
  }
  std::printf("  %-58s %d of %lld\n", (name + ": same Gumbel samples").c_str(), same_sample, static_cast<long long>(N));

  // Two canvases in one batch, on caches of different sizes after prompts of different lengths (P and
  // P + 5: their sliding windows start at different positions): one attention launch per layer and one
  // product of the head for both; the first returns logits, the second its fused head's statistics.
  std::vector<int32_t> prompt_b = prompt, groups_b = groups;
  for (int64_t i = 0; i < 5; ++i) {
    prompt_b.push_back(int32_t(rng.below(uint64_t(c.vocab))));
    groups_b.push_back(int32_t(P + i));
  }
  auto batch = [&](const Model& m, std::vector<float>& logits, std::vector<HeadRowStats>& stats) {
    KvCache a(c, P + N), b(c, P + 5 + N + 3);
    encoder_logits(m, a, prompt, 0, groups);
    encoder_logits(m, b, prompt_b, 0, groups_b);
    ForwardRequest ra, rb;
    for (ForwardRequest* r : {&ra, &rb}) {
      r->tokens = canvas.data();
      r->n = N;
      r->decoder = true;
      for (int64_t i = 0; i < N; ++i) r->logit_rows.push_back(int32_t(i));
    }
    ra.pos0 = P;
    rb.pos0 = P + 5;
    ra.logits = logits.data();
    rb.head_stats = stats.data();
    rb.head.temperature = 0.8f;
    rb.head.seed = 7;
    KvCache* caches[] = {&a, &b};
    const ForwardRequest reqs[] = {ra, rb};
    forward_batch(m, caches, reqs, nullptr);
  };
  std::vector<float> cl(size_t(N * c.vocab)), gl(cl.size());
  std::vector<HeadRowStats> cst(static_cast<size_t>(N)), gst(static_cast<size_t>(N));
  batch(t.cpu, cl, cst);
  batch(t.gpu, gl, gst);
  EXPECT_LE(report_error(gl, cl, name + ": batch of two canvases, logits"), tolerance);
  std::vector<float> cb, gb;
  for (int64_t i = 0; i < N; ++i)
    for (const HeadRowStats* st : {&cst[size_t(i)], &gst[size_t(i)]})
      for (float f : {st->plain.max, st->plain.logsumexp, st->plain.entropy, st->tempered.logsumexp})
        (st == &cst[size_t(i)] ? cb : gb).push_back(f);
  EXPECT_LE(report_error(gb, cb, name + ": batch of two canvases, fused head"), tolerance);
}

TEST(CudaForward, DiffusionGemmaDecoderMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  check_decoder(load_twins(test::fixture("tiny-diffusion-gemma")), 1e-4, "tiny-diffusion-gemma");
}

// The shipped model (q8_0): the device multiplies f16 copies of the weights by f16 activations, the CPU
// rounds the activations to int8 blocks, so the twins agree to about a percent of the logits' range.
TEST(CudaForward, ShippedDiffusionGemmaMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  const std::string path = test::source_path("models/text-dg.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is not here";
  const TwinModels t = load_twins(path);
  check_encoder(t, 3e-2, "text-dg.gguf");
  check_decoder(t, 3e-2, "text-dg.gguf");
}

// AR steps: one token at a time on the same cache. From the second step on, the pass is a recorded graph
// replayed with new inputs (token, position, key count, groups); every step's logits must still match
// the CPU's, past the fixture's sliding window too. Then three positions rewritten in group 0 (they see
// only the first prompt token and themselves: a stale group on the device would hide a row from itself),
// and AR steps of two requests on two caches in one batch. The f32 fixtures, and a Q4_0 model (f16 cache).
TEST(CudaForward, RecordedArStepsMatchTheCpu) {
  SKIP_WITHOUT_DEVICE();
  const char* off = std::getenv("CANVAS_CUDA_GRAPHS");
  const bool graphs = !(off && std::string(off) == "0");
  auto run = [&](const TwinModels& t, double tolerance, const std::string& name) {
    const ModelConfig& c = t.cpu.config;
    Rng rng(14);
    auto random_tokens = [&](size_t n) {
      std::vector<int32_t> ids(n);
      for (int32_t& id : ids) id = int32_t(rng.below(uint64_t(c.vocab)));
      return ids;
    };
    std::vector<int32_t> groups(6);
    for (size_t i = 0; i < groups.size(); ++i) groups[i] = int32_t(i);
    KvCache cpu_a(c, 32), gpu_a(c, 32), cpu_b(c, 32), gpu_b(c, 32);
    const std::vector<int32_t> prompt_a = random_tokens(6), prompt_b = random_tokens(6);
    encoder_logits(t.cpu, cpu_a, prompt_a, 0, groups);
    encoder_logits(t.gpu, gpu_a, prompt_a, 0, groups);
    double worst = 0;
    auto step = [&](KvCache& cpu_cache, KvCache& gpu_cache, int64_t pos, int32_t group) {
      const std::vector<int32_t> token = random_tokens(1), g = {group};
      worst = std::max(worst, test::relative_error(encoder_logits(t.gpu, gpu_cache, token, pos, g),
                                                   encoder_logits(t.cpu, cpu_cache, token, pos, g)));
    };
    uint64_t replays = cuda::DeviceGraph::replays();
    for (int64_t i = 0; i < 12; ++i) step(cpu_a, gpu_a, 6 + i, int32_t(6 + i));
    if (graphs) {
      EXPECT_EQ(cuda::DeviceGraph::replays() - replays, 11u) << name << ": 12 steps";
    }
    replays = cuda::DeviceGraph::replays();
    for (int64_t pos = 10; pos < 13; ++pos) step(cpu_a, gpu_a, pos, 0);
    if (graphs) {
      EXPECT_EQ(cuda::DeviceGraph::replays() - replays, 3u) << name << ": rewritten positions";
    }
    encoder_logits(t.cpu, cpu_b, prompt_b, 0, groups);
    encoder_logits(t.gpu, gpu_b, prompt_b, 0, groups);
    replays = cuda::DeviceGraph::replays();
    for (int64_t i = 0; i < 6; ++i) {  // [a, b] in one batch, a at 13 + i, b at 6 + i
      const std::vector<int32_t> tokens = random_tokens(2), ga = {int32_t(13 + i)}, gb = {int32_t(6 + i)};
      std::vector<std::vector<float>> out(4, std::vector<float>(size_t(c.vocab)));
      for (int twin = 0; twin < 2; ++twin) {
        ForwardRequest ra, rb;
        ra.tokens = &tokens[0];
        rb.tokens = &tokens[1];
        ra.n = rb.n = 1;
        ra.pos0 = 13 + i;
        rb.pos0 = 6 + i;
        ra.groups = ga.data();
        rb.groups = gb.data();
        ra.logit_rows = rb.logit_rows = {0};
        ra.logits = out[size_t(2 * twin)].data();
        rb.logits = out[size_t(2 * twin + 1)].data();
        KvCache* caches[] = {twin ? &gpu_a : &cpu_a, twin ? &gpu_b : &cpu_b};
        const ForwardRequest reqs[] = {ra, rb};
        forward_batch(twin ? t.gpu : t.cpu, caches, reqs, nullptr);
      }
      worst = std::max({worst, test::relative_error(out[2], out[0]), test::relative_error(out[3], out[1])});
    }
    if (graphs) {
      EXPECT_EQ(cuda::DeviceGraph::replays() - replays, 5u) << name << ": batches of two";
    }
    std::printf("  %-58s relative error %.2e\n", (name + ": AR steps, the worst").c_str(), worst);
    EXPECT_LE(worst, tolerance);
  };
  for (const char* f : {"tiny-llada.gguf", "tiny-diffusion-gemma"}) run(load_twins(test::fixture(f)), 1e-4, f);
  bench::SyntheticOptions options;
  options.type = DType::Q4_0;
  const auto synthetic =
      bench::build_synthetic_model(bench::find_synthetic_shape("diffusion-gemma:tiny"), options, nullptr);
  TwinModels t;
  t.cpu = synthetic->model;
  t.gpu = synthetic->model;
  t.gpu.primitives = cuda::make_backend(t.gpu);
  run(t, 1e-2, "diffusion-gemma:tiny q4_0");
}

// The head of a batch in several products: three canvases of 100 rows on three caches (after prompts of
// 10, 12 and 14 tokens) take two products of the output matrix (200 rows, then 100: at most 256 rows a
// product); every canvas's logits must still be the CPU's.
TEST(CudaForward, HeadOfABatchInSeveralProducts) {
  SKIP_WITHOUT_DEVICE();
  const TwinModels t = load_twins(test::fixture("tiny-diffusion-gemma"));
  const ModelConfig& c = t.cpu.config;
  Rng rng(23);
  const int64_t N = 100;
  std::vector<int32_t> canvas(static_cast<size_t>(N)), groups(14);
  for (int32_t& id : canvas) id = int32_t(rng.below(uint64_t(c.vocab)));
  for (size_t i = 0; i < groups.size(); ++i) groups[i] = int32_t(i);
  std::vector<int32_t> prompt(14);
  for (int32_t& id : prompt) id = int32_t(rng.below(uint64_t(c.vocab)));
  auto run = [&](const Model& m) {
    std::vector<std::unique_ptr<KvCache>> caches;
    std::vector<KvCache*> pointers;
    std::vector<ForwardRequest> requests(3);
    std::vector<std::vector<float>> logits(3, std::vector<float>(size_t(N * c.vocab)));
    for (int64_t r = 0; r < 3; ++r) {
      const int64_t P = 10 + 2 * r;
      caches.push_back(std::make_unique<KvCache>(c, P + N));
      pointers.push_back(caches.back().get());
      const std::vector<int32_t> head(prompt.begin(), prompt.begin() + P), g(groups.begin(), groups.begin() + P);
      encoder_logits(m, *caches.back(), head, 0, g);
      ForwardRequest& req = requests[size_t(r)];
      req.tokens = canvas.data();
      req.n = N;
      req.pos0 = P;
      req.decoder = true;
      for (int64_t i = 0; i < N; ++i) req.logit_rows.push_back(int32_t(i));
      req.logits = logits[size_t(r)].data();
    }
    forward_batch(m, pointers, requests, nullptr);
    return logits;
  };
  const auto want = run(t.cpu), got = run(t.gpu);
  for (size_t r = 0; r < 3; ++r)
    EXPECT_LE(report_error(got[r], want[r], "three 100-row canvases, canvas " + std::to_string(r)), 1e-4);
}

// The per-op profile (bench --profile): with profiling on, a forward's primitives and the kernels inside
// them are timed (every layer's attention once, nested spans one level deeper), no graph is recorded or
// replayed, and the logits stay the CPU's; with it off nothing is counted.
TEST(CudaForward, ProfiledPassesTimeEveryStage) {
  SKIP_WITHOUT_DEVICE();
  const TwinModels t = load_twins(test::fixture("tiny-llada.gguf"));
  const ModelConfig& c = t.cpu.config;
  std::vector<int32_t> groups(8);
  for (size_t i = 0; i < groups.size(); ++i) groups[i] = int32_t(i);
  const std::vector<int32_t> prompt = {1, 2, 3, 4}, token = {5};
  KvCache cpu_cache(c, 8), gpu_cache(c, 8);
  encoder_logits(t.cpu, cpu_cache, prompt, 0, groups);
  encoder_logits(t.gpu, gpu_cache, prompt, 0, groups);
  cuda::take_profile();
  cuda::set_profiling(true);
  const uint64_t replays = cuda::DeviceGraph::replays();
  double worst = 0;
  for (int64_t pos = 4; pos < 7; ++pos) {  // AR steps of one shape (recorded and replayed, were profiling off)
    const std::vector<int32_t> g = {int32_t(pos)};
    worst = std::max(worst, test::relative_error(encoder_logits(t.gpu, gpu_cache, token, pos, g),
                                                 encoder_logits(t.cpu, cpu_cache, token, pos, g)));
  }
  const std::vector<cuda::OpTime> ops = cuda::take_profile();
  cuda::set_profiling(false);
  EXPECT_EQ(cuda::DeviceGraph::replays(), replays);
  EXPECT_LE(worst, 1e-4);
  auto find = [&](const std::string& name) -> const cuda::OpTime* {
    for (const cuda::OpTime& op : ops)
      if (op.name == name) return &op;
    return nullptr;
  };
  const cuda::OpTime* attention = find("attention");
  ASSERT_NE(attention, nullptr);
  EXPECT_EQ(attention->depth, 0);
  EXPECT_EQ(attention->spans, 3 * c.n_layers);
  EXPECT_GT(attention->ms, 0);
  const cuda::OpTime* kernel = find("attention: kernel (and an encoder's K/V into the caches)");
  ASSERT_NE(kernel, nullptr);
  EXPECT_EQ(kernel->depth, 1);
  EXPECT_LE(kernel->ms, attention->ms);
  // Tree order: the kernel comes after its primitive, with only deeper ops between them.
  ASSERT_LT(attention, kernel);
  for (const cuda::OpTime* op = attention + 1; op < kernel; ++op) EXPECT_GE(op->depth, 1) << op->name;
  const cuda::OpTime* projections = find("matmul: q/k/v");
  ASSERT_NE(projections, nullptr);
  EXPECT_EQ(projections->spans, 3 * c.n_layers);
  ASSERT_NE(find("logits"), nullptr);
  for (const cuda::OpTime& op : ops)
    std::printf("  %*s%-50s %8.3f ms %4lld x\n", 2 * op.depth, "", op.name.c_str(), op.ms, (long long)op.spans);
  encoder_logits(t.gpu, gpu_cache, token, 7, {7});
  EXPECT_TRUE(cuda::take_profile().empty());
}

// Quantised weights kept in their blocks on the device against the CPU's quantised forward on the same
// weights (the CPU rounds activations to int8 blocks, the device does not): synthetic toy shapes at Q4_0
// and Q8_0, an 80-token prompt (decoded f16 chunks and cuBLAS), 12 tokens after a prompt (the fused tiles)
// and 4 (the register kernel), one token (an AR step), and DiffusionGemma's decoder; logits within 1e-2
// of their range.
TEST(CudaForward, QuantisedWeightsMatchTheCpuWithinOnePercent) {
  SKIP_WITHOUT_DEVICE();
  for (const char* shape : {"diffusion-gemma:tiny", "llada:tiny"}) {
    for (DType type : {DType::Q4_0, DType::Q8_0}) {
      bench::SyntheticOptions options;
      options.type = type;
      options.seed = 5;
      const auto synthetic = bench::build_synthetic_model(bench::find_synthetic_shape(shape), options, nullptr);
      TwinModels t;
      t.cpu = synthetic->model;
      t.gpu = synthetic->model;
      t.gpu.primitives = cuda::make_backend(t.gpu);
      const std::string name = std::string(shape) + " " + dtype_name(type);
      const ModelConfig& c = t.cpu.config;
      Rng rng(13);
      std::vector<int32_t> prompt(80), groups(80), one(1, 3), one_group(1, 80);
      for (int32_t& id : prompt) id = int32_t(rng.below(uint64_t(c.vocab)));
      for (size_t i = 0; i < groups.size(); ++i) groups[i] = int32_t(i);
      KvCache cpu_cache(c, 96), gpu_cache(c, 96);
      EXPECT_LE(report_error(encoder_logits(t.gpu, gpu_cache, prompt, 0, groups),
                             encoder_logits(t.cpu, cpu_cache, prompt, 0, groups), name + ": 80-token prompt"),
                1e-2);
      EXPECT_LE(report_error(encoder_logits(t.gpu, gpu_cache, one, 80, one_group),
                             encoder_logits(t.cpu, cpu_cache, one, 80, one_group), name + ": one token after it"),
                1e-2);
      check_encoder(t, 1e-2, name);
      if (c.has_decoder) check_decoder(t, 1e-2, name, /*exact_choices=*/false);
    }
  }
}

// ---- what the whole-pass backend did not run: kept canvas K/V (--freeze), mixed batches, experts on the CPU ----

std::vector<float> decoder_logits(const Model& m, KvCache& cache, const std::vector<int32_t>& tokens, int64_t pos0,
                                  KvCache* kept = nullptr, const std::vector<int32_t>* rows = nullptr) {
  ForwardRequest r;
  r.tokens = tokens.data();
  r.n = int64_t(tokens.size());
  r.pos0 = pos0;
  r.decoder = true;
  r.canvas_kv = kept;
  r.canvas_rows = rows ? rows->data() : nullptr;
  return every_row_logits(m, cache, r);
}

// A decoder canvas whose K/V are kept across passes (ForwardRequest::canvas_kv, --freeze): a pass over every
// row without and with the store (the same logits), then two passes over some rows with new tokens
// (canvas_rows), which see the other rows' K/V as the earlier passes left them in the store, and the second
// also the first's rows; the device against the CPU, pass by pass.
void check_frozen_canvas(const TwinModels& t, double tolerance, const std::string& name) {
  const ModelConfig& c = t.cpu.config;
  ASSERT_TRUE(c.has_decoder);
  Rng rng(31);
  const int64_t P = 10, N = 12;  // the prompt outlasts the fixture's sliding window of 8
  std::vector<int32_t> prompt(P), canvas(N), groups(P);
  for (int32_t& id : prompt) id = int32_t(rng.below(uint64_t(c.vocab)));
  for (int32_t& id : canvas) id = int32_t(rng.below(uint64_t(c.vocab)));
  for (int64_t i = 0; i < P; ++i) groups[size_t(i)] = int32_t(i);
  const std::vector<int32_t> rows = {1, 4, 5, 11};
  auto run = [&](const Model& m) {
    KvCache cache(c, P + N), kept(c, N);
    encoder_logits(m, cache, prompt, 0, groups);
    std::vector<std::vector<float>> out;
    out.push_back(decoder_logits(m, cache, canvas, P));
    out.push_back(decoder_logits(m, cache, canvas, P, &kept));
    for (int pass = 1; pass <= 2; ++pass) {
      std::vector<int32_t> tokens;
      for (int32_t r : rows) tokens.push_back(int32_t((canvas[size_t(r)] + 7 * pass) % c.vocab));
      out.push_back(decoder_logits(m, cache, tokens, P, &kept, &rows));
    }
    return out;
  };
  const auto want = run(t.cpu), got = run(t.gpu);
  EXPECT_EQ(want[0], want[1]) << name << ": a pass over every row with the store is the pass without it";
  const char* what[] = {"every row", "every row, kept", "4 rows after it", "4 rows again"};
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_LE(report_error(got[i], want[i], name + ": frozen canvas, " + what[i]), tolerance);
}

// One batch of encoder and decoder requests in the order the CPU attends them, layer by layer:
// [enc a (a prompt), dec a (a canvas after it: it sees the K/V enc a writes in this pass), enc b,
//  dec b (its K/V kept in a store), enc a again (positions 2..5 rewritten: dec a must not see them, nor enc a
//  the first)], against the CPU's same batch. Models without a decoder: the encoder requests alone.
void check_mixed_batch(const TwinModels& t, double tolerance, const std::string& name) {
  const ModelConfig& c = t.cpu.config;
  Rng rng(32);
  const int64_t P = 10, N = 6;
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t& id : ids) id = int32_t(rng.below(uint64_t(c.vocab)));
    return ids;
  };
  const std::vector<int32_t> prompt_a = random_tokens(P), prompt_b = random_tokens(P), canvas = random_tokens(N),
                             again = random_tokens(4);
  std::vector<int32_t> groups(P), groups_again = {0, 0, 0, 0};
  for (int64_t i = 0; i < P; ++i) groups[size_t(i)] = int32_t(i);
  auto run = [&](const Model& m) {
    KvCache a(c, P + N), b(c, P + N), kept(c, N);
    std::vector<std::vector<float>> logits;
    std::vector<ForwardRequest> requests;
    std::vector<KvCache*> caches;
    auto add = [&](KvCache* cache, const std::vector<int32_t>& tokens, int64_t pos0, const std::vector<int32_t>* g,
                   KvCache* store) {
      ForwardRequest r;
      r.tokens = tokens.data();
      r.n = int64_t(tokens.size());
      r.pos0 = pos0;
      r.groups = g ? g->data() : nullptr;
      r.decoder = g == nullptr;
      r.canvas_kv = store;
      for (int64_t i = 0; i < r.n; ++i) r.logit_rows.push_back(int32_t(i));
      requests.push_back(r);
      caches.push_back(cache);
    };
    add(&a, prompt_a, 0, &groups, nullptr);
    if (c.has_decoder) add(&a, canvas, P, nullptr, nullptr);
    add(&b, prompt_b, 0, &groups, nullptr);
    if (c.has_decoder) add(&b, canvas, P, nullptr, &kept);
    add(&a, again, 2, &groups_again, nullptr);
    requests.back().key_end = P;
    for (ForwardRequest& r : requests) {
      logits.emplace_back(size_t(r.n * c.vocab));
      r.logits = logits.back().data();
    }
    for (size_t i = 0; i < requests.size(); ++i) requests[i].logits = logits[i].data();
    forward_batch(m, caches, requests, nullptr);
    return logits;
  };
  const auto want = run(t.cpu), got = run(t.gpu);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_LE(report_error(got[i], want[i], name + ": mixed batch, request " + std::to_string(i)), tolerance);
}

TEST(CudaForward, FrozenCanvasMatchesTheCpu) {
  SKIP_WITHOUT_DEVICE();
  check_frozen_canvas(load_twins(test::fixture("tiny-diffusion-gemma")), 1e-4, "tiny-diffusion-gemma");
}

TEST(CudaForward, MixedBatchMatchesTheCpu) {
  SKIP_WITHOUT_DEVICE();
  for (const char* f : {"tiny-diffusion-gemma", "tiny-llada.gguf"})
    check_mixed_batch(load_twins(test::fixture(f)), 1e-4, f);
}

// --cpu-moe / --n-cpu-moe: the experts of the first layers (one, then all) stay on the CPU while the rest
// runs on the device; their weights are not uploaded (fewer device bytes), the placement counts their MoE
// calls on the CPU and the copies, and the logits stay the CPU's.
TEST(CudaForward, ExpertsKeptOnTheCpuMatchTheCpu) {
  SKIP_WITHOUT_DEVICE();
  for (const char* f : {"tiny-llada-moe.gguf", "tiny-diffusion-gemma"}) {
    TwinModels t;
    t.cpu = Model::load(test::fixture(f));
    const int64_t L = t.cpu.config.n_layers;
    ASSERT_TRUE(t.cpu.config.is_moe()) << f;
    int64_t uploaded_all = 0;
    for (int64_t layers : {int64_t(0), int64_t(1), L}) {
      t.gpu = t.cpu;
      t.gpu.primitives = nullptr;
      const int64_t before = cuda::device_buffer_bytes();
      cuda::BackendOptions options;
      options.moe_layers_on_cpu = layers;
      t.gpu.primitives = cuda::make_backend(t.gpu, options);
      const int64_t uploaded = cuda::device_buffer_bytes() - before;
      if (layers == 0) {
        uploaded_all = uploaded;
      } else {
        EXPECT_LT(uploaded, uploaded_all) << f << ": experts of " << layers << " layers kept in RAM";
      }
      const std::string name = std::string(f) + ", experts of " + std::to_string(layers) + " layers on the CPU";
      check_encoder(t, 1e-4, name);
      if (t.cpu.config.has_decoder) check_decoder(t, 1e-4, name);
      const PlacementStats s = t.gpu.primitives->stats();
      const size_t moe = size_t(Primitive::Moe);
      EXPECT_EQ(s.on_cpu[moe] > 0, layers > 0) << name;
      EXPECT_EQ(s.on_backend[moe] > 0, layers < L) << name;
      EXPECT_EQ(s.copies_to_cpu > 0, layers > 0) << name;
    }
  }
}

// The module canvas opens for --device cuda (libcanvas-cuda.so beside this test, found as canvas finds it):
// it loads on a machine without a GPU too (it needs cuBLAS, not a driver), its table is this build's, and
// it says whether a device is usable as the linked backend does.
TEST(CudaModule, LoadsAsCanvasLoadsIt) {
  const cuda_module::Table& module = cuda_module::module();
  EXPECT_EQ(module.version, cuda_module::kVersion);
  std::string why;
  const bool linked = cuda::available(&why);
  cuda_module::Message module_why;
  EXPECT_EQ(module.available(&module_why), linked);
  if (!linked) {
    EXPECT_EQ(std::string(module_why.text), why);
    std::printf("  no device, as the module says: %s\n", module_why.text);
  }
}

// Whole forwards through the module's backend, as --device cuda runs them, against the CPU.
TEST(CudaModule, ForwardsThroughTheModuleMatchTheCpu) {
  SKIP_WITHOUT_DEVICE();
  for (const char* f : {"tiny-llada.gguf", "tiny-diffusion-gemma"}) {
    TwinModels t;
    t.cpu = Model::load(test::fixture(f));
    t.gpu = t.cpu;
    t.gpu.primitives = cuda_module::make_backend(cuda_module::module(), t.gpu);
    check_encoder(t, 1e-4, std::string("module: ") + f);
    if (t.cpu.config.has_decoder) check_decoder(t, 1e-4, std::string("module: ") + f);
  }
}

#endif  // CANVAS_HAVE_CUDA

}  // namespace
}  // namespace canvas
