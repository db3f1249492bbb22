// The CUDA backend as a module (cuda/cuda_module.h): CPU commands map no CUDA library, and --device cuda
// without a usable module, library or device fails saying what is missing.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/cuda_module.h"
#include "serve_process.h"
#include "test_util.h"

namespace canvas {
namespace {

// A loaded library's file name names CUDA (libcudart, libcublas, libcublasLt, libcuda, libcanvas-cuda).
// The name alone: the path of this checkout may say cuda too.
bool names_cuda(const std::string& path) {
  const std::string name = std::filesystem::path(path).filename().string();
  return name.find("cuda") != std::string::npos || name.find("cublas") != std::string::npos;
}

// The libraries the dynamic loader reported opening (LD_DEBUG=libs): "find library=NAME" for each one it
// looked up by name, "calling init: PATH" for each one it initialised, from start to exit, dlopen included.
std::vector<std::string> loaded_libraries(const std::string& loader_trace) {
  std::vector<std::string> libraries;
  std::istringstream lines(loader_trace);
  for (std::string line; std::getline(lines, line);) {
    for (const std::string key : {"find library=", "calling init: "}) {
      const size_t at = line.find(key);
      if (at == std::string::npos) continue;
      std::string name = line.substr(at + key.size());
      name = name.substr(0, name.find(" ["));  // "find library=libm.so.6 [0]; searching"
      name = name.substr(0, name.find(';'));
      libraries.push_back(name);
    }
  }
  return libraries;
}

void expect_no_cuda_library_loaded(const std::string& args) {
  const test::CommandResult r = test::run_canvas(args, /*merge_stderr=*/true, "LD_DEBUG=libs");
  ASSERT_EQ(r.exit_code, 0) << r.output.substr(r.output.size() > 4000 ? r.output.size() - 4000 : 0);
  const std::vector<std::string> libraries = loaded_libraries(r.output);
  bool libc = false;
  for (const std::string& library : libraries) {
    EXPECT_FALSE(names_cuda(library)) << "canvas " << args << " loaded " << library;
    libc |= std::filesystem::path(library).filename().string().rfind("libc.so", 0) == 0;
  }
  EXPECT_TRUE(libc) << "the loader's trace lists no libc: LD_DEBUG=libs gave nothing to check";
}

TEST(DeviceModuleCli, VersionLoadsNoCudaLibrary) {
  expect_no_cuda_library_loaded("--version");
}

TEST(DeviceModuleCli, CpuGenerateLoadsNoCudaLibrary) {
  expect_no_cuda_library_loaded("generate -m " + test::source_path("models/text-dg.gguf") +
                                " -p hi -n 4 -s 1");
}

// A running CPU server: no mapping of its process is a CUDA library.
TEST(DeviceModuleCli, CpuServeMapsNoCudaLibrary) {
  test::ServerProcess server("");
  ASSERT_NE(server.port(), 0) << server.log();
  const std::string maps = test::read_text("/proc/" + std::to_string(server.pid()) + "/maps");
  ASSERT_NE(maps.find("libc.so"), std::string::npos) << maps;
  std::istringstream lines(maps);
  for (std::string line; std::getline(lines, line);) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;  // anonymous memory, [heap], [stack]
    EXPECT_FALSE(names_cuda(line.substr(slash))) << line;
  }
}

// --device cuda where it cannot run: exit status 1 (no crash) and a message naming what is missing.
test::CommandResult generate_on_cuda(const std::string& env = "") {
  return test::run_canvas(
      "generate -m " + test::source_path("models/text-dg.gguf") + " -p hi -n 4 --device cuda", true, env);
}

TEST(DeviceModuleCli, CudaWithoutTheModuleNamesThePathTried) {
  const test::CommandResult r = generate_on_cuda("CANVAS_CUDA_MODULE=/nonexistent/libcanvas-cuda.so");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  if (cuda_module::built()) {
    EXPECT_NE(r.output.find("the CUDA module libcanvas-cuda.so was not found; tried:\n  "
                            "/nonexistent/libcanvas-cuda.so: no such file"),
              std::string::npos)
        << r.output;
  } else {
    EXPECT_NE(r.output.find("this canvas was built without the CUDA module"), std::string::npos) << r.output;
  }
}

TEST(DeviceModuleCli, CudaWithAModuleOfAnotherVersionIsRefused) {
  if (!cuda_module::built()) GTEST_SKIP() << "this build has no CUDA module";
  const test::CommandResult r =
      generate_on_cuda(std::string("CANVAS_CUDA_MODULE=") + CANVAS_STALE_CUDA_MODULE);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("is version " + std::to_string(cuda_module::kVersion + 1) +
                          ", this canvas needs version " + std::to_string(cuda_module::kVersion)),
            std::string::npos)
      << r.output;
}

