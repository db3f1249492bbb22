// A GPU's floors and the floor arithmetic of a pass (device_floors.h).
#include "bench/device_floors.h"

#include <algorithm>
#include <cmath>

#include "core/appendf.h"

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

}  // namespace canvas::bench
