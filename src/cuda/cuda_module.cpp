// The module's entry point (cuda/cuda_module.h): the table of the backend's functions, each catching what
// the backend throws so that only plain data and the PrimitiveBackend object leave the module.
#include "cuda/cuda_module.h"

#include <cstdio>
#include <exception>
#include <memory>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_ops.h"
#include "cuda/cuda_roofs.h"

namespace canvas::cuda_module {
namespace {

void put(Message* out, const std::string& text) {
  if (out) std::snprintf(out->text, sizeof(out->text), "%s", text.c_str());
}

// Runs fn; false with the exception's message in `error` when it throws.
template <typename Fn>
bool guarded(Message* error, Fn&& fn) {
  try {
    fn();
    return true;
  } catch (const std::exception& e) {
    put(error, e.what());
  } catch (...) {
    put(error, "unknown error in the CUDA module");
  }
  return false;
}

bool available(Message* why) {
  std::string reason;
  const bool ok = cuda::available(&reason);
  if (!ok) put(why, reason);
  return ok;
}

PrimitiveBackend* make_backend(const Model* model, const cuda::BackendOptions* options, Message* error) {
  std::unique_ptr<PrimitiveBackend> backend;
  if (!guarded(error, [&] { backend = cuda::make_backend(*model, *options); })) return nullptr;
  return backend.release();  // the caller owns it
}

bool device_name(Message* name, Message* error) {
  return guarded(error, [&] { put(name, cuda::device_name()); });
}

bool device_memory(int64_t* total_bytes, int64_t* free_bytes, Message* error) {
  return guarded(error, [&] {
    const cuda::DeviceMemory m = cuda::device_memory();
    *total_bytes = m.total_bytes;
    *free_bytes = m.free_bytes;
  });
}

bool take_profile(ProfileSink sink, void* context, Message* error) {
  return guarded(error, [&] {
    for (const cuda::OpTime& t : cuda::take_profile()) sink(context, t.name.c_str(), t.depth, t.ms, t.spans);
  });
}

bool measure_read_bandwidth(int64_t bytes, double* gbps, int64_t* buffer_bytes, Message* error) {
  return guarded(error, [&] {
    const cuda::DeviceReadRoof roof = cuda::measure_device_read_bandwidth(bytes);
    *gbps = roof.gbps;
    *buffer_bytes = roof.buffer_bytes;
  });
}

bool measure_gemm_rate(bool f16, int64_t size, double* tflops, Message* error) {
  return guarded(error, [&] {
    *tflops = cuda::measure_device_gemm_rate(f16 ? cuda::GemmPrecision::F16 : cuda::GemmPrecision::F32, size)
                  .tflops;
  });
}

Table make_table() {
  Table t;
  t.available = available;
  t.make_backend = make_backend;
  t.runs_primitive = [](int p) { return p >= 0 && p < kPrimitives && cuda::runs_primitive(Primitive(p)); };
  t.device_name = device_name;
  t.device_memory = device_memory;
  t.device_buffer_peak_bytes = [] { return cuda::device_buffer_peak_bytes(); };
  t.set_profiling = [](bool on) { cuda::set_profiling(on); };
  t.take_profile = take_profile;
  t.measure_read_bandwidth = measure_read_bandwidth;
  t.measure_gemm_rate = measure_gemm_rate;
  return t;
}

}  // namespace
}  // namespace canvas::cuda_module

extern "C" __attribute__((visibility("default"))) const canvas::cuda_module::Table* canvas_cuda_module() {
  static const canvas::cuda_module::Table table = canvas::cuda_module::make_table();
  return &table;
}
