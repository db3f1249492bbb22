#include "device.h"

#include <algorithm>
#include <climits>
#include <cstdio>

#include "core/error.h"
#include "core/timer.h"
#include "cuda/cuda_module.h"
#include "model/weight_check.h"

namespace canvas::cli {

void check_all_weights(const Model& model, const std::string& path) {
  const double t0 = now_ms();
  const int64_t read = check_weights_finite(model, WeightScan::Full, path);
  std::fprintf(stderr, "--check-weights: %lld weights finite (%.0f ms)\n", static_cast<long long>(read),
               now_ms() - t0);
}

DeviceChoice device_choice(const Args& args) {
  DeviceChoice choice;
  choice.device = args.get("device", "cpu");
  check(!(args.has("cpu-moe") && args.has("n-cpu-moe")),
        "--cpu-moe keeps every layer's experts in RAM, --n-cpu-moe N the first N layers': give one of them");
  if (args.has("n-cpu-moe")) {
    choice.moe_layers_on_cpu = args.get_int("n-cpu-moe", 0);
    check(choice.moe_layers_on_cpu >= 0, "--n-cpu-moe: N is a number of layers, 0 or more");
  }
  if (args.has("cpu-moe")) choice.moe_layers_on_cpu = INT64_MAX;
  for (const char* flag : {"cpu-moe", "n-cpu-moe"})
    check(!args.has(flag) || choice.device == "cuda",
          std::string("--") + flag + " keeps the experts in RAM while the rest runs on the GPU; it needs --device cuda");
  return choice;
}

std::string device_label(const DeviceChoice& choice) {
  if (choice.moe_layers_on_cpu == 0) return choice.device;
  if (choice.moe_layers_on_cpu == INT64_MAX) return choice.device + " --cpu-moe";
  return choice.device + " --n-cpu-moe " + std::to_string(choice.moe_layers_on_cpu);
}

void use_device(Model& model, const DeviceChoice& choice) {
  if (choice.device == "cpu") return;
  check(choice.device == "cuda", "--device: unknown device '" + choice.device + "' (cpu or cuda)");
  const ModelConfig& c = model.config;
  cuda::BackendOptions options;
  if (choice.moe_layers_on_cpu > 0 && !c.is_moe()) {
    std::fprintf(stderr, "canvas: warning: --cpu-moe / --n-cpu-moe: '%s' has no experts (a dense model); every "
                 "layer runs on the GPU\n", c.arch.c_str());
  } else {
    options.moe_layers_on_cpu = std::min(choice.moe_layers_on_cpu, c.n_layers);
  }
  model.primitives = cuda_module::make_backend(cuda_module::module(), model, options);
  std::fprintf(stderr, "device: %s\n", model.primitives->name().c_str());
  if (options.moe_layers_on_cpu > 0)
    std::fprintf(stderr, "device: the experts of %lld of %lld layers stay in RAM and run on the CPU\n",
                 static_cast<long long>(options.moe_layers_on_cpu), static_cast<long long>(c.n_layers));
}

bench::DeviceFloors measure_device_floors(bool measure_roofs, bool quick) {
  const cuda_module::Table& cuda = cuda_module::module();
  cuda_module::Message name, error;
  cuda_module::check_call(cuda.device_name(&name, &error), error);
  bench::DeviceFloors d;
  d.name = name.text;
  int64_t free_bytes = 0;
  cuda_module::check_call(cuda.device_memory(&d.memory_total_bytes, &free_bytes, &error), error);
  d.memory_used_bytes = d.memory_peak_bytes = d.memory_total_bytes - free_bytes;
  const cuda_module::Table* module = &cuda;  // loaded once, never unloaded
  d.memory_in_use = [module] {
    int64_t total = 0, free = 0;
    cuda_module::Message e;
    cuda_module::check_call(module->device_memory(&total, &free, &e), e);
    return total - free;
  };
  d.buffers_peak = [module] { return module->device_buffer_peak_bytes(); };
  d.profile = [module](const std::function<void()>& pass) {
    std::vector<bench::DeviceOpTime> ops;
    const auto sink = [](void* context, const char* op, int depth, double ms, int64_t spans) {
      static_cast<std::vector<bench::DeviceOpTime>*>(context)->push_back({op, depth, ms, spans});
    };
    cuda_module::Message e;
    cuda_module::check_call(module->take_profile(sink, &ops, &e), e);  // drops what came before
    ops.clear();
    module->set_profiling(true);
    try {
      pass();
      cuda_module::check_call(module->take_profile(sink, &ops, &e), e);
    } catch (...) {
      module->set_profiling(false);
      throw;
    }
    module->set_profiling(false);
    return ops;
  };
  if (!measure_roofs) {
    d.not_measured = "--no-roofs";
    return d;
  }
  try {
    const double t0 = now_ms();
    const int64_t size = quick ? 2048 : 8192;
    double read_gbps = 0, f16 = 0, f32 = 0;
    int64_t read_bytes = 0;
    cuda_module::check_call(
        cuda.measure_read_bandwidth(int64_t(quick ? 256 : 4096) << 20, &read_gbps, &read_bytes, &error),
        error);
    cuda_module::check_call(cuda.measure_gemm_rate(true, size, &f16, &error), error);
    cuda_module::check_call(cuda.measure_gemm_rate(false, size, &f32, &error), error);
    d.read_gbps = read_gbps;  // all three or none: a roof that fails leaves the floors NaN
    d.read_buffer_bytes = read_bytes;
    d.gemm_size = size;
    d.gemm_f16_tflops = f16;
    d.gemm_f32_tflops = f32;
    std::fprintf(stderr, "canvas bench: device floors in %.1f s\n", (now_ms() - t0) / 1000);
  } catch (const Error& e) {
    d.not_measured = e.what();
  }
  return d;
}

}  // namespace canvas::cli
