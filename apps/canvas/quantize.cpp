// canvas quantize: a GGUF file re-typed to another of the types convert writes (GGUF -> GGUF,
// llama-quantize's habit), with every fallback reported.
#include <cstdio>
#include <deque>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "core/error.h"
#include "io/gguf.h"
#include "ops/matmul.h"
#include "progress.h"
#include "retype.h"

namespace canvas::cli {
namespace {

const Command kQuantize{
    "quantize",
    "canvas quantize IN.gguf OUT.gguf TYPE",
    R"(Writes OUT.gguf with IN.gguf's metadata and tensors, every matrix re-typed to TYPE (through f32; a
tensor already of TYPE is copied as it is). As in canvas convert, 1-D tensors stay f32 and rows that a
block type cannot hold fall back (K-quants to q8_0, else f16); each fallback is listed with its reason,
and the summary counts the tensors of each stored type. Quantizing an already quantized file compounds
the rounding errors: start from f32, f16 or bf16 where you can.

TYPE: f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | q4_k | q5_k | q6_k)",
    {},
    "OUT.gguf is written to OUT.gguf.tmp, then renamed; IN and OUT must differ."};

}  // namespace

int cmd_quantize(int argc, char** argv) {
  if (print_help_if_asked(kQuantize, argc, argv)) return 0;
  Args args(kQuantize, argc, argv, 2);
  check(args.positional().size() == 3, "usage: " + kQuantize.synopsis + " (see canvas quantize --help)");
  const std::string in = args.positional()[0], out = args.positional()[1];
  const DType requested = dtype_from_name(args.positional()[2]);
  check(matmul_supports(requested),
        "TYPE must be one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k");
  check(in != out, "IN and OUT are the same file (" + in + ")");
  auto file = GgufFile::open(in);
  GgufWriter w;
  for (const auto& [key, value] : file->metadata()) w.set(key, value);
  w.set("general.file_type", GgufValue::u32(llama_file_type(requested)));
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
