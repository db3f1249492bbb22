// Type table and scalar f16 conversion.
#include "core/dtype.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace canvas {
namespace {

struct Entry {
  uint32_t id;
  DTypeInfo info;
};

constexpr Entry kTypes[] = {
    {0, {"f32", 1, 4}},        {1, {"f16", 1, 2}},        {2, {"q4_0", 32, 18}},
    {3, {"q4_1", 32, 20}},     {6, {"q5_0", 32, 22}},     {7, {"q5_1", 32, 24}},
    {8, {"q8_0", 32, 34}},     {9, {"q8_1", 32, 36}},     {10, {"q2_k", 256, 84}},
    {11, {"q3_k", 256, 110}},  {12, {"q4_k", 256, 144}},  {13, {"q5_k", 256, 176}},
    {14, {"q6_k", 256, 210}},  {15, {"q8_k", 256, 292}},  {24, {"i8", 1, 1}},
    {25, {"i16", 1, 2}},       {26, {"i32", 1, 4}},       {27, {"i64", 1, 8}},
    {28, {"f64", 1, 8}},       {30, {"bf16", 1, 2}},
};

// Same bytes per element as their file types (a group of 16 rows occupies exactly the 16 rows' bytes).
constexpr Entry kInternalTypes[] = {
    {uint32_t(DType::Q4_0_R16), {"q4_0_r16", 32, 18}},
    {uint32_t(DType::Q8_0_R16), {"q8_0_r16", 32, 34}},
};

}  // namespace

const DTypeInfo* dtype_info(uint32_t id) {
  for (const Entry& e : kTypes)
    if (e.id == id) return &e.info;
  return nullptr;
}

const DTypeInfo& dtype_info(DType type) {
  const DTypeInfo* info = dtype_info(uint32_t(type));
  for (const Entry& e : kInternalTypes)
    if (e.id == uint32_t(type)) info = &e.info;
  check(info != nullptr, "unknown dtype id " + std::to_string(uint32_t(type)));
  return *info;
}

DType dtype_from_name(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const Entry& e : kTypes)
    if (lower == e.info.name) return DType(e.id);
  throw Error("unknown dtype '" + name + "'");
}

int64_t row_bytes(DType type, int64_t n) {
  const DTypeInfo& info = dtype_info(type);
  check(n % info.block_size == 0, std::string("row of ") + std::to_string(n) + " elements is not a multiple of the " +
                                      info.name + " block size " + std::to_string(info.block_size));
  return n / info.block_size * info.block_bytes;
}


uint16_t f32_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000);
  const uint32_t abs = bits & 0x7fffffff;
  if (abs > 0x7f800000) {  // NaN: keep the top payload bits (so every half NaN round-trips), never make inf
    const uint16_t payload = uint16_t((abs >> 13) & 0x3ff);
    return sign | 0x7c00 | (payload ? payload : 0x200);
  }
  if (abs >= 0x477ff000) return sign | 0x7c00;                // overflow (rounds to >= 65520) -> inf
  if (abs < 0x38800000) {                                      // result is subnormal or zero
    if (abs < 0x33000000) return sign;                         // < half of the smallest subnormal
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - exponent;                     // 14 + (113 - exponent) - 1 ... see below
    // value = mantissa * 2^(exponent-150); half subnormal unit = 2^-24 -> q = mantissa >> (126 - exponent)
    uint32_t q = mantissa >> shift;
    const uint32_t rem = mantissa & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    return sign | uint16_t(q);
  }
  uint32_t rounded = abs + 0xfff + ((abs >> 13) & 1);         // round to nearest even at bit 13
  return sign | uint16_t(((rounded >> 13) - ((127 - 15) << 10)) & 0xffff);
}

}  // namespace canvas
