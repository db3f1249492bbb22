// The default forward pass of the generation loops, and the hook that replaces it.
#include "decode/events.h"

#include "model/model.h"

namespace canvas {

void forward_on(const Model& model, KvCache& cache, std::span<const ForwardRequest> requests, ThreadPool* pool) {
  const std::vector<KvCache*> caches(requests.size(), &cache);
  forward_batch(model, caches, requests, pool);
}

void run_forward(const DecodeCallbacks& callbacks, const Model& model, KvCache& cache, const ForwardRequest& request,
                 ThreadPool* pool) {
  run_forward(callbacks, model, cache, std::span<const ForwardRequest>(&request, 1), pool);
}

void run_forward(const DecodeCallbacks& callbacks, const Model& model, KvCache& cache,
                 std::span<const ForwardRequest> requests, ThreadPool* pool) {
  if (callbacks.forward) {
    callbacks.forward(model, cache, requests, pool);
  } else {
    forward_on(model, cache, requests, pool);
  }
}

}  // namespace canvas
