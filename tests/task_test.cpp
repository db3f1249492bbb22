// Training tasks: the data each task generates is pinned by fingerprints, so a change to the task code
// that alters a single generated token is caught.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/rng.h"
#include "train/data.h"
#include "sudoku/sudoku_task.h"

namespace canvas {
namespace {

// FNV-1a over everything an example carries.
struct Fingerprint {
  uint64_t h = 1469598103934665603ull;
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  void add(const train::Example& e) {
    const uint64_t sizes[3] = {e.tokens.size(), e.fixed.size(), e.weight.size()};
    add(sizes, sizeof sizes);
    add(e.tokens.data(), e.tokens.size() * sizeof(int32_t));
    add(e.fixed.data(), e.fixed.size());
    add(e.weight.data(), e.weight.size() * sizeof(float));
    add(&e.prompt_len, sizeof e.prompt_len);
    add(&e.mask_rate, sizeof e.mask_rate);
  }
};

// Training draws for seeds 0..n-1 and the whole validation set.
uint64_t fingerprint(const train::DataSource& source, uint64_t n) {
  Fingerprint f;
  for (const train::Example& e : source.validation()) f.add(e);
  for (uint64_t seed = 0; seed < n; ++seed) {
    Rng rng(seed);
    f.add(source.sample(rng));
    f.add(source.sample(rng));
  }
  return f.h;
}

std::string synthetic_text() {
  std::string text;
  Rng rng(5);
  for (int i = 0; i < 20000; ++i) text += char('a' + rng.below(26));
  return text;
}

TEST(TaskData, SudokuAndTextExamplesAreUnchanged) {
  EXPECT_EQ(fingerprint(*make_sudoku_source("infill", 24, 30, {}, 4, 78, "random"), 6),
            1437639124494766584ull);
  EXPECT_EQ(fingerprint(*make_sudoku_source("sequence", 22, 50, {}, 4, 78, "random"), 6),
            3993403493753217331ull);
  EXPECT_EQ(fingerprint(*make_sudoku_source("infill", 22, 36, {}, 4, 11, "singles"), 6),
            13388398910060869853ull);
  EXPECT_EQ(fingerprint(*make_sudoku_source("infill", 22, 36, {}, 4, 11, "decoder", 20.f), 6),
            4426803136234292981ull);
  EXPECT_EQ(fingerprint(*train::make_text_source(synthetic_text(), 64, 0.05, 8), 6), 3851633679912758619ull);
}

TEST(TaskData, TextSourceRefusesAValidationFractionOutsideZeroToOne) {
  for (double fraction : {-0.5, 1.0, 1.5, std::nan("")})
    EXPECT_THROW(train::make_text_source(synthetic_text(), 64, fraction, 8), Error) << fraction;
}

}  // namespace
}  // namespace canvas
