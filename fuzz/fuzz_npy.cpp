// Fuzz harness: a NumPy .npy file (self-conditioning inputs, training batches).
#include <cstdint>

#include "core/error.h"
#include "fuzz_input.h"
#include "io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  canvas::fuzz::MemoryFile file(data, size);
  try {
    canvas::read_npy(file.path());
  } catch (const canvas::Error&) {
  }
  return 0;
}
