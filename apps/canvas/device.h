// --device: where a command's forward passes run (the CPU, or the CUDA backend when this build has it).
#pragma once
#include <string>

#include "model/model.h"

namespace canvas::cli {

// The --device option's help line, shared by the commands that take it.
inline constexpr const char* kDeviceHelp =
    "cpu (default) or cuda: run the forward passes on the first CUDA GPU (a build with the CUDA\n"
    "backend; weights are uploaded once: f32 and bf16 as stored, other types as f16)";

// --check-weights: the option's help line, and the full scan it asks for (model/weight_check.h), its
// error naming `path` and its time reported on stderr. Every load already runs the sampled scan.
inline constexpr const char* kCheckWeightsHelp =
    "read every weight at load and refuse NaN or Inf (without it canvas reads every row of tensors up to\n"
    "4 MiB and 256 rows of each larger one)";
void check_all_weights(const Model& model, const std::string& path);

// "cpu": nothing; "cuda": sets model.backend to the CUDA backend and reports the device on stderr.
// Throws Error for another name, for cuda in a build without the backend and when no GPU is usable.
void use_device(Model& model, const std::string& device);

}  // namespace canvas::cli
