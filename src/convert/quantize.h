// canvas quantize's logic: a GGUF file re-typed to another GGUF file, with metadata keys set on the way.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "io/gguf.h"
#include "convert/retype.h"

namespace canvas {

// A metadata value for key `existing`'s type when the key exists (an Error naming `what` when `text` does
// not parse as it), else the first of u32 integer, f32, boolean and string that `text` parses as.
GgufValue parse_metadata_value(const std::string& text, const GgufValue* existing, const std::string& what);

// Why re-typing `in` to `type` would round again: "PATH is already quantized (N q8_0, ... matrices):
// re-quantizing to TYPE compounds the rounding errors", or "" when no block-quantized matrix would be
// rounded again (one already of `type` is copied as it is; f32 holds every value exactly).
std::string requantize_problem(const GgufFile& in, DType type);

// Re-typing a GGUF file: every tensor of `in` (its metadata too, plus `metadata`, which replaces or adds
// keys) written to `out_path` as `type` (through f32; a tensor already of `type` is copied as it is), with
// stored_type's fallbacks. general.file_type is set for `type`.
struct QuantizeOptions {
  DType type = DType::F32;
  std::vector<std::pair<std::string, GgufValue>> metadata;
};
RetypeReport quantize_gguf(const GgufFile& in, const std::string& out_path, const QuantizeOptions& options,
                           const ConversionCallbacks& callbacks = {});

}  // namespace canvas
