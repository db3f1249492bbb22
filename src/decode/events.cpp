// The default forward pass of the generation loops, and the hook that replaces it.
#include "decode/events.h"

#include "model/model.h"

namespace canvas {

void run_forward(const DecodeCallbacks& callbacks, const Model& model, KvCache& cache, const ForwardRequest& request,
                 ThreadPool* pool) {
  if (callbacks.forward) {
    callbacks.forward(model, cache, request, pool);
  } else {
    forward(model, cache, request, pool);
  }
}

}  // namespace canvas
