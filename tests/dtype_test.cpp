// f16 / bf16 conversion: exhaustive round trips and agreement with the hardware converter (F16C).
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"

namespace canvas {
namespace {

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
float float_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
bool half_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

// Hardware conversions, compiled for F16C only here so the test binary itself stays portable.
__attribute__((target("f16c"))) uint16_t hw_f32_to_f16(float f) {
  return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
__attribute__((target("f16c"))) float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }

bool have_f16c() { return cpu_features().avx2 && cpu_features().f16c; }

TEST(DtypeTest, EveryHalfRoundTripsExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(uint16_t(h));
    ASSERT_EQ(f32_to_f16(f), uint16_t(h)) << "half 0x" << std::hex << h;
    if (half_is_nan(uint16_t(h))) {
      ASSERT_TRUE(std::isnan(f));
    }
  }
}

TEST(DtypeTest, HalfToFloatMatchesHardware) {
  if (!have_f16c()) GTEST_SKIP() << "no F16C";
  for (uint32_t h = 0; h < 65536; ++h) {
    const float mine = f16_to_f32(uint16_t(h)), hw = hw_f16_to_f32(uint16_t(h));
    if (half_is_nan(uint16_t(h))) {
      ASSERT_TRUE(std::isnan(mine) && std::isnan(hw));
    } else {
      ASSERT_EQ(bits_of(mine), bits_of(hw)) << "half 0x" << std::hex << h;
    }
  }
}

void expect_matches_hardware(float f) {
  const uint16_t mine = f32_to_f16(f), hw = hw_f32_to_f16(f);
  if (std::isnan(f)) {
    ASSERT_TRUE(half_is_nan(mine) && half_is_nan(hw)) << std::hex << bits_of(f);
    ASSERT_EQ(mine & 0x8000, hw & 0x8000);
  } else {
    ASSERT_EQ(mine, hw) << "float bits 0x" << std::hex << bits_of(f) << " (" << f << ")";
  }
}

TEST(DtypeTest, FloatToHalfMatchesHardwareRounding) {
  if (!have_f16c()) GTEST_SKIP() << "no F16C";
  Rng rng(1234);
  // Random bit patterns: every exponent, NaNs and infinities included.
  for (int i = 0; i < 2000000; ++i) expect_matches_hardware(float_of(uint32_t(rng.next())));
  // The half subnormal range and just around it (|f| < 2^-13), where rounding is done by hand.
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t b = 0x30000000u + uint32_t(rng.below(0x0a000000u));  // 2^-31 .. 2^-11
    expect_matches_hardware(float_of(b | (rng.next() & 1 ? 0x80000000u : 0)));
  }
  // Exact ties and their neighbours: midpoints between consecutive halves, and one ulp either side.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const double lo = f16_to_f32(uint16_t(h)), hi = f16_to_f32(uint16_t(h + 1));
    const float mid = float((lo + hi) / 2);  // exact: halves have 11 significant bits
    for (float f : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e30f)}) {
      expect_matches_hardware(f);
      expect_matches_hardware(-f);
    }
  }
  // Overflow edge: 65504 is the largest half, 65520 rounds (to even) to infinity.
  for (float f : {65504.f, 65519.99f, 65520.f, 65536.f, 1e10f, std::numeric_limits<float>::infinity(), 0.f,
                  -0.f, std::numeric_limits<float>::denorm_min(), 5.960464477539063e-8f, 2.980232238769531e-8f})
    expect_matches_hardware(f);
}

TEST(DtypeTest, HalfKnownValues) {
  EXPECT_EQ(f32_to_f16(1.f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.f), 0x7c00);
  EXPECT_EQ(f32_to_f16(5.960464477539063e-8f), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(2.980232238769531e-8f), 0x0000);  // half of it: ties to even (zero)
  EXPECT_EQ(f32_to_f16(1.0f + 1.f / 2048), 0x3c00);      // tie between 1 and 1+2^-10 -> even
  EXPECT_EQ(f32_to_f16(1.0f + 3.f / 2048), 0x3c02);      // tie -> even (upwards)
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_TRUE(half_is_nan(f32_to_f16(std::numeric_limits<float>::quiet_NaN())));
}

TEST(DtypeTest, Bf16RoundTripAndRounding) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_f32(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f))));
    } else {
      ASSERT_EQ(f32_to_bf16(f), uint16_t(h));
    }
  }
  EXPECT_EQ(f32_to_bf16(float_of(0x3f808000)), 0x3f80);  // tie -> even (down)
  EXPECT_EQ(f32_to_bf16(float_of(0x3f818000)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(float_of(0x3f808001)), 0x3f81);  // above the tie
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(float_of(0x7f800001)))));  // NaN never becomes inf
}

