// canvas quantize: a GGUF file re-typed to another of the types convert writes (GGUF -> GGUF,
// llama-quantize's habit), with every fallback reported.
#include <cstdint>
#include <cstdio>
#include <string>

#include "cli/options.h"
#include "cli/output_paths.h"
#include "cli/progress.h"
#include "commands.h"
#include "core/error.h"
#include "io/gguf.h"
#include "convert/quantize.h"
#include "ops/matmul.h"

namespace canvas::cli {
namespace {

const Command kQuantize{
    "quantize",
    "canvas quantize IN.gguf OUT.gguf TYPE [--set KEY=VALUE]...",
    R"(Writes OUT.gguf with IN.gguf's metadata and tensors, every matrix re-typed to TYPE (through f32; a
tensor already of TYPE is copied as it is). As in canvas convert, 1-D tensors stay f32 and rows that a
block type cannot hold fall back (K-quants to q8_0, else f16); each fallback is listed with its reason,
and the summary counts the tensors of each stored type. Quantizing an already quantized file compounds
the rounding errors, so it is refused unless --allow-requantize is given (to f32, which holds the values
exactly, it is not): start from f32, f16 or bf16 where you can.

TYPE: f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | q4_k | q5_k | q6_k)",
    {{"--set", "KEY=VALUE",
      "set a metadata key in OUT (repeatable), e.g. a decoder default such as\n"
      "diffusion.eb_entropy_bound=1.0; an existing key keeps its type (VALUE parsed as it), a new key is\n"
      "an integer, a float, true/false, or else a string",
      true},
     {"--allow-requantize", "",
      "re-type matrices that are already quantized to another type than f32 (refused without it, as\n"
      "llama-quantize refuses: the rounding errors compound)"}},
    "OUT.gguf is written to OUT.gguf.PID.tmp, then renamed; OUT must not be IN (by another path, a symlink or a\n"
    "hard link either): that is refused before anything is written."};

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
  const auto file = GgufFile::open(in);
  const std::string requantize = requantize_problem(*file, requested);
  check(requantize.empty() || args.has("allow-requantize"),
        requantize + ". Start from an f32, f16 or bf16 file, or give --allow-requantize");
  QuantizeOptions options;
  options.type = requested;
  for (const std::string& kv : args.get_all("set")) {
    const size_t eq = kv.find('=');
    check(eq != std::string::npos && eq > 0, "--set '" + kv + "': expected KEY=VALUE");
    const std::string key = kv.substr(0, eq);
    options.metadata.emplace_back(key, parse_metadata_value(kv.substr(eq + 1), file->find(key), "--set " + key));
  }
  Progress progress("tensors", int64_t(file->tensors().size()));
  ConversionCallbacks callbacks;
  callbacks.on_tensor = [&progress](int64_t, int64_t) { progress.add(); };
  const RetypeReport report = quantize_gguf(*file, out, options, callbacks);
  progress.finish();
  std::fprintf(stderr, "wrote %s: %s (requested %s)\n%s", out.c_str(), report.summary().c_str(),
               dtype_name(requested), report.fallbacks().c_str());
  return 0;
}

}  // namespace canvas::cli
