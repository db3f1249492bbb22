// --device: where a command's forward passes run (the CPU, or the CUDA backend when this build has it).
#pragma once
#include <string>

#include "model/model.h"

namespace canvas::cli {

// The --device option's help line, shared by the commands that take it.
inline constexpr const char* kDeviceHelp =
    "cpu (default) or cuda: run the forward passes on the first CUDA GPU (a build with the CUDA\n"
    "backend; weights are uploaded once: f32 and bf16 as stored, other types as f16)";

// "cpu": nothing; "cuda": sets model.backend to the CUDA backend and reports the device on stderr.
// Throws Error for another name, for cuda in a build without the backend and when no GPU is usable.
void use_device(Model& model, const std::string& device);

}  // namespace canvas::cli
