// Whole-file readers refuse, before reading, a file past their bound (naming the file, its size and the
// limit) and anything that is not a regular file (a FIFO would block, a device never end).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>

#include "core/error.h"
#include "io/input_file.h"
#include "io/json.h"
#include "test_util.h"
#include "train/curves.h"

namespace canvas {
namespace {

using test::error_of;

TEST(BoundedReaders, RefuseLargeAndNonRegularFilesBeforeReading) {
  test::TempDir dir;
  const std::string fifo = dir.path("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string huge = dir.path("huge.json");
  ASSERT_EQ(truncate((std::ofstream(huge), huge.c_str()), off_t(300) << 20), 0);  // sparse
  const auto start = std::chrono::steady_clock::now();
  std::string e = error_of([&] { read_regular_file_bounded(fifo, 1 << 20, "test file", "kLimit"); });
  EXPECT_EQ(e, "test file " + fifo + " is not a regular file (a FIFO)");
  e = error_of([&] { read_regular_file_bounded("/dev/zero", 1 << 20, "test file", "kLimit"); });
  EXPECT_EQ(e, "test file /dev/zero is not a regular file (a device)");
  e = error_of([&] { read_regular_file_bounded(huge, 1 << 20, "test file", "kLimit"); });
  EXPECT_EQ(e, "test file " + huge + " has 314572800 bytes, more than 1 MiB (kLimit)");
  // The JSON reader (tokenizer.json, config.json, schemas) and the training-log chart use it.
  e = error_of([&] { load_json_file(fifo); });
  EXPECT_NE(e.find(fifo + " is not a regular file"), std::string::npos) << e;
  e = error_of([&] { train::training_chart(fifo); });
  EXPECT_NE(e.find("training log " + fifo + " is not a regular file"), std::string::npos) << e;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  const std::string small = dir.path("small.json");
  std::ofstream(small) << "{\"a\": 1}";
  EXPECT_EQ(load_json_file(small)["a"], 1);
}

}  // namespace
}  // namespace canvas
