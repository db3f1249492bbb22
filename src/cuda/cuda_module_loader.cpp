// Finding, opening and checking the CUDA module (cuda/cuda_module.h). Built into the canvas binary in every
// build, CPU-only ones too; nothing here needs a CUDA header or library.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "core/error.h"
#include "cuda/cuda_module.h"

#ifndef CANVAS_CUDA_MODULE_BUILT
#define CANVAS_CUDA_MODULE_BUILT 0
#endif
#ifndef CANVAS_CUDA_MODULE_DIR
#define CANVAS_CUDA_MODULE_DIR "/usr/local/lib/canvas"
#endif
#ifndef CANVAS_CUDA_MODULE_RELATIVE_DIR  // LIBDIR/canvas from BINDIR
#define CANVAS_CUDA_MODULE_RELATIVE_DIR "../lib/canvas"
#endif

namespace canvas::cuda_module {
namespace {

std::string executable_directory() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

std::string layout_text(const Layout& l) {
  return "Model " + std::to_string(l.model) + ", ModelConfig " + std::to_string(l.model_config) +
         ", KvCache " + std::to_string(l.kv_cache) + ", ForwardRequest " + std::to_string(l.forward_request) +
         ", ForwardPlan " + std::to_string(l.forward_plan) + ", TensorView " + std::to_string(l.tensor_view) +
         ", PrimitiveBackend " + std::to_string(l.primitive_backend) + ", BackendOptions " +
         std::to_string(l.backend_options) + " bytes";
}

}  // namespace

bool built() {
  return CANVAS_CUDA_MODULE_BUILT;
}

std::vector<std::string> search_paths() {
  if (const char* env = std::getenv("CANVAS_CUDA_MODULE"); env && *env) return {env};
  std::vector<std::string> paths;
  const auto add = [&](const std::filesystem::path& dir) {
    const std::string path = (dir / kFileName).lexically_normal().string();
    if (std::find(paths.begin(), paths.end(), path) == paths.end()) paths.push_back(path);
  };
  // Beside the binary (a build tree), then LIBDIR/canvas of the prefix the binary is installed in (an
  // install moved with --prefix or DESTDIR), then of the prefix it was configured for.
  if (const std::string dir = executable_directory(); !dir.empty()) {
    add(dir);
    add(std::filesystem::path(dir) / CANVAS_CUDA_MODULE_RELATIVE_DIR);
  }
  add(CANVAS_CUDA_MODULE_DIR);
  return paths;
}

const Table& load(const std::vector<std::string>& paths) {
  std::string tried;
  for (const std::string& path : paths) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      tried += "\n  " + path + ": no such file";
      continue;
    }
    // RTLD_LOCAL: the module's symbols stay its own; it exports only the entry point anyway.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* error = dlerror();
      const std::string why = error ? error : "unknown dlopen error";
      // A library the module needs (it links cuBLAS; the CUDA runtime is inside it) is not installed.
      const bool dependency = why.find("cannot open shared object file") != std::string::npos;
      throw Error("--device cuda: cannot load the CUDA module " + path + ": " + why +
                  (dependency
                       ? "\n(the module needs cuBLAS, libcublas and libcublasLt of the CUDA toolkit it was "
                         "built with, on the loader's path: install it, or add its directory, e.g. "
                         "/usr/local/cuda/lib64, to LD_LIBRARY_PATH)"
                       : ""));
    }
    auto entry = reinterpret_cast<EntryPoint>(dlsym(handle, kEntryPoint));
    if (!entry) {
      dlclose(handle);
      throw Error("--device cuda: " + path + " is not a canvas CUDA module (no " + kEntryPoint + " symbol)");
    }
    const Table* table = entry();
    if (!table || table->version != kVersion) {
      // The module stays open: unloading code that might have started threads is not worth the risk.
      throw Error("--device cuda: the CUDA module " + path + " is version " +
                  (table ? std::to_string(table->version) : std::string("(none)")) +
                  ", this canvas needs version " + std::to_string(kVersion) +
                  ": rebuild or reinstall it with this canvas");
    }
    const Layout mine;
    if (table->table_bytes != sizeof(Table) || !(table->layout == mine)) {
      throw Error("--device cuda: the CUDA module " + path +
                  " was built from other sources than this canvas (" + layout_text(table->layout) +
                  "; here " + layout_text(mine) + "): rebuild or reinstall it with this canvas");
    }
    return *table;
  }
  throw Error("--device cuda: the CUDA module " + std::string(kFileName) + " was not found; tried:" + tried +
              (std::getenv("CANVAS_CUDA_MODULE")
                   ? ""
                   : "\n(set CANVAS_CUDA_MODULE=/path/to/" + std::string(kFileName) + " to name it)"));
}

const Table& module() {
  if (!built())
    throw Error("--device cuda: this canvas was built without the CUDA module (" + std::string(kFileName) +
                "): rebuild where nvcc and cuBLAS are installed, or with -DCANVAS_CUDA=ON");
  // Loaded once; a failure is not remembered, so that the error names what is missing every time.
  static std::mutex mutex;
  static const Table* table = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (!table) table = &load(search_paths());
  return *table;
}

void check_call(bool ok, const Message& error) {
  if (!ok) throw Error(error.text[0] ? error.text : "the CUDA module failed without a message");
}

std::shared_ptr<PrimitiveBackend> make_backend(const Table& module, const Model& model,
                                               const cuda::BackendOptions& options) {
  Message error;
  PrimitiveBackend* backend = module.make_backend(&model, &options, &error);
  check_call(backend != nullptr, error);
  return std::shared_ptr<PrimitiveBackend>(backend);
}

}  // namespace canvas::cuda_module