TEST(DtypeTest, TypeTable) {
  EXPECT_EQ(row_bytes(DType::Q8_0, 64), 68);
  EXPECT_EQ(row_bytes(DType::Q4_0, 64), 36);
  // ggml block sizes: Q4_1 d+m+16, Q5_0 d+qh4+16, Q5_1 d+m+qh4+16; K-quants per 256 elements.
  EXPECT_EQ(row_bytes(DType::Q4_1, 64), 40);
  EXPECT_EQ(row_bytes(DType::Q5_0, 64), 44);
  EXPECT_EQ(row_bytes(DType::Q5_1, 96), 72);
  EXPECT_EQ(row_bytes(DType::Q4_K, 512), 288);  // 2+2+12+128
  EXPECT_EQ(row_bytes(DType::Q5_K, 256), 176);  // 2+2+12+32+128
  EXPECT_EQ(row_bytes(DType::Q6_K, 768), 630);  // 128+64+16+2
  EXPECT_THROW(row_bytes(DType::Q4_K, 128), Error);
  EXPECT_THROW(row_bytes(DType::Q6_K, 32), Error);
  EXPECT_THROW(row_bytes(DType::Q5_0, 48), Error);
  const struct {
    DType type;
    size_t bytes;
    int64_t block;
  } blocks[] = {{DType::Q8_0, sizeof(BlockQ8_0), 32}, {DType::Q4_0, sizeof(BlockQ4_0), 32},
                {DType::Q4_1, sizeof(BlockQ4_1), 32}, {DType::Q5_0, sizeof(BlockQ5_0), 32},
                {DType::Q5_1, sizeof(BlockQ5_1), 32}, {DType::Q4_K, sizeof(BlockQ4_K), 256},
                {DType::Q5_K, sizeof(BlockQ5_K), 256}, {DType::Q6_K, sizeof(BlockQ6_K), 256}};
  for (const auto& b : blocks) {
    EXPECT_EQ(dtype_info(b.type).block_bytes, int64_t(b.bytes)) << dtype_name(b.type);
    EXPECT_EQ(dtype_info(b.type).block_size, b.block) << dtype_name(b.type);
  }
  // Field offsets as in ggml-common.h.
  EXPECT_EQ(offsetof(BlockQ5_0, qs), 6u);
  EXPECT_EQ(offsetof(BlockQ5_1, qh), 4u);
  EXPECT_EQ(offsetof(BlockQ5_1, qs), 8u);
  EXPECT_EQ(offsetof(BlockQ4_K, qs), 16u);
  EXPECT_EQ(offsetof(BlockQ5_K, qh), 16u);
  EXPECT_EQ(offsetof(BlockQ5_K, qs), 48u);
  EXPECT_EQ(offsetof(BlockQ6_K, qh), 128u);
  EXPECT_EQ(offsetof(BlockQ6_K, scales), 192u);
  EXPECT_EQ(offsetof(BlockQ6_K, d), 208u);
  EXPECT_EQ(dtype_from_name("q4_k"), DType::Q4_K);
  EXPECT_EQ(dtype_from_name("Q6_K"), DType::Q6_K);
  EXPECT_EQ(row_bytes(DType::BF16, 7), 14);
  EXPECT_THROW(row_bytes(DType::Q8_0, 40), Error);
  EXPECT_EQ(dtype_from_name("Q8_0"), DType::Q8_0);
  EXPECT_THROW(dtype_from_name("q9_9"), Error);
}

// Q4_K / Q5_K 6-bit scale packing, packed by hand: sc = {1, 2, 3, 4, 40, 17, 63, 0},
// m = {5, 6, 7, 8, 33, 48, 15, 62}. Bytes 0-3: sc[j] | (sc[j+4] >> 4) << 6; bytes 4-7: m[j] |
// (m[j+4] >> 4) << 6; bytes 8-11: (sc[j+4] & 15) | (m[j+4] & 15) << 4.
TEST(DtypeTest, KQuantScalePacking) {
  const uint8_t scales[12] = {0x81, 0x42, 0xC3, 0x04, 0x85, 0xC6, 0x07, 0xC8, 0x18, 0x01, 0xFF, 0xE0};
  uint8_t sc[8], m[8];
  unpack_kquant_scales(scales, sc, m);
  const uint8_t want_sc[8] = {1, 2, 3, 4, 40, 17, 63, 0}, want_m[8] = {5, 6, 7, 8, 33, 48, 15, 62};
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(sc[j], want_sc[j]) << j;
    EXPECT_EQ(m[j], want_m[j]) << j;
  }
}

}  // namespace
}  // namespace canvas
