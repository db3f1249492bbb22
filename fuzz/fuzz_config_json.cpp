// Fuzz harness: a Hugging Face config.json read into a model config, and the same text read the way
// generation_config.json is (typed look-ups of the sampler keys).
#include <cstdint>
#include <string>

#include "core/error.h"
#include "fuzz_input.h"
#include "io/json.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  canvas::fuzz::MemoryFile file(data, size);
  try {
    canvas::config_from_hf(file.path());
  } catch (const canvas::Error&) {
  }
  try {
    const canvas::JsonDocument g = canvas::JsonDocument::load(file.path());
    g.get_int("canvas_length", 0);
    g.get_int("max_denoising_steps", 0);
    g.get_float("entropy_bound", 0);
    g.get_float("t_min", 0);
    g.get_float("t_max", 0);
    g.get_int("stability_threshold", 0);
    g.get_float("confidence_threshold", 0);
    g.get_int_or_int_array("eos_token_id");
    g.get_int("pad_token_id", 0);
    g.get_int("max_new_tokens", 0);
  } catch (const canvas::Error&) {
  }
  return 0;
}
