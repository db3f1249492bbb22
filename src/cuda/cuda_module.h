// The CUDA backend as a module loaded when asked for (--device cuda): the table of plain functions the module
// exports (cuda_module.cpp, built into libcanvas-cuda.so with the rest of src/cuda/) and the loader that
// finds, opens and checks it (cuda_module_loader.cpp, built into the canvas binary, which links no CUDA
// library).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_backend.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/placement.h"

namespace canvas::cuda_module {

// The module's file name: next to the canvas binary in a build tree, in LIBDIR/canvas once installed.
inline constexpr const char* kFileName = "libcanvas-cuda.so";
// The one symbol the module exports: `const Table* canvas_cuda_module()`.
inline constexpr const char* kEntryPoint = "canvas_cuda_module";
// Bumped whenever Table changes; a module of another version is refused. 2: the backend is a
// PrimitiveBackend (the executor of model/transformer.h), made with BackendOptions; runs_primitive.
inline constexpr uint32_t kVersion = 2;

// What a failed call says, filled by the module (a fixed buffer: nothing allocated on one side is freed
// on the other).
struct Message {
  char text[2048] = {};
};

// The sizes of the structures the module reads from canvas's memory: a module built from other sources
// (another checkout, an older install) is refused when one differs, even when nobody bumped kVersion.
struct Layout {
  uint32_t model = sizeof(Model), model_config = sizeof(ModelConfig), kv_cache = sizeof(KvCache),
           forward_request = sizeof(ForwardRequest), forward_plan = sizeof(ForwardPlan),
           tensor_view = sizeof(TensorView), primitive_backend = sizeof(PrimitiveBackend),
           backend_options = sizeof(cuda::BackendOptions);
  bool operator==(const Layout&) const = default;
};

// One finished profiling path (cuda/cuda_ops.h OpTime); `name` lives until the sink returns.
using ProfileSink = void (*)(void* context, const char* name, int depth, double ms, int64_t spans);

// Everything canvas calls in the module: plain data and function pointers, plus the PrimitiveBackend object
// that make_backend returns (model/placement.h's virtual interface, and the executors it makes; deleting it
// frees its device memory). The functions never throw: a false return (or null) comes with `error` filled.
struct Table {
  uint32_t version = kVersion;  // these two first in every version, so that any module can be checked
  uint32_t table_bytes = sizeof(Table);
  Layout layout;
  // True when a CUDA device can be used; otherwise false with why (no driver, driver too old, no device).
  bool (*available)(Message* why);
  // cuda/cuda_backend.h make_backend: uploads the model's weights (those options leave in RAM excepted);
  // the caller owns the result.
  PrimitiveBackend* (*make_backend)(const Model* model, const cuda::BackendOptions* options, Message* error);
  // cuda/cuda_backend.h runs_primitive (Primitive as an int): what the executor runs, asked without a device.
  bool (*runs_primitive)(int primitive);
  bool (*device_name)(Message* name, Message* error);
  bool (*device_memory)(int64_t* total_bytes, int64_t* free_bytes, Message* error);
  int64_t (*device_buffer_peak_bytes)();
  void (*set_profiling)(bool on);
  // The profile since the last call, path by path (cuda_ops.h take_profile); clears it.
  bool (*take_profile)(ProfileSink sink, void* context, Message* error);
  // cuda/cuda_roofs.h: a streaming read of `bytes` and an n x n x n GEMM (f16 inputs, or f32).
  bool (*measure_read_bandwidth)(int64_t bytes, double* gbps, int64_t* buffer_bytes, Message* error);
  bool (*measure_gemm_rate)(bool f16, int64_t size, double* tflops, Message* error);
};

using EntryPoint = const Table* (*)();

// ---- the loader (in the canvas binary) ----

// Where the module is looked for, in order: $CANVAS_CUDA_MODULE alone when set (a path to the file); else
// the canvas binary's own directory (/proc/self/exe), then LIBDIR/canvas beside the BINDIR it is in, then
// the configured install directory LIBDIR/canvas.
std::vector<std::string> search_paths();
// Opens the first of `paths` that exists and checks its version and layout. Throws Error saying what is
// missing: every path tried with the loader's reason (dlerror: the module absent, or a library it needs,
// cuBLAS or the CUDA runtime, not found), a missing entry point, or a module of another version.
const Table& load(const std::vector<std::string>& paths);
// The module from search_paths(), loaded once per process and never unloaded (the backends it made
// live in it). Throws as load() does, and in a build without the CUDA module.
const Table& module();
// Whether this build made the module (-DCANVAS_CUDA=ON with nvcc and cuBLAS found).
bool built();

// The table's calls as C++: make_backend throws Error with the module's message, as check_call does
// when `ok` is false.
std::shared_ptr<PrimitiveBackend> make_backend(const Table& module, const Model& model,
                                               const cuda::BackendOptions& options = {});
void check_call(bool ok, const Message& error);

}  // namespace canvas::cuda_module
