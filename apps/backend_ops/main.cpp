// canvas_backend_ops: runs every primitive of the model definition on a backend and compares it with a
// reference (bench/backend_ops.h), one line per failing case.
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

#include "bench/backend_ops.h"
#include "core/error.h"
#include "cuda/cuda_module.h"
#include "model/placement.h"

namespace {

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: canvas_backend_ops [--backend NAME] [--primitive NAME] [--list] [-v]\n"
               "\n"
               "Runs every primitive of canvas's model definition (model/transformer.h) on a backend, for every\n"
               "weight storage type (f32, f16, bf16, q8_0, q4_0), 1, 8, 9, 16, 64, 65 and 256 rows, widths that\n"
               "are not multiples of 16, sliding and full layers, K = V, block masks and decoder canvases, and\n"
               "compares each result with a reference. Prints one line per failing case and a summary; exits 1\n"
               "when a case fails.\n"
               "\n"
               "  --backend NAME     cpu (default: the SIMD kernels against their scalar twins), partial (the\n"
               "                     matmul-only backend, bit for bit against the CPU) or cuda (the CUDA module's\n"
               "                     executor on the GPU, within f16 rounding: 2e-2 of the largest value)\n"
               "  --primitive NAME   only this primitive (--list names them)\n"
               "  --list             each primitive and the backends that run it\n"
               "  -v, --verbose      a line for every case\n");
}

}  // namespace

int main(int argc, char** argv) {
  canvas::bench::BackendOpsOptions options;
  bool list = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "canvas_backend_ops: %s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else if (a == "--backend") {
      options.backend = value("--backend");
    } else if (a == "--primitive") {
      options.primitive = value("--primitive");
    } else if (a == "--list") {
      list = true;
    } else if (a == "-v" || a == "--verbose") {
      options.verbose = true;
    } else {
      std::fprintf(stderr, "canvas_backend_ops: unknown option '%s'\n\n", a.c_str());
      usage(stderr);
      return 2;
    }
  }
  try {
    namespace cuda_module = canvas::cuda_module;
    if (list) {
      // What the CUDA executor runs is read from the module, which loads without a GPU.
      std::function<bool(canvas::Primitive)> cuda_runs;
      std::string note = "(cuda: this build has no CUDA module)";
      if (cuda_module::built()) {
        try {
          const cuda_module::Table* module = &cuda_module::module();
          cuda_runs = [module](canvas::Primitive p) { return module->runs_primitive(int(p)); };
          cuda_module::Message why;
          note = module->available(&why) ? "(cuda: the CUDA module's executor, on this machine's GPU)"
                                         : std::string("(cuda: the CUDA module's executor; it needs a GPU: ") +
                                               why.text + ")";
        } catch (const canvas::Error& e) {
          note = std::string("(cuda: ") + e.what() + ")";
        }
      }
      std::fputs(canvas::bench::backend_ops_list(cuda_runs, note).c_str(), stdout);
      return 0;
    }
    if (options.backend == "cuda") {
      const cuda_module::Table* module = &cuda_module::module();
      cuda_module::Message why;
      if (!module->available(&why)) throw canvas::Error(std::string("canvas_backend_ops --backend cuda: ") + why.text);
      options.cuda = [module](const canvas::Model& model) { return cuda_module::make_backend(*module, model); };
    }
    const canvas::bench::BackendOpsResult r = canvas::bench::run_backend_ops(options, stdout);
    return r.failed == 0 ? 0 : 1;
  } catch (const canvas::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
