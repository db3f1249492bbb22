// Putting a model's forward passes on the device chosen (cuda/device_choice.h).
#include "cuda/device_choice.h"

#include <algorithm>
#include <climits>
#include <cstdio>

#include "core/error.h"
#include "cuda/cuda_module.h"

namespace canvas {

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

}  // namespace canvas
