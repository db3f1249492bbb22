// The one place that decides how a model samples when a request does not say (chat and serve): the model's
// own values (HF generation_config.json, the GGUF general.sampling.* keys llama.cpp's converter writes), else
// llama.cpp's defaults for pretrained autoregressive models, and greedy for canvas's own trained models and
// diffusion models (their measured defaults).
#pragma once
#include <string>

#include "decode/sampling.h"
#include "model/model.h"

namespace canvas {

// llama.cpp's sampling defaults (common_params_sampling): what a pretrained model without values of its own
// samples with.
inline constexpr float kLlamaCppTemperature = 0.8f, kLlamaCppTopP = 0.95f, kLlamaCppMinP = 0.05f;
inline constexpr int64_t kLlamaCppTopK = 40;

struct DefaultSampling {
  SamplingParams params;  // temperature (0: greedy), top_k, top_p, min_p; the rest as SamplingParams' defaults
  std::string source;     // where they came from, for the chat banner
};

// The sampling of `model` (loaded from `model_path`) when a request gives none:
// - a diffusion model (masked or uniform-state): greedy, its sampler's own defaults (uniform-state models
//   keep their temperature ramp);
// - a GGUF canvas trained (training.* keys): greedy, the setting its measurements were made with;
// - otherwise llama.cpp's defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05), each replaced by the
//   model's own value where it has one: generation_config.json beside a safetensors checkpoint (temperature,
//   top_k, top_p, min_p; do_sample false: greedy) or a GGUF's general.sampling.temp / top_k / top_p / min_p.
DefaultSampling default_sampling(const Model& model, const std::string& model_path);

// Which sampling settings a request (flags or API fields) gave itself.
struct SamplingGiven {
  bool temperature = false, top_k = false, top_p = false, min_p = false;
};

// The settings the request did not give, from `defaults`.
void apply_default_sampling(SamplingParams& sampling, const SamplingParams& defaults, const SamplingGiven& given);

}  // namespace canvas
