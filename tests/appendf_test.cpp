// appendf: printf onto the end of a string, at any length (the listings and reports build on it).
#include "core/appendf.h"

#include <gtest/gtest.h>

#include <string>

namespace canvas {
namespace {

TEST(Appendf, AppendsFormattedTextOfAnyLength) {
  std::string out = "a";
  appendf(out, "%d-%s|%5.2f", 42, "x", 1.5);
  EXPECT_EQ(out, "a42-x| 1.50");
  const std::string long_name(3000, 'n');  // longer than any fixed buffer a copy used
  appendf(out, "[%s]", long_name.c_str());
  EXPECT_EQ(out, "a42-x| 1.50[" + long_name + "]");
  appendf(out, "%s", "");
  EXPECT_EQ(out.size(), 12u + 3000u + 1u);
}

}  // namespace
}  // namespace canvas
