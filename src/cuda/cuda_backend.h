// The CUDA forward: a ForwardBackend (model/model.h) that runs a Model's forward passes on device 0 with
// the kernels of cuda/cuda_ops.h. Setting it as model.backend moves every forward() of that model
// there, so AR, masked diffusion and DiffusionGemma's sampler run unchanged above it (--device cuda).
#pragma once
#include <memory>
#include <string>

#include "model/model.h"

namespace canvas::cuda {

// Uploads the model's weights to the device once (ops/matmul types as cuda_ops.h's DeviceMatrix
// stores them: f32, bf16, everything else as f16) and returns the backend. Each KvCache used with it
// gets device K/V on first use (its backend_state, freed with it). Throws Error when no device is usable.
std::shared_ptr<ForwardBackend> make_backend(const Model& model);

// Device bytes of one KvCache of `capacity` positions on this backend (K and V of every layer, f32, in the
// host cache's layout, plus the visibility groups).
int64_t device_cache_bytes(const ModelConfig& c, int64_t capacity);

}  // namespace canvas::cuda