// The module beside the binary, on this machine: without a driver or a GPU it says which is missing; on a
// GPU machine the command runs.
TEST(DeviceModuleCli, CudaWithoutADeviceSaysWhatIsMissing) {
  const test::CommandResult r = generate_on_cuda();
  if (r.exit_code == 0) GTEST_SKIP() << "a CUDA device is usable here";
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--device cuda: "), std::string::npos) << r.output;
  if (cuda_module::built()) {
    const bool named =
        r.output.find("no NVIDIA driver: the CUDA driver library cannot be loaded (libcuda.so.1") !=
            std::string::npos ||
        r.output.find("no usable CUDA driver or device (the NVIDIA driver supports CUDA") !=
            std::string::npos ||
        r.output.find("no CUDA device") != std::string::npos ||
        r.output.find("cannot load the CUDA module") != std::string::npos;
    EXPECT_TRUE(named) << r.output;
  }
}

// --cpu-moe / --n-cpu-moe keep experts in RAM beside a GPU: refused on a CPU run (every command that
// takes --device), together, or with a negative N, before any model is loaded.
TEST(DeviceModuleCli, CpuMoeWithoutTheGpuIsRefused) {
  const std::string model = " -m " + test::source_path("models/text-dg.gguf");
  const std::string need = " keeps the experts in RAM while the rest runs on the GPU; it needs --device cuda";
  const std::vector<std::string> commands = {"generate" + model + " -p hi -n 2", "chat" + model + " -n 2 </dev/null",
                                            "bench --synthetic llada-moe:tiny --quick --modes ar",
                                            "serve --port 0" + model, "score" + model + " -p hi"};
  for (const std::string& command : commands) {
    for (const std::string flag : {"--cpu-moe", "--n-cpu-moe 2"}) {
      const test::CommandResult r = test::run_canvas(command + " " + flag);
      EXPECT_EQ(r.exit_code, 1) << command << " " << flag << ": " << r.output;
      EXPECT_NE(r.output.find(flag.substr(0, flag.find(' ')) + need), std::string::npos)
          << command << " " << flag << ": " << r.output;
    }
  }
  const test::CommandResult both = test::run_canvas("generate" + model + " -p hi --device cuda --cpu-moe --n-cpu-moe 2");
  EXPECT_EQ(both.exit_code, 1) << both.output;
  EXPECT_NE(both.output.find("--cpu-moe keeps every layer's experts in RAM, --n-cpu-moe N the first N layers': give "
                             "one of them"),
            std::string::npos)
      << both.output;
  const test::CommandResult negative = test::run_canvas("generate" + model + " -p hi --device cuda --n-cpu-moe -1");
  EXPECT_EQ(negative.exit_code, 1) << negative.output;
  EXPECT_NE(negative.output.find("--n-cpu-moe: N is a number of layers, 0 or more"), std::string::npos)
      << negative.output;
  const test::CommandResult word = test::run_canvas("generate" + model + " -p hi --device cuda --n-cpu-moe all");
  EXPECT_EQ(word.exit_code, 1) << word.output;
  EXPECT_NE(word.output.find("'all' is not an integer"), std::string::npos) << word.output;
}

// --help of each command that takes --device documents both spellings.
TEST(DeviceModuleCli, CpuMoeIsInTheHelp) {
  for (const char* command : {"generate", "chat", "bench", "serve", "score"}) {
    const test::CommandResult r = test::run_canvas(std::string(command) + " --help");
    EXPECT_EQ(r.exit_code, 0) << command;
    EXPECT_NE(r.output.find("--cpu-moe"), std::string::npos) << command << ": " << r.output;
    EXPECT_NE(r.output.find("--n-cpu-moe N"), std::string::npos) << command << ": " << r.output;
  }
}

// A model without experts with --device cuda --cpu-moe: a warning that every layer runs on the GPU (here the
// command then fails for want of a GPU; on a GPU machine it runs).
TEST(DeviceModuleCli, CpuMoeOnADenseModelWarns) {
  const test::CommandResult r =
      test::run_canvas("generate -m " + test::fixture("tiny-llada.gguf") + " -p hi -n 2 --device cuda --cpu-moe");
  if (!cuda_module::built()) GTEST_SKIP() << "this build has no CUDA module";
  EXPECT_NE(r.output.find("--cpu-moe / --n-cpu-moe: 'llada' has no experts (a dense model); every layer runs on the "
                          "GPU"),
            std::string::npos)
      << r.output;
}

// ---- the loader in-process ----

TEST(CudaModuleLoader, MissingModuleNamesEveryPathTried) {
  const std::string e = test::error_of([] {
    cuda_module::load({"/nonexistent/a/x.so", "/nonexistent/b/x.so"});
  });
  EXPECT_NE(
      e.find(
          "was not found; tried:\n  /nonexistent/a/x.so: no such file\n  /nonexistent/b/x.so: no such file"),
      std::string::npos)
      << e;
}

