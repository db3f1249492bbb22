// Fuzz harness: a JSON Schema (--json-schema FILE, the server's response_format) parsed and compiled into
// the constrained-output template; unsupported or malformed schemas must be canvas::Error.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "text/json_schema.h"
#include "io/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    canvas::compile_json_schema_text(text, "schema.json");
  } catch (const canvas::Error&) {
  }
  return 0;
}
