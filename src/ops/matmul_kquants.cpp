// Row dequantisation and row quantisation for Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K (block decoding is
// core/quant_block.h's, shared with the CUDA kernels).
//
// Dequantisation computes each value with the same f32 operations, in the same order, as ggml's
// dequantize_row_* written in plain C (e.g. Q4_K: (d * sc) * q - dmin * m), so it is bit-exact with ggml
// built without floating-point contraction. Q4_1 / Q5_0 / Q5_1 quantisation is ggml's reference rounding;
// the K-quants use a plain min/max quantiser (below), not ggml's iterative search, so canvas-written
// K-quant files are valid and close but not byte-identical to llama-quantize's.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/matmul_kernels.h"

namespace canvas::matmul_detail {

void dequantize_row_extra(DType type, const uint8_t* src, float* dst, int64_t n) {
  DecodedBlock blk;
  for (int64_t b = 0; b < n / kQK; ++b) {
    decode_block(type, src, b, blk);
    for (int i = 0; i < kQK; ++i) dst[b * kQK + i] = block_value(blk, i);
  }
}

namespace {

int round_clamp(float v, int lo, int hi) { return std::clamp(int(std::lround(v)), lo, hi); }

// ggml quantize_row_q4_1_ref / q5_1_ref: min/max per block, q = (x - min) / d rounded by +0.5 and
// truncation (Q4_1 clamps at 15, Q5_1 does not clamp).
void quantize_min_block(const float* x, int bits, uint16_t* d_out, uint16_t* m_out, int8_t* q) {
  float min = 3.402823466e+38f, max = -3.402823466e+38f;
  for (int j = 0; j < kQK; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  const float d = (max - min) / float((1 << bits) - 1);
  const float id = d != 0.f ? 1.f / d : 0.f;
  *d_out = f32_to_f16(d);
  *m_out = f32_to_f16(min);
  for (int j = 0; j < kQK; ++j) {
    const float v = (x[j] - min) * id;
    q[j] = bits == 4 ? int8_t(std::min<int>(15, int8_t(v + 0.5f))) : int8_t(uint8_t(v + 0.5f));
  }
}

// ggml quantize_row_q5_0_ref: the signed value of largest magnitude maps to q = 0 (value -16 d).
void quantize_q5_0_block(const float* x, uint16_t* d_out, int8_t* q) {
  float amax = 0.f, max = 0.f;
  for (int j = 0; j < kQK; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -16.f;
  const float id = d != 0.f ? 1.f / d : 0.f;
  *d_out = f32_to_f16(d);
  for (int j = 0; j < kQK; ++j) q[j] = int8_t(std::min<int>(31, int8_t(x[j] * id + 16.5f)));
}

// Packs 32 unsigned quants (0..15 or 0..31) in Q4_0 nibble order, bit 4 into qh.
void pack_nibbles(const int8_t* q, uint8_t* qs, uint8_t* qh) {
  uint32_t h = 0;
  for (int j = 0; j < kQK / 2; ++j) {
    qs[j] = uint8_t((q[j] & 15) | (q[j + kQK / 2] & 15) << 4);
    h |= uint32_t((q[j] >> 4) & 1) << j;
    h |= uint32_t((q[j + kQK / 2] >> 4) & 1) << (j + kQK / 2);
  }
  if (qh) std::memcpy(qh, &h, 4);
}

// Q4_K / Q5_K super-block: per 32-element sub-block the range [min(0, min x), max x] mapped onto
// 0..nmax; the 8 scales and 8 mins are then quantised to 6 bits against f16 super-scales (nearest), and
// the quants recomputed against the rounded scales. q receives 256 unsigned quants in element order.
void quantize_kquant_superblock(const float* x, int nmax, uint16_t* d_out, uint16_t* dmin_out, uint8_t* scales,
                                uint8_t* q) {
  float scale[8], min[8], max_scale = 0.f, max_min = 0.f;
  for (int s = 0; s < 8; ++s) {
    float lo = 0.f, hi = -3.402823466e+38f;
    for (int l = 0; l < 32; ++l) {
      lo = std::min(lo, x[32 * s + l]);
      hi = std::max(hi, x[32 * s + l]);
    }
    scale[s] = (hi - lo) / float(nmax);
    min[s] = -lo;
    max_scale = std::max(max_scale, scale[s]);
    max_min = std::max(max_min, min[s]);
  }
  *d_out = f32_to_f16(max_scale / 63.f);
  *dmin_out = f32_to_f16(max_min / 63.f);
  const float d = f16_to_f32(*d_out), dmin = f16_to_f32(*dmin_out);
  uint8_t sc[8], m[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = uint8_t(d > 0.f ? round_clamp(scale[s] / d, 0, 63) : 0);
    m[s] = uint8_t(dmin > 0.f ? round_clamp(min[s] / dmin, 0, 63) : 0);
    const float ds = d * float(sc[s]), ms = dmin * float(m[s]);
    for (int l = 0; l < 32; ++l)
      q[32 * s + l] = uint8_t(ds > 0.f ? round_clamp((x[32 * s + l] + ms) / ds, 0, nmax) : 0);
  }
  for (int j = 0; j < 4; ++j) {  // the inverse of unpack_kquant_scales
    scales[j] = uint8_t(sc[j] | (sc[j + 4] >> 4) << 6);
    scales[j + 4] = uint8_t(m[j] | (m[j + 4] >> 4) << 6);
    scales[j + 8] = uint8_t((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
  }
}

// Q6_K super-block: per 16-element sub-block the signed value of largest magnitude maps to -32; the 16
// scales are quantised to int8 against an f16 super-scale (nearest), then the quants recomputed.
void quantize_q6_k_superblock(const float* x, BlockQ6_K& blk) {
  float scale[16], max_abs_scale = 0.f;
  for (int s = 0; s < 16; ++s) {
    float amax = 0.f, max = 0.f;
    for (int l = 0; l < 16; ++l) {
      if (amax < std::fabs(x[16 * s + l])) {
        amax = std::fabs(x[16 * s + l]);
        max = x[16 * s + l];
      }
    }
    scale[s] = max / -32.f;
    max_abs_scale = std::max(max_abs_scale, std::fabs(scale[s]));
  }
  blk.d = f32_to_f16(max_abs_scale / 127.f);
  const float d = f16_to_f32(blk.d);
  uint8_t q[kQK_K];
  for (int s = 0; s < 16; ++s) {
    blk.scales[s] = int8_t(d > 0.f ? round_clamp(scale[s] / d, -127, 127) : 0);
    const float ds = d * float(blk.scales[s]);
    for (int l = 0; l < 16; ++l)
      q[16 * s + l] = uint8_t(ds != 0.f ? round_clamp(x[16 * s + l] / ds, -32, 31) + 32 : 32);
  }
  for (int half = 0; half < 2; ++half) {
    const uint8_t* u = q + 128 * half;
    for (int l = 0; l < 32; ++l) {
      blk.ql[64 * half + l] = uint8_t((u[l] & 15) | (u[l + 64] & 15) << 4);
      blk.ql[64 * half + 32 + l] = uint8_t((u[l + 32] & 15) | (u[l + 96] & 15) << 4);
      blk.qh[32 * half + l] =
          uint8_t((u[l] >> 4) | (u[l + 32] >> 4) << 2 | (u[l + 64] >> 4) << 4 | (u[l + 96] >> 4) << 6);
    }
  }
}

}  // namespace

void quantize_row_extra(DType type, const float* src, uint8_t* dst, int64_t n) {
  int8_t q[kQK];
  switch (type) {
    case DType::Q4_1:
      for (int64_t b = 0; b < n / kQK; ++b) {
        BlockQ4_1 blk;
        quantize_min_block(src + b * kQK, 4, &blk.d, &blk.m, q);
        pack_nibbles(q, blk.qs, nullptr);
        std::memcpy(dst + b * int64_t(sizeof blk), &blk, sizeof blk);
      }
      return;
    case DType::Q5_0:
      for (int64_t b = 0; b < n / kQK; ++b) {
        BlockQ5_0 blk;
        quantize_q5_0_block(src + b * kQK, &blk.d, q);
        pack_nibbles(q, blk.qs, blk.qh);
        std::memcpy(dst + b * int64_t(sizeof blk), &blk, sizeof blk);
      }
      return;
    case DType::Q5_1:
      for (int64_t b = 0; b < n / kQK; ++b) {
        BlockQ5_1 blk;
        quantize_min_block(src + b * kQK, 5, &blk.d, &blk.m, q);
        pack_nibbles(q, blk.qs, blk.qh);
        std::memcpy(dst + b * int64_t(sizeof blk), &blk, sizeof blk);
      }
      return;
    case DType::Q4_K:
      for (int64_t b = 0; b < n / kQK_K; ++b) {
        BlockQ4_K blk;
        uint8_t u[kQK_K];
        quantize_kquant_superblock(src + b * kQK_K, 15, &blk.d, &blk.dmin, blk.scales, u);
        for (int i = 0; i < 4; ++i)
          for (int l = 0; l < 32; ++l) blk.qs[32 * i + l] = uint8_t(u[64 * i + l] | u[64 * i + 32 + l] << 4);
        std::memcpy(dst + b * int64_t(sizeof blk), &blk, sizeof blk);
      }
      return;
    case DType::Q5_K:
      for (int64_t b = 0; b < n / kQK_K; ++b) {
        BlockQ5_K blk;
        uint8_t u[kQK_K];
        quantize_kquant_superblock(src + b * kQK_K, 31, &blk.d, &blk.dmin, blk.scales, u);
        std::memset(blk.qh, 0, sizeof blk.qh);
        for (int i = 0; i < 4; ++i) {
          for (int l = 0; l < 32; ++l) {
            const uint8_t lo = u[64 * i + l], hi = u[64 * i + 32 + l];
            blk.qs[32 * i + l] = uint8_t((lo & 15) | (hi & 15) << 4);
            blk.qh[l] = uint8_t(blk.qh[l] | (lo >> 4) << (2 * i) | (hi >> 4) << (2 * i + 1));
          }
        }
        std::memcpy(dst + b * int64_t(sizeof blk), &blk, sizeof blk);
      }
      return;
    case DType::Q6_K:
      for (int64_t b = 0; b < n / kQK_K; ++b) {
        BlockQ6_K blk;
        quantize_q6_k_superblock(src + b * kQK_K, blk);
        std::memcpy(dst + b * int64_t(sizeof blk), &blk, sizeof blk);
      }
      return;
    default: return;
  }
}

}  // namespace canvas::matmul_detail
