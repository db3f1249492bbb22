// The operation conformance harness (canvas_backend_ops): every primitive of model/transformer.h, on every
// weight storage type and on row counts and widths at the tiles' edges (1, 8, 9, 16, 64, 65, 256 rows; a
// vocabulary and widths that are not multiples of 16; sliding windows; K = V; block masks; decoder
// canvases), run on a named backend and compared with a reference at a tolerance per backend:
//   cpu      the CPU executor's SIMD kernels against their scalar twins (kReferenceKernels);
//   partial  the matmul-only backend of model/placement.h against the CPU executor (bit for bit);
//   cuda     the CUDA module's executor against the CPU executor (weights stored on the device as
//            DeviceMatrix keeps them: f32, bf16, the quantised blocks, else f16), within f16 rounding.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace canvas {
class PrimitiveBackend;
struct Model;
enum class Primitive : uint8_t;
}

namespace canvas::bench {

// A backend for one model (a device backend uploads that model's weights when it is made).
using BackendFactory = std::function<std::shared_ptr<PrimitiveBackend>(const Model& model)>;

struct BackendOpsOptions {
  std::string backend = "cpu";
  std::string primitive;  // "": every primitive
  bool verbose = false;   // a line for every case, not only the failing ones
  // What "cuda" runs: the caller's (canvas_backend_ops loads the CUDA module; bench links no device code).
  BackendFactory cuda;
};

struct BackendOpsResult {
  int cases = 0, failed = 0, unsupported = 0;
};

// The backends the harness knows.
std::vector<std::string> backend_ops_backends();
// One line per primitive: its name and the backends that run it (cuda_runs: which ones the CUDA module's
// executor runs, when it could be asked), then `cuda_note`.
std::string backend_ops_list(const std::function<bool(Primitive)>& cuda_runs = {}, const std::string& cuda_note = "");
// Runs the cases, printing one line per failing case (with its shape) and a summary to `out`. Throws
// Error for an unknown backend or primitive, or a backend that cannot start here.
BackendOpsResult run_backend_ops(const BackendOpsOptions& options, std::FILE* out);
// The same for a backend made per model (options.backend names it in the output), compared with the
// CPU's SIMD kernels at `tolerance` (relative to the largest reference value).
BackendOpsResult run_backend_ops(const BackendOpsOptions& options, std::FILE* out, const BackendFactory& backend,
                                 double tolerance);

}  // namespace canvas::bench
