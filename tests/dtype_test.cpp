// f16 / bf16 conversion: exhaustive round trips and agreement with the hardware converter (F16C).
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
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
  EXPECT_EQ(row_bytes(DType::BF16, 7), 14);
  EXPECT_THROW(row_bytes(DType::Q8_0, 40), Error);
  EXPECT_EQ(dtype_from_name("Q8_0"), DType::Q8_0);
  EXPECT_THROW(dtype_from_name("q9_9"), Error);
}

}  // namespace
}  // namespace canvas
