// A GPU's floors for `canvas bench --device cuda`: the roofs the CUDA backend measured in the same run
// (cuda/cuda_roofs.h) and its memory, as plain data (asked through the module's table, cuda/cuda_module.h:
// the bench layer links the module's loader, not the backend), and the least time a pass can take there.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace canvas::bench {

// Device time of one named op (span) of a profiled pass: the backend's stages (depth 0) and what they
// run (depth 1, 2: attention kernel, MoE routing, the products' paths); a deeper op's time is also part
// of the shallower one that holds it.
struct DeviceOpTime {
  std::string name;
  int depth = 0;
  double ms = 0;
  int64_t spans = 0;  // how many times it ran in the pass
};

// One run with the device's per-op timing on (DeviceFloors::profile): what ran, its wall time (with
// profiling on: an event pair per op, no recorded graphs), the forward passes it made, and the ops' device
// times summed over them.
struct DeviceProfile {
  std::string what;  // a pass kind ("stream", "ar") or a grid row's label
  double wall_ms = 0;
  int64_t passes = 1;
  std::vector<DeviceOpTime> ops;
};

struct DeviceFloors {
  static constexpr double kNotMeasured = std::numeric_limits<double>::quiet_NaN();
  std::string name;  // "NVIDIA H200"
  int64_t memory_total_bytes = 0;
  int64_t memory_used_bytes = 0;  // in use once the weights were uploaded, before any pass
  int64_t memory_peak_bytes = 0;  // the most in use when sampled: after the upload and after every timed pass
  double read_gbps = kNotMeasured;  // streaming read, 1e9 bytes per second
  int64_t read_buffer_bytes = 0;    // the buffer that read streamed
  double gemm_f16_tflops = kNotMeasured, gemm_f32_tflops = kNotMeasured;
  int64_t gemm_size = 0;     // the n of the n x n x n products
  std::string not_measured;  // why the roofs are NaN (--no-roofs, or the device's error); empty when measured
  // Samples the device's memory in use (bytes); empty: the passes are not sampled.
  std::function<int64_t()> memory_in_use;
  // The most bytes the backend's own buffers (weights, KV caches, scratch) held at once so far, exactly
  // (a high-water mark kept by the backend, not a sample); empty: not known.
  std::function<int64_t()> buffers_peak;
  // Runs `pass` once with the device's per-op timing on (CUDA events around each op; no recorded graphs)
  // and returns where its device time went. Empty: the device cannot profile.
  std::function<std::vector<DeviceOpTime>(const std::function<void()>& pass)> profile;

  // The compute roof (TFLOP/s) for weights stored as `weight_type`: f32 weights multiply in f32 (sgemm),
  // every other type on the tensor cores at the f16 rate. NaN when not measured.
  double gemm_tflops_for(DType weight_type) const;
  // memory_peak_bytes = max(it, memory_in_use()) when there is a sampler.
  void sample_memory();
  // pass_floor_ms with this device's roofs for weights of weight_type; NaN unless both were measured.
  double floor_ms(double bytes, double flops, DType weight_type) const;
  // Whether floor_ms gives numbers: both roofs measured (finite and positive).
  bool floors_measured(DType weight_type) const;
};

// The least milliseconds a pass can take that reads `bytes` from device memory and does `flops`:
// max(bytes / read bandwidth, flops / compute rate). NaN unless both roofs are finite and positive.
double pass_floor_ms(double bytes, double flops, double read_gbps, double tflops);
// floor_ms / measured_ms (1: the pass ran at its floor). NaN unless both are finite and positive.
double fraction_of_floor(double floor_ms, double measured_ms);

// "  WHAT: W ms wall, P passes, profiling on\n", then an op a line, indented by its depth (a tree: an op's
// time is also part of the op above it), with its ms per pass, its share of the wall time and how many
// times a pass ran it.
std::string device_profile_text(const DeviceProfile& profile);
// {"what", "wall_ms", "passes", "ops": [{"op", "depth", "ms" (summed over the passes), "spans"}]}.
nlohmann::ordered_json device_profile_json(const DeviceProfile& profile);

// {"name", "memory_total_bytes", "memory_used_bytes", "memory_peak_bytes", "buffers_peak_bytes" (when
//  known, read when called), "read_gbps", "read_buffer_bytes", "gemm_size", "gemm_f16_tflops",
//  "gemm_f32_tflops", "not_measured"}: NaN as null.
nlohmann::ordered_json device_floors_json(const DeviceFloors& device);
// "device: NAME, memory used 12.3 GiB after the upload, peak 14.0 of 139.8 GiB; floors: read 4321 GB/s
// (4.00 GiB buffer), GEMM f16 700.0 TFLOP/s, f32 50.0 TFLOP/s (8192^3)\n", or "...; floors not measured:
// WHY\n".
std::string device_floors_text(const DeviceFloors& device);

// canvas bench --device cuda: the GPU's name and memory in use now (after the weights' upload), and, when
// `measure_roofs`, its floors measured now (cuda/cuda_roofs.h: a 4 GiB streaming read, 8192^3 f16 and f32
// GEMMs; quick: 256 MiB and 2048^3), their time said to `say`. A roof that fails leaves the floors NaN with
// the reason in not_measured. Throws Error as use_device does when the CUDA module cannot be loaded.
DeviceFloors measure_device_floors(bool measure_roofs, bool quick,
                                   const std::function<void(const std::string&)>& say);

}  // namespace canvas::bench
