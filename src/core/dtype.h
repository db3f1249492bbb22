// Element types of tensors: ids and block layouts exactly as in GGUF/ggml, plus f16/bf16 conversion.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

// Functions that CUDA kernels call as well as the CPU (core/quant_block.h) are marked CANVAS_HD.
#if defined(__CUDACC__)
#define CANVAS_HD __host__ __device__
#else
#define CANVAS_HD
#endif

namespace canvas {

// Values are the ggml_type ids stored in GGUF tensor infos.
enum class DType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, BF16 = 30,
  // canvas-internal layouts (never in a file): Q4_0 / Q8_0 with groups of 16 rows interleaved so that one
  // 512-bit vector holds 4 consecutive elements of 16 rows (see ops/matmul.h, interleave_for_matmul).
  Q4_0_R16 = 0x10002, Q8_0_R16 = 0x10008,
};

struct DTypeInfo {
  const char* name;
  int64_t block_size;  // elements per block (1 for plain types)
  int64_t block_bytes; // bytes per block
};

// Returns nullptr for an id that is not a known ggml type (the internal layouts are not file types).
const DTypeInfo* dtype_info(uint32_t id);
const DTypeInfo& dtype_info(DType type);
inline const char* dtype_name(DType type) { return dtype_info(type).name; }
// Parses "f32", "q8_0", ... (case-insensitive); throws Error on an unknown name.
DType dtype_from_name(const std::string& name);
// Bytes of a row of n elements; throws Error when n is not a multiple of the block size.
int64_t row_bytes(DType type, int64_t n);

// The row-interleaved internal layouts and the file type each one rearranges.
inline bool is_interleaved(DType t) { return t == DType::Q4_0_R16 || t == DType::Q8_0_R16; }
inline DType interleaved_base(DType t) {
  return t == DType::Q4_0_R16 ? DType::Q4_0 : t == DType::Q8_0_R16 ? DType::Q8_0 : t;
}
constexpr int kInterleaveRows = 16;  // rows per interleaved group

constexpr int kQK = 32;  // elements per Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 block

// Q8_0: value = d * qs[i].
struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34);

// Q4_0: element i (< 16) is the low nibble of qs[i], element i + 16 the high nibble; value = d * (q - 8).
struct BlockQ4_0 {
  uint16_t d;  // f16 scale
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// Q4_1: like Q4_0's nibble order; value = d * q + m with q in 0..15.
struct BlockQ4_1 {
  uint16_t d;  // f16 scale
  uint16_t m;  // f16 minimum (added)
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

// Q5_0: the low 4 bits as in Q4_0, bit 4 of element i is bit i of the little-endian 32-bit qh;
// value = d * (q - 16).
struct BlockQ5_0 {
  uint16_t d;  // f16 scale
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

// Q5_1: Q5_0's bit layout; value = d * q + m with q in 0..31.
struct BlockQ5_1 {
  uint16_t d;  // f16 scale
  uint16_t m;  // f16 minimum (added)
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

constexpr int kQK_K = 256;         // elements per K-quant super-block
constexpr int kKScaleBytes = 12;   // 8 six-bit scales + 8 six-bit mins of Q4_K / Q5_K

// Q4_K: 8 sub-blocks of 32. Sub-blocks 2i and 2i+1 share qs[32i .. 32i+31]: element l of sub-block 2i is
// the low nibble of qs[32i + l], of sub-block 2i+1 the high nibble. value = d*sc[s]*q - dmin*m[s], with
// the 6-bit sc/m packed in scales[12] (see unpack_kquant_scales).
struct BlockQ4_K {
  uint16_t d;     // f16 super-scale of the sub-block scales
  uint16_t dmin;  // f16 super-scale of the sub-block mins
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q5_K: Q4_K plus a fifth bit: bit 4 of element l of sub-block s is bit s of qh[l].
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// Q6_K: 16 sub-blocks of 16 with int8 scales; value = d * scales[e / 16] * (q - 32), q 6 bits. In each
// 128-element half h (ql += 64h, qh += 32h), for l < 32: element l is the low nibble of ql[l], l + 32 the
// low nibble of ql[l + 32], l + 64 the high nibble of ql[l], l + 96 the high nibble of ql[l + 32]; their
// top two bits are bits 0-1, 2-3, 4-5, 6-7 of qh[l].
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;  // f16 super-scale
};
static_assert(sizeof(BlockQ6_K) == 210);

// The 6-bit scales and mins of a Q4_K / Q5_K block. Bytes 0-3 hold sc[0..3] in their low 6 bits, bytes
// 4-7 m[0..3]; bytes 8-11 hold sc[4..7] (low nibble) and m[4..7] (high nibble), whose top two bits are
// the top two bits of bytes 0-3 (sc) and 4-7 (m).
CANVAS_HD inline void unpack_kquant_scales(const uint8_t* scales, uint8_t* sc, uint8_t* m) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = scales[j] & 63;
    m[j] = scales[j + 4] & 63;
    sc[j + 4] = uint8_t((scales[j + 8] & 0x0f) | ((scales[j] >> 6) << 4));
    m[j + 4] = uint8_t((scales[j + 8] >> 4) | ((scales[j + 4] >> 6) << 4));
  }
}

// IEEE half <-> float, exact for every half value (round-to-nearest-even on the way down).
CANVAS_HD inline float f32_from_bits(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}
CANVAS_HD inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {
    if (mantissa == 0) return f32_from_bits(sign);
    int e = -1;  // subnormal: normalise
    do {
      mantissa <<= 1;
      ++e;
    } while ((mantissa & 0x400) == 0);
    return f32_from_bits(sign | uint32_t(127 - 15 - e) << 23 | (mantissa & 0x3ff) << 13);
  }
  if (exponent == 31) return f32_from_bits(sign | 0x7f800000 | mantissa << 13);
  return f32_from_bits(sign | (exponent + 127 - 15) << 23 | mantissa << 13);
}
uint16_t f32_to_f16(float f);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
// Round-to-nearest-even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffff) > 0x7f800000) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1);
  return uint16_t(bits >> 16);
}

}  // namespace canvas
