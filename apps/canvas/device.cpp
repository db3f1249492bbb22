#include "device.h"

#include <cstdio>

#include "core/error.h"
#include "core/timer.h"
#include "model/weight_check.h"
#if CANVAS_HAVE_CUDA
#include "cuda/cuda_backend.h"
#endif

namespace canvas::cli {

void check_all_weights(const Model& model, const std::string& path) {
  const double t0 = now_ms();
  const int64_t read = check_weights_finite(model, WeightScan::Full, path);
  std::fprintf(stderr, "--check-weights: %lld weights finite (%.0f ms)\n", static_cast<long long>(read),
               now_ms() - t0);
}

void use_device(Model& model, const std::string& device) {
  if (device == "cpu") return;
  check(device == "cuda", "--device: unknown device '" + device + "' (cpu or cuda)");
#if CANVAS_HAVE_CUDA
  model.backend = cuda::make_backend(model);
  std::fprintf(stderr, "device: %s\n", model.backend->name().c_str());
#else
  (void)model;
  throw Error("--device cuda: this canvas was built without the CUDA backend (rebuild where nvcc and cuBLAS are "
              "installed, or with -DCANVAS_CUDA=ON)");
#endif
}

}  // namespace canvas::cli
