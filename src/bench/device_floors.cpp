// A GPU's floors and the floor arithmetic of a pass (device_floors.h).
#include "bench/device_floors.h"

#include <algorithm>
#include <cmath>

#include "core/appendf.h"
#include "core/error.h"
#include "core/timer.h"
#include "cuda/cuda_module.h"

namespace canvas::bench {
namespace {

bool positive(double v) { return std::isfinite(v) && v > 0; }

nlohmann::ordered_json number_or_null(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

}  // namespace

double DeviceFloors::gemm_tflops_for(DType weight_type) const {
  return weight_type == DType::F32 ? gemm_f32_tflops : gemm_f16_tflops;
}

void DeviceFloors::sample_memory() {
  if (memory_in_use) memory_peak_bytes = std::max(memory_peak_bytes, memory_in_use());
}

double DeviceFloors::floor_ms(double bytes, double flops, DType weight_type) const {
  return pass_floor_ms(bytes, flops, read_gbps, gemm_tflops_for(weight_type));
}

bool DeviceFloors::floors_measured(DType weight_type) const { return std::isfinite(floor_ms(0, 0, weight_type)); }

double pass_floor_ms(double bytes, double flops, double read_gbps, double tflops) {
  if (!positive(read_gbps) || !positive(tflops) || !(bytes >= 0) || !(flops >= 0))
    return DeviceFloors::kNotMeasured;
  return std::max(bytes / (read_gbps * 1e6), flops / (tflops * 1e9));
}

double fraction_of_floor(double floor_ms, double measured_ms) {
  if (!positive(floor_ms) || !positive(measured_ms)) return DeviceFloors::kNotMeasured;
  return floor_ms / measured_ms;
}

nlohmann::ordered_json device_floors_json(const DeviceFloors& d) {
  nlohmann::ordered_json j;
  j["name"] = d.name;
  j["memory_total_bytes"] = d.memory_total_bytes;
  j["memory_used_bytes"] = d.memory_used_bytes;
  j["memory_peak_bytes"] = d.memory_peak_bytes;
  if (d.buffers_peak) j["buffers_peak_bytes"] = d.buffers_peak();
  j["read_gbps"] = number_or_null(d.read_gbps);
  j["read_buffer_bytes"] = d.read_buffer_bytes;
  j["gemm_size"] = d.gemm_size;
  j["gemm_f16_tflops"] = number_or_null(d.gemm_f16_tflops);
  j["gemm_f32_tflops"] = number_or_null(d.gemm_f32_tflops);
  if (!d.not_measured.empty()) j["not_measured"] = d.not_measured;
  return j;
}

std::string device_floors_text(const DeviceFloors& d) {
  constexpr double kGiB = 1073741824.0;
  std::string s;
  appendf(s, "device: %s, memory used %.2f GiB after the upload, peak %.2f of %.2f GiB", d.name.c_str(),
          double(d.memory_used_bytes) / kGiB, double(d.memory_peak_bytes) / kGiB, double(d.memory_total_bytes) / kGiB);
  if (d.buffers_peak) appendf(s, " (canvas's own buffers at most %.2f GiB)", double(d.buffers_peak()) / kGiB);
  s += "; ";
  if (!d.not_measured.empty()) {
    appendf(s, "floors not measured: %s\n", d.not_measured.c_str());
    return s;
  }
  appendf(s, "floors: read %.0f GB/s (%.2f GiB buffer), GEMM f16 %.1f TFLOP/s, f32 %.1f TFLOP/s (%lld^3)\n",
          d.read_gbps, double(d.read_buffer_bytes) / kGiB, d.gemm_f16_tflops, d.gemm_f32_tflops,
          (long long)d.gemm_size);
  return s;
}

std::string device_profile_text(const DeviceProfile& profile) {
  const double passes = double(std::max<int64_t>(1, profile.passes));
  std::string text;
  appendf(text, "  %s: %.2f ms wall, %lld passes, profiling on\n", profile.what.c_str(), profile.wall_ms,
          (long long)profile.passes);
  for (const DeviceOpTime& op : profile.ops)
    appendf(text, "    %*s%-*s %9.3f ms/pass %5.1f%% %8.1f x/pass\n", 2 * op.depth, "", std::max(8, 56 - 2 * op.depth),
            op.name.c_str(), op.ms / passes, profile.wall_ms > 0 ? 100 * op.ms / profile.wall_ms : 0.0,
            double(op.spans) / passes);
  return text;
}

nlohmann::ordered_json device_profile_json(const DeviceProfile& profile) {
  nlohmann::ordered_json ops = nlohmann::ordered_json::array();
  for (const DeviceOpTime& op : profile.ops)
    ops.push_back({{"op", op.name}, {"depth", op.depth}, {"ms", op.ms}, {"spans", op.spans}});
  return {{"what", profile.what}, {"wall_ms", profile.wall_ms}, {"passes", profile.passes}, {"ops", ops}};
}

DeviceFloors measure_device_floors(bool measure_roofs, bool quick,
                                   const std::function<void(const std::string&)>& say) {
  const cuda_module::Table& cuda = cuda_module::module();
  cuda_module::Message name, error;
  cuda_module::check_call(cuda.device_name(&name, &error), error);
  DeviceFloors d;
  d.name = name.text;
  int64_t free_bytes = 0;
  cuda_module::check_call(cuda.device_memory(&d.memory_total_bytes, &free_bytes, &error), error);
  d.memory_used_bytes = d.memory_peak_bytes = d.memory_total_bytes - free_bytes;
  const cuda_module::Table* module = &cuda;  // loaded once, never unloaded
  d.memory_in_use = [module] {
    int64_t total = 0, free = 0;
    cuda_module::Message e;
    cuda_module::check_call(module->device_memory(&total, &free, &e), e);
    return total - free;
  };
  d.buffers_peak = [module] { return module->device_buffer_peak_bytes(); };
  d.profile = [module](const std::function<void()>& pass) {
    std::vector<DeviceOpTime> ops;
    const auto sink = [](void* context, const char* op, int depth, double ms, int64_t spans) {
      static_cast<std::vector<DeviceOpTime>*>(context)->push_back({op, depth, ms, spans});
    };
    cuda_module::Message e;
    cuda_module::check_call(module->take_profile(sink, &ops, &e), e);  // drops what came before
    ops.clear();
    module->set_profiling(true);
    try {
      pass();
      cuda_module::check_call(module->take_profile(sink, &ops, &e), e);
    } catch (...) {
      module->set_profiling(false);
      throw;
    }
    module->set_profiling(false);
    return ops;
  };
  if (!measure_roofs) {
    d.not_measured = "--no-roofs";
    return d;
  }
  try {
    const double t0 = now_ms();
    const int64_t size = quick ? 2048 : 8192;
    double read_gbps = 0, f16 = 0, f32 = 0;
    int64_t read_bytes = 0;
    cuda_module::check_call(
        cuda.measure_read_bandwidth(int64_t(quick ? 256 : 4096) << 20, &read_gbps, &read_bytes, &error),
        error);
    cuda_module::check_call(cuda.measure_gemm_rate(true, size, &f16, &error), error);
    cuda_module::check_call(cuda.measure_gemm_rate(false, size, &f32, &error), error);
    d.read_gbps = read_gbps;  // all three or none: a roof that fails leaves the floors NaN
    d.read_buffer_bytes = read_bytes;
    d.gemm_size = size;
    d.gemm_f16_tflops = f16;
    d.gemm_f32_tflops = f32;
    std::string line;
    appendf(line, "device floors in %.1f s", (now_ms() - t0) / 1000);
    say(line);
  } catch (const Error& e) {
    d.not_measured = e.what();
  }
  return d;
}

}  // namespace canvas::bench
