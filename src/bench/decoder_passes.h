// Pass-by-pass timing of a model with a decoder (DiffusionGemma and canvas's uniform-state models): what
// the entropy-bound sampler, AR decoding through the encoder and draft-and-verify cycles spend per forward.
// These are single forward passes, not generations, so they do not go through the Generator (the grid of
// run_bench does): how many passes a uniform-state generation takes depends on its weights (the adaptive
// stop, the drafts a verify cycle keeps), which random synthetic weights do not show, so the passes are
// timed one kind at a time and decoder_pass_report turns them into tokens/s at given pass counts.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/device_floors.h"
#include "bench/harness.h"
#include "model/model.h"

namespace canvas::bench {

struct DecoderPassOptions {
  int64_t prompt_tokens = 32;  // random prompt encoded once before the passes
  int64_t canvas = 256;        // decoder canvas rows
  int warmup = 1, repeats = 5;
  int threads = 0;  // 0: all cores
  uint64_t seed = 0;
  // Kinds to time: ar, diffusion (self-conditioning zeros), self-cond (logits), stream (fused head and
  // soft embedding), verify (a decoder and a causal pass over draft_length + 1 rows), verify-overlap (one
  // pass: the causal rows and draft_length + 1 decoder canvases of draft_length + 1 rows, as --overlap).
  std::vector<std::string> modes = {"ar", "diffusion", "self-cond", "stream"};
  int64_t draft_length = 4;
  // The device the passes run on: its memory is sampled after every timed pass (outside its time).
  DeviceFloors* device = nullptr;
  // After the timed passes, one more pass of each timed kind (diffusion, self-cond, stream, ar) with the
  // device's per-op timing on (device->profile): where its device time goes. Needs a device that profiles.
  bool profile = false;
};


// Milliseconds of each timed pass (after the warm-up); an empty vector for a kind not asked for.
struct DecoderPassTimes {
  double prompt_ms = 0;  // the prompt's encoder pass (once)
  std::vector<double> diffusion, self_cond, stream, ar, verify, verify_overlap;
  std::vector<DeviceProfile> profiles;  // DecoderPassOptions::profile: one pass each, `what` its kind
  int threads = 0;
};

// Throws Error for an unknown mode or out-of-range options.
DecoderPassTimes time_decoder_passes(const Model& model, const DecoderPassOptions& options);

// The run the timings came from, as the report names it.
struct DecoderPassRun {
  std::string source;  // the model: a file, or "synthetic NAME" (and " on DEVICE")
  int64_t layers = 0;
  int64_t prompt_tokens = 0, canvas = 0, draft_length = 0;
  int repeats = 0;
  int64_t weight_bytes = 0;
  double peak_rss_mib = 0;
  ModelFootprint footprint;  // what each pass reads and computes (for the floors)
  // The GPU the passes ran on (--device cuda): each pass is then reported against its floor there,
  // pass_floor_ms of its footprint's bytes and FLOPs, as floor_ms and fraction_of_floor.
  std::optional<DeviceFloors> device;
};

// `canvas bench`'s report for a model with a decoder: a table of each timed pass kind (median, min and
// max ms), the peak RSS and weight size, then what the passes imply for decoding: AR tokens/s (one step a
// token), a canvas denoised in 8, 16 and 32 passes of the faster later-step kind (self-cond or stream,
// else diffusion; the prompt's one encoder pass left out), and draft-and-verify cycles (plain and
// overlapped) keeping 1, 2 or all drafts, each as tokens/s and against AR. `text` is printed as it is;
// `json` holds the same numbers (passes, ar_tokens_per_second, diffusion_pass, diffusion_projection,
// verify_projection, verify_overlap_projection), and with a device its floors ("device", each pass's bytes,
// flops, floor_ms and fraction_of_floor, and the projections' fraction_of_floor and floor_tokens_per_second).
struct DecoderPassReport {
  std::string text;
  nlohmann::ordered_json json;
};
DecoderPassReport decoder_pass_report(const DecoderPassTimes& times, const DecoderPassRun& run);
// The rows of each pass of a timed kind (a verify cycle is two passes), as time_decoder_passes runs them.
std::vector<PassRows> decoder_pass_rows(const std::string& kind, int64_t prompt_tokens, int64_t canvas,
                                        int64_t draft_length);
// time_decoder_passes, then its report (the run named by `source`, with the process's peak RSS and, with a
// device, its memory sampled after every timed pass).
DecoderPassReport bench_decoder_passes(const Model& model, const DecoderPassOptions& options,
                                       const std::string& source, int64_t weight_bytes,
                                       const std::optional<DeviceFloors>& device = std::nullopt);

}  // namespace canvas::bench
