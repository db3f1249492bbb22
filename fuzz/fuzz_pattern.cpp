// Fuzz harness: a JSON Schema `pattern` (the ECMAScript subset of parse_pattern) parsed and compiled to a
// byte automaton; any input must give an automaton or a canvas::Error, never a crash or a stack overflow.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "text/byte_automaton.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string pattern(reinterpret_cast<const char*>(data), size);
  try {
    const canvas::RegexPtr regex = canvas::parse_pattern(pattern, "pattern");
    // A smaller state budget than a schema's keeps every input well under the fuzzer's time limit;
    // the parts that can crash (parsing, the recursive automaton build) run in full either way.
    const canvas::ByteDfa dfa = canvas::ByteDfa::compile(regex, 2000);
    if (!dfa.empty()) dfa.min_length();
  } catch (const canvas::Error&) {
  }
  return 0;
}
