// The CUDA backend: a PrimitiveBackend (model/placement.h) whose executor runs every primitive of
// model/transformer.h on device 0 with the kernels of cuda/cuda_ops.h. Set as model.primitives, every
// forward() of that model runs the one definition there, so AR, masked diffusion and DiffusionGemma's
// sampler run unchanged above it (--device cuda); --cpu-moe keeps chosen layers' experts on the CPU.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "cuda/cuda_ops.h"
#include "model/model.h"
#include "model/placement.h"

namespace canvas::cuda {

struct BackendOptions {
  // The experts of layers [0, moe_layers_on_cpu) stay in host memory and their MoE primitive runs on the
  // CPU (--cpu-moe: every layer; --n-cpu-moe N): those layers' expert stacks and routers are not uploaded.
  int64_t moe_layers_on_cpu = 0;
};

// Uploads the model's weights to the device once (ops/matmul types as cuda_ops.h's DeviceMatrix stores
// them: f32, bf16, the block-decodable quantised types as stored, everything else as f16) and returns the
// backend. Each KvCache used with it gets device K/V on first use (its backend_state, freed with it; the
// host contents it has then are copied up). Throws Error when no device is usable.
std::unique_ptr<PrimitiveBackend> make_backend(const Model& model, const BackendOptions& options = {});

// Whether the executor runs primitive p: every one (a layer's experts where they were uploaded). Needs no
// device (canvas_backend_ops --list).
bool runs_primitive(Primitive p);

// The element type of the backend's KV caches for this model: f32 when its attention weights are f32 (the
// CPU's arithmetic, for exact twins), else f16 (half the memory; the rounding is far below a quantised
// model's own; a K or V value beyond f16's range, 65504, becomes an infinity, where the CPU's f32 cache
// keeps it). A decoder's kept canvas K/V (ForwardRequest::canvas_kv) are f32 either way.
KvType kv_type_for(const Model& model);
// Device bytes of one KvCache of `capacity` positions on this backend (K and V of every layer in the host
// cache's layout, elements of `type`, plus the visibility groups).
int64_t device_cache_bytes(const ModelConfig& c, int64_t capacity, KvType type);

}  // namespace canvas::cuda
