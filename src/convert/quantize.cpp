// GGUF -> GGUF re-typing (canvas quantize) and the parsing of metadata values set on the way.
#include "convert/quantize.h"

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <map>
#include <optional>

#include "core/error.h"
#include "ops/matmul.h"

namespace canvas {

GgufValue parse_metadata_value(const std::string& text, const GgufValue* existing, const std::string& what) {
  auto as_int = [&](bool strict) -> std::optional<int64_t> {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno == ERANGE) {
      check(!strict, what + ": '" + text + "' is not an integer");
      return std::nullopt;
    }
    return int64_t(v);
  };
  auto as_float = [&](bool strict) -> std::optional<double> {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !std::isfinite(v)) {
      check(!strict, what + ": '" + text + "' is not a finite number");
      return std::nullopt;
    }
    return v;
  };
  auto as_bool = [&](bool strict) -> std::optional<bool> {
    if (text == "true" || text == "false") return text == "true";
    check(!strict, what + ": '" + text + "' is not true or false");
    return std::nullopt;
  };
  if (existing) {
    if (existing->type == GgufType::Bool) return GgufValue::boolean(*as_bool(true));
    if (existing->type == GgufType::Float32) return GgufValue::f32(float(*as_float(true)));
    if (existing->type == GgufType::Float64) return GgufValue::f64(*as_float(true));
    if (existing->type == GgufType::String) return GgufValue::string(text);
    // Any integer type; the writer checks the range of the key's type.
    if (existing->is_integer()) return GgufValue::integer(existing->type, *as_int(true));
    throw Error(what + ": the existing key is an array, which --set does not write");
  }
  if (const auto v = as_int(false)) {
    check(*v >= 0 && *v <= int64_t(UINT32_MAX),
          what + ": " + text + " is outside u32 (the type of new integer keys)");
    return GgufValue::u32(uint32_t(*v));
  }
  if (const auto v = as_float(false)) return GgufValue::f32(float(*v));
  if (const auto v = as_bool(false)) return GgufValue::boolean(*v);
  return GgufValue::string(text);
}

std::string requantize_problem(const GgufFile& in, DType type) {
  std::map<std::string, int64_t> requantized;  // by type name, in a fixed order
  for (const TensorView& t : in.tensors())
    if (t.n_dims >= 2 && dtype_info(t.type).block_size > 1 && t.type != type && type != DType::F32)
      ++requantized[dtype_name(t.type)];
  if (requantized.empty()) return "";
  std::string types;
  for (const auto& [name, count] : requantized)
    types += (types.empty() ? "" : ", ") + std::to_string(count) + " " + name;
  return in.path() + " is already quantized (" + types + " matrices): re-quantizing to " + dtype_name(type) +
         " compounds the rounding errors";
}

RetypeReport quantize_gguf(const GgufFile& in, const std::string& out_path, const QuantizeOptions& options,
                           const ConversionCallbacks& callbacks) {
  const DType requested = options.type;
  check(matmul_supports(requested),
        std::string("cannot quantize to ") + dtype_name(requested) +
            ": the types are f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k");
  GgufWriter w;
  for (const auto& [key, value] : in.metadata()) w.set(key, value);
  w.set("general.file_type", GgufValue::u32(llama_file_type(requested)));
  for (const auto& [key, value] : options.metadata) w.set(key, value);
  std::deque<std::vector<uint8_t>> converted;  // re-typed tensors, alive until write()
  RetypeReport report;
  const int64_t total = int64_t(in.tensors().size());
  int64_t done = 0;
  for (const TensorView& t : in.tensors()) {
    std::string reason;
    const DType type = stored_type(t, requested, &reason);
    add_retyped(w, t.name, t, type, converted);
    report.note(t.name, t, requested, type, reason);
    if (callbacks.on_tensor) callbacks.on_tensor(++done, total);
  }
  w.write(out_path, in.alignment());
  return report;
}

}  // namespace canvas
