// Fuzz harness: a training run's config file (`canvas train --config FILE`).
#include <cstdint>
#include <string>

#include "core/error.h"
#include "train/trainer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    canvas::train::parse_run_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz config");
  } catch (const canvas::Error&) {
  }
  return 0;
}
