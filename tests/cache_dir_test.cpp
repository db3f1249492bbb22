// user_cache_dir: where canvas keeps its caches, from XDG_CACHE_HOME and HOME.
#include "core/cache_dir.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "test_util.h"

namespace canvas {
namespace {

// Sets an environment variable for one scope, then puts back what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Issue 61 L: a relative XDG_CACHE_HOME wrote the cache under the working directory; the XDG spec says
// such a value is invalid and is ignored.
TEST(CacheDir, OnlyAnAbsoluteXdgCacheHomeIsHonoured) {
  ScopedEnv home("HOME", "/home/someone");
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/var/cache/me");
    EXPECT_EQ(user_cache_dir(), "/var/cache/me/canvas");
  }
  for (const char* relative : {"cache", "./cache", "../cache", ""}) {
    ScopedEnv xdg("XDG_CACHE_HOME", relative);
    EXPECT_EQ(user_cache_dir(), "/home/someone/.cache/canvas") << "XDG_CACHE_HOME=" << relative;
  }
  ScopedEnv xdg("XDG_CACHE_HOME", "relative");
  ScopedEnv no_home("HOME", nullptr);
  EXPECT_EQ(user_cache_dir(), "");
}

// bound_cache_dir: the oldest files go first until the folder is within both bounds; the file just
// written stays even when it alone is over the byte bound; temporaries, links and folders are left alone.
TEST(CacheDir, EvictsTheOldestFilesPastTheBounds) {
  namespace fs = std::filesystem;
  test::TempDir dir;
  const auto now = fs::file_time_type::clock::now();
  auto put = [&](const std::string& name, size_t bytes, int age_seconds) {
    std::ofstream(dir.path(name), std::ios::binary) << std::string(bytes, 'x');
    fs::last_write_time(dir.path(name), now - std::chrono::seconds(age_seconds));
  };
  put("oldest", 100, 50);
  put("old", 100, 40);
  put("middle", 100, 30);
  put("new", 100, 20);
  put("being-written.ids.123.tmp", 1000, 60);
  fs::create_directory(dir.path("folder"));
  fs::create_symlink(dir.path("oldest"), dir.path("link"));
  bound_cache_dir(dir.path(""), 250, 100, dir.path("new"));
  EXPECT_FALSE(fs::exists(dir.path("oldest")));
  EXPECT_FALSE(fs::exists(dir.path("old")));
  for (const char* kept : {"middle", "new", "being-written.ids.123.tmp", "folder"}) EXPECT_TRUE(fs::exists(dir.path(kept))) << kept;
  EXPECT_TRUE(fs::is_symlink(dir.path("link")));
  // The file count: two files at most.
  put("newer", 10, 10);
  bound_cache_dir(dir.path(""), 1000, 2, dir.path("newer"));
  EXPECT_FALSE(fs::exists(dir.path("middle")));
  EXPECT_TRUE(fs::exists(dir.path("new")));
  EXPECT_TRUE(fs::exists(dir.path("newer")));
  // The file just written stays, however large; the others go.
  put("huge", 5000, 0);
  bound_cache_dir(dir.path(""), 1000, 100, dir.path("huge"));
  EXPECT_TRUE(fs::exists(dir.path("huge")));
  EXPECT_FALSE(fs::exists(dir.path("new")));
  EXPECT_FALSE(fs::exists(dir.path("newer")));
  // A folder that does not exist is no error.
  bound_cache_dir(dir.path("missing"), 0, 0, "");
}

}  // namespace
}  // namespace canvas
