// user_cache_dir: where canvas keeps its caches, from XDG_CACHE_HOME and HOME.
#include "core/cache_dir.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

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

}  // namespace
}  // namespace canvas
