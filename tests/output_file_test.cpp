// write_file: the whole file or nothing: bytes and streamed bodies land whole, a failure leaves the old
// file and no PATH.tmp behind, and errors name the path.
#include "core/output_file.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "core/error.h"
#include "dead_pid.h"
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
  // A link stays: the file it names gets the bytes.
  const std::string link = dir.path("link.json");
  std::filesystem::create_symlink(path, link);
  write_file(link, "through");
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(contents(path), "through");
}

// Issue 61 E: a checkpoint (any output) that is a link was written through in place, truncated first: a
// kill -9 during `canvas train` left a 0-byte checkpoint. The file the link names is now replaced atomically
// (its temporary beside it): a write that fails half-way leaves it whole, and the link stays a link.
TEST(OutputFile, ALinkedOutputIsReplacedAtomicallyAtWhatItNames) {
  namespace fs = std::filesystem;
  test::TempDir dir;
  fs::create_directories(dir.path("runs"));
  const std::string checkpoint = dir.path("runs/step-100.gguf"), link = dir.path("latest.gguf");
  write_file(checkpoint, "old checkpoint");
  fs::create_symlink("runs/step-100.gguf", link);  // relative, as users make them
  const auto half = [](std::ostream& out) {
    out << "half";
    out.flush();
    throw std::runtime_error("killed");
  };
  EXPECT_THROW(write_file(link, half), std::runtime_error);
  EXPECT_EQ(contents(checkpoint), "old checkpoint");
  EXPECT_FALSE(fs::exists(temp_file_for(checkpoint)));
  write_file(link, "new checkpoint");
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(contents(checkpoint), "new checkpoint");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path("runs")), fs::directory_iterator()), 1);
  // A link through /proc (as /dev/stdout is) is the process's own stream: written through, never replaced.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  write_file("/proc/self/fd/" + std::to_string(fds[1]), "to the pipe");
  ::close(fds[1]);
  char got[32] = {};
  EXPECT_EQ(::read(fds[0], got, sizeof got), 11);
  EXPECT_STREQ(got, "to the pipe");
  ::close(fds[0]);
}

// Issue 61 C, D: a file canvas names itself (a cache) is never opened through what is at its path: a link
// (someone's file behind it) or a FIFO (which would block the writer for ever) is replaced by the renamed
// temporary; a link someone put at the temporary's name is not followed either.
TEST(OutputFile, CanvasOwnedFilesReplaceLinksAndPipesUnopened) {
  namespace fs = std::filesystem;
  test::TempDir dir;
  const std::string victim = dir.path("victim.txt"), cache = dir.path("cache.ids");
  write_file(victim, "my own file");
  fs::create_symlink(victim, cache);
  write_file(cache, "cache", FileOwner::Canvas);
  EXPECT_EQ(contents(victim), "my own file");
  EXPECT_FALSE(fs::is_symlink(cache));
  EXPECT_EQ(contents(cache), "cache");
  fs::remove(cache);
  ASSERT_EQ(::mkfifo(cache.c_str(), 0600), 0);
  const int reader = ::open(cache.c_str(), O_RDONLY | O_NONBLOCK);  // so that a write would not block
  ASSERT_GE(reader, 0);
  write_file(cache, "cache", FileOwner::Canvas);
  char byte = 0;
  EXPECT_LE(::read(reader, &byte, 1), 0) << "written into the FIFO";
  ::close(reader);
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(cache)));
  EXPECT_EQ(contents(cache), "cache");
  fs::create_symlink(victim, temp_file_for(cache));
  write_file(cache, "again", FileOwner::Canvas);
  EXPECT_EQ(contents(victim), "my own file");
  EXPECT_EQ(contents(cache), "again");
  EXPECT_THROW(write_file(dir.path(""), "x", FileOwner::Canvas), Error);
}

// Issue 61 K: a process killed mid-write leaves PATH.PID.tmp (16 MB token caches, whole checkpoints) that
// nothing removed. The next write of PATH removes those of processes that are gone, and only those.
TEST(OutputFile, TemporariesOfDeadProcessesAreRemoved) {
  namespace fs = std::filesystem;
  test::TempDir dir;
  const std::string path = dir.path("model.gguf");
  const pid_t dead = test::dead_pid();
  ASSERT_GT(dead, 0);
  const std::string leftover = path + "." + std::to_string(dead) + ".tmp";
  const std::string alive = path + "." + std::to_string(getppid()) + ".tmp";  // a live process's write
  const std::string other = dir.path("other.gguf." + std::to_string(dead) + ".tmp");
  for (const std::string& f : {leftover, alive, other}) write_file(f, "half");
  write_file(path, "whole");
  EXPECT_FALSE(fs::exists(leftover));
  EXPECT_TRUE(fs::exists(alive));
  EXPECT_TRUE(fs::exists(other));  // another file's
  EXPECT_EQ(contents(path), "whole");
}

}  // namespace
}  // namespace canvas
