// scripts/setup.sh as a fresh machine runs it: the plain command (README's first) installs and builds only
// what `canvas` needs; --tests installs what the tests use and builds every target. Run against stubs of
// dpkg, apt-get, sudo and cmake that record their arguments, in a copy of the script's tree.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "test_util.h"

namespace canvas::test {
namespace {

namespace fs = std::filesystem;

void write_executable(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  fs::permissions(path, fs::perms::owner_all);
}

// The commands setup.sh ran (apt-get and cmake lines, in order), run with `flags` in a copy of the tree.
std::string setup_log(const TempDir& dir, const std::string& flags) {
  const std::string tree = dir.path("tree"), bin = dir.path("bin"), log = dir.path("log");
  fs::create_directories(tree + "/scripts");
  fs::create_directories(tree + "/tests/python");
  fs::create_directories(tree + "/.venv/bin");
  fs::create_directories(bin);
  fs::copy_file(source_path("scripts/setup.sh"), tree + "/scripts/setup.sh", fs::copy_options::overwrite_existing);
  std::ofstream(tree + "/tests/python/requirements.txt") << "";
  write_executable(tree + "/scripts/get-models.sh", "echo get-models >> " + log + "\n");
  // The .venv exists (no python3 -m venv); pip records, and llama_cpp is not installed yet.
  write_executable(tree + "/.venv/bin/python", "#!/bin/sh\nexit 1\n");
  write_executable(tree + "/.venv/bin/pip", "#!/bin/sh\necho pip \"$@\" >> " + log + "\n");
  write_executable(bin + "/dpkg", "#!/bin/sh\nexit 1\n");  // nothing is installed
  write_executable(bin + "/sudo", "#!/bin/sh\nexec \"$@\"\n");
  for (const char* tool : {"apt-get", "cmake"})
    write_executable(bin + "/" + tool, std::string("#!/bin/sh\necho ") + tool + " \"$@\" >> " + log + "\n");
  const std::string cmd = "PATH=" + bin + ":$PATH bash " + tree + "/scripts/setup.sh " + flags + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  char buf[4096];
  std::string output;
  while (size_t got = fread(buf, 1, sizeof buf, pipe)) output.append(buf, got);
  EXPECT_EQ(pclose(pipe), 0) << output;
  return read_text(log);
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(SetupScriptCli, PlainInstallsAndBuildsOnlyTheCanvasBinary) {
  TempDir dir;
  const std::string log = setup_log(dir, "");
  const std::string install = log.substr(0, log.find("\ncmake"));
  for (const char* needed : {"build-essential", "cmake", "nlohmann-json3-dev", "zlib1g-dev"})
    EXPECT_TRUE(has(install, needed)) << needed << "\n" << log;
  // What only the tests use (a browser, a proxy, a second compiler, puzzles, corpora, test libraries).
  for (const char* test_only : {"chromium", "nginx", "clang", "qqwing", "bible-kjv", "fortunes", "libgtest-dev",
                                "libbenchmark-dev", "libcpp-httplib-dev", "libopenblas-dev", "python3-venv"})
    EXPECT_FALSE(has(install, test_only)) << test_only << "\n" << log;
  EXPECT_TRUE(has(log, "-DCANVAS_TESTS=OFF")) << log;
  EXPECT_TRUE(has(log, "-DCANVAS_FUZZ=OFF")) << log;
  EXPECT_TRUE(has(log, "-DCANVAS_BENCH=OFF")) << log;
  EXPECT_TRUE(has(log, "-DCANVAS_CUDA=OFF")) << log;
  EXPECT_TRUE(has(log, "--build build -j") && has(log, "--target canvas\n")) << log;
  EXPECT_FALSE(has(log, "pip ")) << log;
  EXPECT_FALSE(has(log, "get-models")) << log;
}

TEST(SetupScriptCli, TestsInstallAndBuildEverything) {
  TempDir dir;
  const std::string log = setup_log(dir, "--tests");
  for (const char* package : {"chromium", "nginx-light", "clang", "qqwing", "bible-kjv", "libgtest-dev",
                              "libcpp-httplib-dev", "nlohmann-json3-dev"})
    EXPECT_TRUE(has(log, package)) << package << "\n" << log;
  EXPECT_TRUE(has(log, "-DCANVAS_TESTS=ON -DCANVAS_FUZZ=ON -DCANVAS_BENCH=ON -UCANVAS_CUDA")) << log;
  EXPECT_FALSE(has(log, "--target")) << log;  // every target
  EXPECT_TRUE(has(log, "pip install")) << log;
  EXPECT_TRUE(has(log, "get-models")) << log;
  // The CUDA module when asked.
  TempDir cuda("cuda");
  EXPECT_TRUE(has(setup_log(cuda, "--cuda"), "-DCANVAS_CUDA=ON")) << "--cuda";
}

}  // namespace
}  // namespace canvas::test
