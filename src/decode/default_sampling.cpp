// Sampling defaults per model (default_sampling.h).
#include "decode/default_sampling.h"

#include <filesystem>

#include "core/error.h"
#include "decode/text_model.h"
#include "io/gguf.h"
#include "io/json.h"

namespace canvas {

namespace fs = std::filesystem;

namespace {

// A value a model file gives, checked: a bad one names the file and key rather than sampling oddly.
float checked(double v, double lo, double hi, const std::string& where) {
  check(v >= lo && v <= hi, where + " must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                                " (got " + std::to_string(v) + ")");
  return float(v);
}

}  // namespace

DefaultSampling default_sampling(const Model& model, const std::string& model_path) {
  DefaultSampling d;
  const ModelConfig& c = model.config;
  if (c.is_diffusion()) {
    d.source = "greedy: a diffusion model's own sampler defaults";
    return d;
  }
  if (model.file && (model.file->find("training.identity") || model.file->find("training.step"))) {
    d.source = "greedy: a model canvas trained, measured greedy";
    return d;
  }
  SamplingParams& p = d.params;
  p.temperature = kLlamaCppTemperature;
  p.top_k = kLlamaCppTopK;
  p.top_p = kLlamaCppTopP;
  p.min_p = kLlamaCppMinP;
  d.source = "llama.cpp's defaults";
  auto read = [&](auto&& has, auto&& number, const std::string& origin, const char* temp, const char* top_k,
                  const char* top_p, const char* min_p) {
    bool any = false;
    if (has(temp)) p.temperature = checked(number(temp), 0, 100, origin + " " + temp), any = true;
    if (has(top_k)) p.top_k = int64_t(checked(number(top_k), 0, 1 << 30, origin + " " + top_k)), any = true;
    if (has(top_p)) p.top_p = checked(number(top_p), 0, 1, origin + " " + top_p), any = true;
    if (has(min_p)) p.min_p = checked(number(min_p), 0, 1, origin + " " + min_p), any = true;
    if (p.top_p <= 0) p.top_p = 1.f;  // 0 means "off" in some configs
    if (any) d.source = origin + (d.source.empty() ? "" : " (llama.cpp's defaults for the rest)");
  };
  if (model.file) {
    const GgufFile& f = *model.file;
    read([&](const char* key) { return f.find(key) != nullptr; },
         [&](const char* key) { return f.get_float(key, 0); }, model_path, "general.sampling.temp",
         "general.sampling.top_k", "general.sampling.top_p", "general.sampling.min_p");
    return d;
  }
  const std::string path = (fs::path(checkpoint_directory(model, model_path)) / "generation_config.json").string();
  if (!fs::exists(path)) return d;
  const JsonDocument g = JsonDocument::load(path);
  read([&](const char* key) { return g.has(key); }, [&](const char* key) { return g.get_float(key, 0); }, path,
       "temperature", "top_k", "top_p", "min_p");
  if (g.has("do_sample") && !g.get_bool("do_sample", true)) {
    p.temperature = 0;
    d.source = path + " (do_sample: false, greedy)";
  }
  return d;
}

void apply_default_sampling(SamplingParams& s, const SamplingParams& defaults, const SamplingGiven& given) {
  if (!given.temperature) s.temperature = defaults.temperature;
  if (!given.top_k) s.top_k = defaults.top_k;
  if (!given.top_p) s.top_p = defaults.top_p;
  if (!given.min_p) s.min_p = defaults.min_p;
}

}  // namespace canvas
