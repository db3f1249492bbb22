// canvas generate with holes (--suffix, <|hole:N|>) or a JSON schema (--json-schema): the request's infilling
// fields from the flags, then the result printed (schema mode: the JSON alone on stdout).
#include "infill.h"

#include <cstdio>
#include <iostream>

#include "core/error.h"
#include "decode/generation_report.h"
#include "generation_options.h"
#include "io/json.h"
#include "io/utf8.h"

namespace canvas::cli {

bool infill_requested(const Args& args) {
  return args.has("suffix") || args.has("json-schema") || args.has("json-schema-file") ||
         has_hole_marker(args.get("prompt", ""));
}

int run_infill(const Args& args, const TextModel& m, GenerationRequest request) {
  if (args.has("suffix")) request.suffix = args.get("suffix", "");
  check(!(args.has("json-schema") && args.has("json-schema-file")), "give one of --json-schema and --json-schema-file");
  if (args.has("json-schema") || args.has("json-schema-file")) {
    // An inline schema (as llama.cpp takes it) or a file.
    const std::string value = args.has("json-schema") ? args.get("json-schema", "") : args.get("json-schema-file", "");
    const size_t first = value.find_first_not_of(" \t\n");
    const bool inline_schema = args.has("json-schema") && first != std::string::npos && value[first] == '{';
    const std::string origin = inline_schema ? "--json-schema" : value;
    request.json_schema = std::make_shared<const JsonTemplate>(
        compile_json_schema_text(inline_schema ? value : read_text_file(value), origin));
  }
  TerminalOutput output(args, m, "", /*whole_text_only=*/true);  // holes fill anywhere: printed at the end
  const Generator generator(m);
  output.attach(request, generator);
  auto pool = make_pool(args);
  const GenerationOutput out = generator.run(request, pool.get());
  output.close();
  const bool schema_mode = request.json_schema != nullptr;
  if (args.has("json")) {
    std::cout << infill_json(out, schema_mode) << std::endl;
    return 0;
  }
  std::cout << (schema_mode ? out.text : sanitize_utf8(out.text)) << std::endl;
  if (!args.has("quiet")) std::fprintf(stderr, "%s\n", infill_stats_line(out, pool->size()).c_str());
  return 0;
}

}  // namespace canvas::cli
