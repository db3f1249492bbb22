// Fuzz harness: a tokenizer.json read into a tokenizer; when it loads, the input's own bytes (which may
// be any UTF-8 or not) are encoded and the ids decoded again.
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "io/hf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const canvas::HfTokenizer t = canvas::HfTokenizer::from_json_text(text, "fuzz tokenizer.json");
    const std::vector<int32_t> ids = t.encode(text.substr(0, 512), true, true);
    t.decode(ids, true);
    t.decode(ids, false);
  } catch (const canvas::Error&) {
  }
  return 0;
}