TEST(CudaModuleLoader, FileThatIsNotALibraryGivesTheLoadersReason) {
  test::TempDir dir;
  const std::string path = dir.path("libcanvas-cuda.so");
  std::ofstream(path) << "not an ELF file\n";
  const std::string e = test::error_of([&] { cuda_module::load({path, "/nonexistent/x.so"}); });
  EXPECT_NE(e.find("cannot load the CUDA module " + path + ": " + path + ": "), std::string::npos) << e;
  EXPECT_EQ(e.find("cuBLAS"), std::string::npos)
      << e;  // no library of the module's is missing: no word of one
}

// The built module (beside this test binary) as on a machine without cuBLAS: a copy whose libcublas.so.N
// dependency is renamed to a version no machine has.
TEST(CudaModuleLoader, ModuleWithoutCublasNamesTheMissingLibrary) {
  const std::string built =
      (std::filesystem::read_symlink("/proc/self/exe").parent_path() / cuda_module::kFileName).string();
  if (!cuda_module::built() || !std::filesystem::exists(built))
    GTEST_SKIP() << "this build has no CUDA module";
  std::string bytes = test::read_text(built);
  const std::string needed = "libcublas.so.";
  const size_t at = bytes.find(needed);
  ASSERT_NE(at, std::string::npos);
  size_t end = at + needed.size();
  while (end < bytes.size() && std::isdigit(static_cast<unsigned char>(bytes[end]))) bytes[end++] = '9';
  ASSERT_GT(end, at + needed.size());
  const std::string missing = bytes.substr(at, end - at);
  test::TempDir dir;
  const std::string path = dir.path("libcanvas-cuda.so");
  std::ofstream(path, std::ios::binary) << bytes;
  const std::string e = test::error_of([&] { cuda_module::load({path}); });
  EXPECT_NE(
      e.find("cannot load the CUDA module " + path + ": " + missing + ": cannot open shared object file"),
      std::string::npos)
      << e;
  EXPECT_NE(e.find("the module needs cuBLAS"), std::string::npos) << e;
}

TEST(CudaModuleLoader, LibraryWithoutTheEntryPointIsNotAModule) {
  // libstdc++, which this process maps: a real shared library that is no canvas module.
  std::string library;
  std::istringstream lines(test::read_text("/proc/self/maps"));
  for (std::string line; std::getline(lines, line) && library.empty();)
    if (line.find("/libstdc++.so") != std::string::npos) library = line.substr(line.find('/'));
  ASSERT_FALSE(library.empty());
  const std::string e = test::error_of([&] { cuda_module::load({library}); });
  EXPECT_NE(e.find(library + " is not a canvas CUDA module (no canvas_cuda_module symbol)"),
            std::string::npos)
      << e;
}

TEST(CudaModuleLoader, ModuleOfAnotherVersionIsRefused) {
  const std::string e = test::error_of([] { cuda_module::load({CANVAS_STALE_CUDA_MODULE}); });
  EXPECT_NE(e.find(std::string("the CUDA module ") + CANVAS_STALE_CUDA_MODULE + " is version " +
                   std::to_string(cuda_module::kVersion + 1) + ", this canvas needs version " +
                   std::to_string(cuda_module::kVersion) + ": rebuild or reinstall it"),
            std::string::npos)
      << e;
}

// Beside the running binary first, then LIBDIR/canvas beside its BINDIR, then the configured LIBDIR/canvas;
// $CANVAS_CUDA_MODULE alone when set.
TEST(CudaModuleLoader, SearchesBesideTheBinaryThenTheInstallDirectory) {
  const char* before = std::getenv("CANVAS_CUDA_MODULE");
  const std::string saved = before ? before : "";
  unsetenv("CANVAS_CUDA_MODULE");
  const std::vector<std::string> paths = cuda_module::search_paths();
  const std::filesystem::path dir = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  ASSERT_EQ(paths.size(), 3u);
  EXPECT_EQ(paths[0], (dir / "libcanvas-cuda.so").string());
  EXPECT_TRUE(paths[1].starts_with(dir.parent_path().string() + "/lib")) << paths[1];
  for (size_t i = 1; i < 3; ++i) EXPECT_TRUE(paths[i].ends_with("/canvas/libcanvas-cuda.so")) << paths[i];
  setenv("CANVAS_CUDA_MODULE", "/somewhere/else.so", 1);
  EXPECT_EQ(cuda_module::search_paths(), std::vector<std::string>{"/somewhere/else.so"});
  if (before)
    setenv("CANVAS_CUDA_MODULE", saved.c_str(), 1);
  else
    unsetenv("CANVAS_CUDA_MODULE");
}

}  // namespace
}  // namespace canvas
