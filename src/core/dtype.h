// Element types of tensors: ids and block layouts exactly as in GGUF/ggml, plus f16/bf16 conversion.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace canvas {

// Values are the ggml_type ids stored in GGUF tensor infos.
enum class DType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, BF16 = 30,
};

struct DTypeInfo {
  const char* name;
  int64_t block_size;  // elements per block (1 for plain types)
  int64_t block_bytes; // bytes per block
};

// Returns nullptr for an id that is not a known ggml type.
const DTypeInfo* dtype_info(uint32_t id);
const DTypeInfo& dtype_info(DType type);
inline const char* dtype_name(DType type) { return dtype_info(type).name; }
// Parses "f32", "q8_0", ... (case-insensitive); throws Error on an unknown name.
DType dtype_from_name(const std::string& name);
// Bytes of a row of n elements; throws Error when n is not a multiple of the block size.
int64_t row_bytes(DType type, int64_t n);

constexpr int kQK = 32;  // elements per Q4_0 / Q8_0 block

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

// IEEE half <-> float, exact for every half value (round-to-nearest-even on the way down).
float f16_to_f32(uint16_t h);
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
