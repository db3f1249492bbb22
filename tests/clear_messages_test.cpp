// Messages that name what is at fault: the file and key of a bad sampler value in a model file, the limit
// a value passes, the option a flag value breaks.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "decode/text_model.h"
#include "gguf_copy.h"
#include "test_util.h"

namespace canvas {
namespace {

std::string defaults_error(const std::string& path) {
  try {
    sampler_defaults(Model::load(path), path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

// diffusion.canvas_length of 2^30 said "it must be positive"; a NaN eb_t_min named neither file nor key.
TEST(ClearMessages, GgufSamplerKeysNameTheFileTheKeyAndTheLimit) {
  test::TempDir dir;
  const std::string source = test::source_path("models/text-dg.gguf");
  const std::string huge =
      test::gguf_with_keys(dir, "huge.gguf", source, {{"diffusion.canvas_length", GgufValue::u32(1u << 30)}});
  std::string e = defaults_error(huge);
  EXPECT_NE(e.find(huge + ": diffusion.canvas_length is 1073741824, more than the limit of 16777216"),
            std::string::npos)
      << e;
  const std::string zero =
      test::gguf_with_keys(dir, "zero.gguf", source, {{"diffusion.canvas_length", GgufValue::u32(0)}});
  e = defaults_error(zero);
  EXPECT_NE(e.find(zero + ": diffusion.canvas_length is 0; it must be positive"), std::string::npos) << e;
  const std::string nan =
      test::gguf_with_keys(dir, "nan.gguf", source, {{"diffusion.eb_t_min", GgufValue::f32(std::nanf(""))}});
  e = defaults_error(nan);
  EXPECT_NE(e.find(nan + ": diffusion.eb_t_min is nan; it must be finite and > 0"), std::string::npos) << e;
  const std::string t_max =
      test::gguf_with_keys(dir, "tmax.gguf", source, {{"diffusion.eb_t_max", GgufValue::f32(-1.0f)}});
  e = defaults_error(t_max);
  EXPECT_NE(e.find(t_max + ": diffusion.eb_t_max is -1"), std::string::npos) << e;
}

// --repeat-penalty inf said "must be > 0".
TEST(ClearMessages, RepeatPenaltyMustBeFinite) {
  for (const char* value : {"inf", "nan", "0", "-1"}) {
    const auto r = test::run_canvas("generate -p hi -n 1 --repeat-penalty " + std::string(value));
    EXPECT_EQ(r.exit_code, 1) << value;
    EXPECT_NE(r.output.find("--repeat-penalty must be finite and > 0 (got " + std::string(value) + ")"),
              std::string::npos)
        << r.output;
  }
}

}  // namespace
}  // namespace canvas
