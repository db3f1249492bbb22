// Where a command's forward passes run: the CPU, or the CUDA backend of the module (cuda/cuda_module.h),
// with the experts of some layers kept on the CPU. Built into the canvas binary, as the loader is.
#pragma once
#include <cstdint>
#include <string>

#include "model/model.h"

namespace canvas {

// --device, and the layers whose experts stay on the CPU.
struct DeviceChoice {
  std::string device = "cpu";
  int64_t moe_layers_on_cpu = 0;  // --n-cpu-moe N; --cpu-moe: every layer (INT64_MAX)
};
// The device as a cost model's key names it: "cpu", "cuda", "cuda --cpu-moe" or "cuda --n-cpu-moe N" (the
// experts' side changes every pass's time).
std::string device_label(const DeviceChoice& choice);

// "cpu": nothing; "cuda": sets model.primitives to the CUDA backend (the experts of the chosen layers kept
// on the CPU; a model without experts gets a warning that nothing stays there) and reports the device on
// stderr. Throws Error for another name, for cuda in a build without the module, when the module or a
// library it needs cannot be loaded (the message names it and the paths tried) and when no GPU is usable.
void use_device(Model& model, const DeviceChoice& choice);

}  // namespace canvas
