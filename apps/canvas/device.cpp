#include "device.h"

#include <climits>
#include <cstdio>

#include "core/error.h"
#include "core/timer.h"
#include "model/weight_check.h"

namespace canvas::cli {

void check_all_weights(const Model& model, const std::string& path) {
  const double t0 = now_ms();
  const int64_t read = check_weights_finite(model, WeightScan::Full, path);
  std::fprintf(stderr, "--check-weights: %lld weights finite (%.0f ms)\n", static_cast<long long>(read),
               now_ms() - t0);
}

DeviceChoice device_choice(const Args& args) {
  DeviceChoice choice;
  choice.device = args.get("device", "cpu");
  check(!(args.has("cpu-moe") && args.has("n-cpu-moe")),
        "--cpu-moe keeps every layer's experts in RAM, --n-cpu-moe N the first N layers': give one of them");
  if (args.has("n-cpu-moe")) {
    choice.moe_layers_on_cpu = args.get_int("n-cpu-moe", 0);
    check(choice.moe_layers_on_cpu >= 0, "--n-cpu-moe: N is a number of layers, 0 or more");
  }
  if (args.has("cpu-moe")) choice.moe_layers_on_cpu = INT64_MAX;
  for (const char* flag : {"cpu-moe", "n-cpu-moe"})
    check(!args.has(flag) || choice.device == "cuda",
          std::string("--") + flag + " keeps the experts in RAM while the rest runs on the GPU; it needs --device cuda");
  return choice;
}

}  // namespace canvas::cli
