// One 32-element block of a quantised GGUF row, decoded the same way on the CPU and in CUDA kernels: the
// CPU's reference matmul and row dequantisation (ops/matmul*.cpp) and the CUDA backend's quantised
// kernels (cuda/cuda_ops.cu) call this one function, so the device reads a block exactly as the CPU does.
// Fields are read byte by byte (blocks sit at unaligned offsets: 18, 20, 22 ... bytes apart).
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace canvas {

// A 32-element block as integers: value[i] = scale[i / 16] * q[i] (+ min when has_min). q is the signed
// quant after the offset (Q5_0: q - 16, Q6_K: q - 32). scale is the float the format multiplies q by
// (K-quants: d * sc, rounded once in f32 as ggml does), equal for both halves except in Q6_K.
struct DecodedBlock {
  int8_t q[32];
  float scale[2];
  float min;
  bool has_min;
};

// The types decode_block reads.
CANVAS_HD inline bool block_decodable(DType type) {
  switch (type) {
    case DType::Q8_0: case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1:
    case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: return true;
    default: return false;
  }
}

namespace quant_block_detail {
CANVAS_HD inline uint16_t load_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
CANVAS_HD inline uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
// Q4_0 / Q4_1 / Q5_0 / Q5_1 order: element i < 16 in the low nibble of qs[i], i + 16 in the high one; Q5
// types add bit i of qh as bit 4 of element i.
CANVAS_HD inline void unpack_nibbles(const uint8_t* qs, uint32_t qh, int offset, int8_t* q) {
  for (int i = 0; i < 16; ++i) {
    q[i] = int8_t(int((qs[i] & 15) | ((qh >> i) & 1) << 4) - offset);
    q[i + 16] = int8_t(int((qs[i] >> 4) | ((qh >> (i + 16)) & 1) << 4) - offset);
  }
}
}  // namespace quant_block_detail

// Block b (32 elements) of a row of `type` (block_decodable) starting at `row`. Another type: all zero.
CANVAS_HD inline void decode_block(DType type, const uint8_t* row, int64_t b, DecodedBlock& out) {
  using namespace quant_block_detail;
  out.has_min = false;
  out.min = 0.f;
  switch (type) {
    case DType::Q8_0: {
      const uint8_t* p = row + b * int64_t(sizeof(BlockQ8_0));
      for (int i = 0; i < 32; ++i) out.q[i] = int8_t(p[offsetof(BlockQ8_0, qs) + i]);
      out.scale[0] = out.scale[1] = f16_to_f32(load_u16(p));
      return;
    }
    case DType::Q4_0: {
      const uint8_t* p = row + b * int64_t(sizeof(BlockQ4_0));
      unpack_nibbles(p + offsetof(BlockQ4_0, qs), 0, 8, out.q);
      out.scale[0] = out.scale[1] = f16_to_f32(load_u16(p));
      return;
    }
    case DType::Q4_1: {
      const uint8_t* p = row + b * int64_t(sizeof(BlockQ4_1));
      unpack_nibbles(p + offsetof(BlockQ4_1, qs), 0, 0, out.q);
      out.scale[0] = out.scale[1] = f16_to_f32(load_u16(p));
      out.min = f16_to_f32(load_u16(p + offsetof(BlockQ4_1, m)));
      out.has_min = true;
      return;
    }
    case DType::Q5_0: {
      const uint8_t* p = row + b * int64_t(sizeof(BlockQ5_0));
      unpack_nibbles(p + offsetof(BlockQ5_0, qs), load_u32(p + offsetof(BlockQ5_0, qh)), 16, out.q);
      out.scale[0] = out.scale[1] = f16_to_f32(load_u16(p));
      return;
    }
    case DType::Q5_1: {
      const uint8_t* p = row + b * int64_t(sizeof(BlockQ5_1));
      unpack_nibbles(p + offsetof(BlockQ5_1, qs), load_u32(p + offsetof(BlockQ5_1, qh)), 0, out.q);
      out.scale[0] = out.scale[1] = f16_to_f32(load_u16(p));
      out.min = f16_to_f32(load_u16(p + offsetof(BlockQ5_1, m)));
      out.has_min = true;
      return;
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      // Sub-block s of super-block b / 8; Q4_K and Q5_K share the header layout (d, dmin, scales).
      const bool q5 = type == DType::Q5_K;
      const uint8_t* p = row + b / 8 * int64_t(q5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K));
      const int s = int(b % 8);
      const uint8_t* qs = p + (q5 ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs));
      const uint8_t* qh = q5 ? p + offsetof(BlockQ5_K, qh) : nullptr;
      uint8_t sc[8], m[8];
      unpack_kquant_scales(p + offsetof(BlockQ4_K, scales), sc, m);
      const uint8_t* bytes = qs + 32 * (s / 2);
      const int shift = 4 * (s & 1);
      for (int l = 0; l < 32; ++l) {
        int q = (bytes[l] >> shift) & 15;
        if (qh) q |= ((qh[l] >> s) & 1) << 4;
        out.q[l] = int8_t(q);
      }
      out.scale[0] = out.scale[1] = f16_to_f32(load_u16(p)) * float(sc[s]);
      out.min = -(f16_to_f32(load_u16(p + offsetof(BlockQ4_K, dmin))) * float(m[s]));  // d1 * q - m1 == d1 * q + (-m1)
      out.has_min = true;
      return;
    }
    case DType::Q6_K: {
      const uint8_t* p = row + b / 8 * int64_t(sizeof(BlockQ6_K));
      const int g = int(b % 8), half = g / 4, part = g % 4;
      const uint8_t* ql = p + offsetof(BlockQ6_K, ql) + 64 * half + 32 * (part & 1);
      const uint8_t* qh = p + offsetof(BlockQ6_K, qh) + 32 * half;
      const int low_shift = 4 * (part >> 1), high_shift = 2 * part;
      for (int l = 0; l < 32; ++l)
        out.q[l] = int8_t(int(((ql[l] >> low_shift) & 15) | ((qh[l] >> high_shift) & 3) << 4) - 32);
      const float d = f16_to_f32(load_u16(p + offsetof(BlockQ6_K, d)));
      const int8_t* scales = reinterpret_cast<const int8_t*>(p + offsetof(BlockQ6_K, scales));
      out.scale[0] = d * float(scales[2 * g]);
      out.scale[1] = d * float(scales[2 * g + 1]);
      return;
    }
    default: break;
  }
  for (int i = 0; i < 32; ++i) out.q[i] = 0;
  out.scale[0] = out.scale[1] = 0.f;
}

// Element i of a decoded block, as dequantize_row computes it: a rounded product, then a rounded sum (no
// "+ 0" without a minimum: it would turn ggml's -0 into +0). On the device the two roundings are
// explicit, so the compiler cannot fuse them into one multiply-add.
CANVAS_HD inline float block_value(const DecodedBlock& blk, int i) {
#if defined(__CUDA_ARCH__)
  const float v = __fmul_rn(blk.scale[i / 16], float(blk.q[i]));
  return blk.has_min ? __fadd_rn(v, blk.min) : v;
#else
  const float v = blk.scale[i / 16] * float(blk.q[i]);
  return blk.has_min ? v + blk.min : v;
#endif
}

}  // namespace canvas
