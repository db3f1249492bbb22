// --device: where a command's forward passes run (cuda/device_choice.h), its options' help and their reading.
#pragma once
#include <cstdint>
#include <string>

#include "cli/options.h"
#include "cuda/device_choice.h"
#include "model/model.h"

namespace canvas::cli {

// The --device option's help line, shared by the commands that take it.
inline constexpr const char* kDeviceHelp =
    "cpu (default) or cuda: run the forward passes on the first CUDA GPU (loads the CUDA module\n"
    "libcanvas-cuda.so from beside canvas, LIBDIR/canvas or $CANVAS_CUDA_MODULE; weights are uploaded\n"
    "once: f32, bf16 and the quantised types Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K as stored,\n"
    "other types as f16)";

// --check-weights: the option's help line, and the full scan it asks for (model/weight_check.h), its
// error naming `path` and its time reported on stderr. Every load already runs the sampled scan.
inline constexpr const char* kCheckWeightsHelp =
    "read every weight at load and refuse NaN or Inf (without it canvas reads every row of tensors up to\n"
    "4 MiB and 256 rows of each larger one)";
void check_all_weights(const Model& model, const std::string& path);

// --cpu-moe and --n-cpu-moe N (llama.cpp's spellings): the option rows' help, beside --device's.
inline constexpr const char* kCpuMoeHelp =
    "with --device cuda: keep every layer's experts (the MoE feed-forward) in RAM and run them\n"
    "on the CPU, the rest on the GPU; their weights are not uploaded (a 26B-A4B on a 12-16 GB\n"
    "card: the experts are most of its bytes)";
inline constexpr const char* kNCpuMoeHelp =
    "with --device cuda: the same for the experts of the first N layers only (0: none)";

// The choice of a command's --device, --cpu-moe and --n-cpu-moe. Throws Error for --cpu-moe or
// --n-cpu-moe without --device cuda (the experts stay in RAM only beside a GPU), for both given at once,
// and for a negative N.
DeviceChoice device_choice(const Args& args);

}  // namespace canvas::cli
