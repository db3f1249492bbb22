// write_file: the whole file or nothing: bytes and streamed bodies land whole, a failure leaves the old
// file and no PATH.tmp behind, and errors name the path.
#include "core/output_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "core/error.h"
#include "test_util.h"

namespace canvas {
namespace {

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(OutputFile, WritesWholeFilesAndLeavesNothingBehindOnFailure) {
  test::TempDir dir;
  const std::string path = dir.path("out.bin");
  const std::string bytes("a\0b\nc", 5);
  write_file(path, bytes);
  EXPECT_EQ(contents(path), bytes);
  write_file(path, [](std::ostream& out) { out << "streamed " << 42; });
  EXPECT_EQ(contents(path), "streamed 42");
  // A body that fails keeps the old file, removes its .tmp and passes the error on.
  EXPECT_THROW(write_file(path,
                          [](std::ostream& out) {
                            out << "half";
                            throw std::runtime_error("disk full");
                          }),
               std::runtime_error);
  EXPECT_EQ(contents(path), "streamed 42");
  EXPECT_FALSE(std::filesystem::exists(temp_file_for(path)));
  // An unwritable place names the path.
  try {
    write_file(dir.path("no-such-dir/x.json"), "{}");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write " + dir.path("no-such-dir/x.json")), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(write_file("", "x"), Error);
  EXPECT_THROW(write_file(dir.path(""), "x"), Error);  // a directory
  // A device is written as it is, never replaced by a renamed file.
  write_file("/dev/null", "discarded");
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_FALSE(std::filesystem::exists(temp_file_for("/dev/null")));
  // A link (as /dev/stdout is) is written through: the file it names gets the bytes, the link stays.
  const std::string link = dir.path("link.json");
  std::filesystem::create_symlink(path, link);
  write_file(link, "through");
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(contents(path), "through");
}

}  // namespace
}  // namespace canvas
