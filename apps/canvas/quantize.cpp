// canvas quantize: a GGUF file re-typed to another of the types convert writes (GGUF -> GGUF,
// llama-quantize's habit), with every fallback reported.
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <deque>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "core/error.h"
#include "io/gguf.h"
#include "ops/matmul.h"
#include "output_paths.h"
#include "progress.h"
#include "retype.h"

namespace canvas::cli {
namespace {

const Command kQuantize{
    "quantize",
    "canvas quantize IN.gguf OUT.gguf TYPE [--set KEY=VALUE]...",
    R"(Writes OUT.gguf with IN.gguf's metadata and tensors, every matrix re-typed to TYPE (through f32; a
tensor already of TYPE is copied as it is). As in canvas convert, 1-D tensors stay f32 and rows that a
block type cannot hold fall back (K-quants to q8_0, else f16); each fallback is listed with its reason,
and the summary counts the tensors of each stored type. Quantizing an already quantized file compounds
the rounding errors: start from f32, f16 or bf16 where you can.

TYPE: f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | q4_k | q5_k | q6_k)",
    {{"--set", "KEY=VALUE",
      "set a metadata key in OUT (repeatable), e.g. a decoder default such as\n"
      "diffusion.eb_entropy_bound=1.0; an existing key keeps its type (VALUE parsed as it), a new key is\n"
      "an integer, a float, true/false, or else a string",
      true}},
    "OUT.gguf is written to OUT.gguf.tmp, then renamed; OUT must not be IN (by another path, a symlink or a\n"
    "hard link either): that is refused before anything is written."};

// VALUE of --set KEY=VALUE: of the existing value's type when the key exists, else the first of integer,
// float, boolean and string that parses.
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
    check(*v >= 0 && *v <= int64_t(UINT32_MAX), what + ": " + text + " is outside u32 (the type of new integer keys)");
    return GgufValue::u32(uint32_t(*v));
  }
  if (const auto v = as_float(false)) return GgufValue::f32(float(*v));
  if (const auto v = as_bool(false)) return GgufValue::boolean(*v);
  return GgufValue::string(text);
}

}  // namespace

int cmd_quantize(int argc, char** argv) {
  if (print_help_if_asked(kQuantize, argc, argv)) return 0;
  Args args(kQuantize, argc, argv, 2);
  check(args.positional().size() == 3, "usage: " + kQuantize.synopsis + " (see canvas quantize --help)");
  const std::string in = args.positional()[0], out = args.positional()[1];
  const DType requested = dtype_from_name(args.positional()[2]);
  check(matmul_supports(requested),
        "TYPE must be one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k");
  check_output_is_not_input({"OUT", out}, {{"IN", in}});
  auto file = GgufFile::open(in);
  GgufWriter w;
  for (const auto& [key, value] : file->metadata()) w.set(key, value);
  w.set("general.file_type", GgufValue::u32(llama_file_type(requested)));
  for (const std::string& kv : args.get_all("set")) {
    const size_t eq = kv.find('=');
    check(eq != std::string::npos && eq > 0, "--set '" + kv + "': expected KEY=VALUE");
    const std::string key = kv.substr(0, eq);
    w.set(key, parse_metadata_value(kv.substr(eq + 1), file->find(key), "--set " + key));
  }
  std::deque<std::vector<uint8_t>> converted;
  RetypeReport report;
  Progress progress("tensors", int64_t(file->tensors().size()));
  for (const TensorView& t : file->tensors()) {
    std::string reason;
    const DType type = stored_type(t, requested, &reason);
    add_retyped(w, t.name, t, type, converted);
    report.note(t.name, t, requested, type, reason);
    progress.add();
  }
  progress.finish();
  w.write(out, file->alignment());
  std::fprintf(stderr, "wrote %s: %s (requested %s)\n%s", out.c_str(), report.summary().c_str(),
               dtype_name(requested), report.fallbacks().c_str());
  return 0;
}

}  // namespace canvas::cli
