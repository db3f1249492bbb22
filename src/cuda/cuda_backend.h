// The CUDA forward: a ForwardBackend (model/model.h) that runs a Model's forward passes on device 0 with
// the kernels of cuda/cuda_ops.h. Setting it as model.backend moves every forward() of that model
// there, so AR, masked diffusion and DiffusionGemma's sampler run unchanged above it (--device cuda).
#pragma once
#include <memory>
#include <string>

#include "cuda/cuda_ops.h"
#include "model/model.h"

namespace canvas::cuda {

// Uploads the model's weights to the device once (ops/matmul types as cuda_ops.h's DeviceMatrix
// stores them: f32, bf16, everything else as f16) and returns the backend. Each KvCache used with it
// gets device K/V on first use (its backend_state, freed with it). Throws Error when no device is usable.
std::shared_ptr<ForwardBackend> make_backend(const Model& model);

// The element type of the backend's KV caches for this model: f32 when its attention weights are f32 (the
// CPU's arithmetic, for exact twins), else f16 (half the memory; the rounding is far below a quantised
// model's own; a K or V value beyond f16's range, 65504, becomes an infinity, where the CPU's f32 cache
// keeps it).
KvType kv_type_for(const Model& model);
// Device bytes of one KvCache of `capacity` positions on this backend (K and V of every layer in the host
// cache's layout, elements of `type`, plus the visibility groups).
int64_t device_cache_bytes(const ModelConfig& c, int64_t capacity, KvType type);

}  // namespace canvas::cuda
