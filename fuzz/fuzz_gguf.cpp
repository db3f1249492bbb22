// Fuzz harness: a GGUF file (header, metadata, tensor infos), then what canvas reads from it before any
// weights: the model config and both vocabulary readers, and a round trip through the tokenizer built.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "fuzz_input.h"
#include "io/gguf.h"
#include "io/hf_tokenizer.h"
#include "io/tokenizer.h"
#include "model/config.h"

namespace {

template <class T>
void round_trip(const T& tokenizer) {
  const std::vector<int32_t> ids = tokenizer.encode("Hello, world! <mask> \xe2\x96\x81 caf\xc3\xa9 123", false, true);
  tokenizer.decode(ids, true);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  canvas::fuzz::MemoryFile file(data, size);
  std::shared_ptr<canvas::GgufFile> gguf;
  try {
    gguf = canvas::GgufFile::open(file.path());
  } catch (const canvas::Error&) {
    return 0;
  }
  try {
    canvas::config_from_gguf(*gguf);
  } catch (const canvas::Error&) {
  }
  try {
    round_trip(canvas::Tokenizer::from_gguf(*gguf));
  } catch (const canvas::Error&) {
  }
  try {
    round_trip(canvas::HfTokenizer::from_gguf(*gguf));
  } catch (const canvas::Error&) {
  }
  return 0;
}
