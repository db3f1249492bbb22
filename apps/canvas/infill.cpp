// canvas generate with holes (--suffix, <|hole:N|>) or a JSON schema (--json-schema): the request's infilling
// fields from the flags, then the result printed (schema mode: the JSON alone on stdout).
#include "infill.h"

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/cpu.h"
#include "core/error.h"
#include "generation_options.h"
#include "io/json.h"
#include "io/utf8.h"

namespace canvas::cli {

bool infill_requested(const Args& args) {
  return args.has("suffix") || args.has("json-schema") || args.has("json-schema-file") ||
         has_hole_marker(args.get("prompt", ""));
}

int run_infill(const Args& args, const TextModel& m, GenerationRequest request) {
  check(args.positional().empty(),
        "unexpected argument '" + (args.positional().empty() ? "" : args.positional()[0]) + "'");
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
  CanvasView view(&m.tokenizer, m.model.config.mask_token);
  if (args.has("visual")) request.on_step = [&](const StepEvent& e) { view.draw(e); };
  auto pool = make_pool(args);
  const GenerationOutput out = Generator(m).run(request, pool.get());
  if (args.has("visual")) view.finish();
  const bool schema_mode = request.json_schema != nullptr;
  if (args.has("json")) {
    nlohmann::ordered_json j;
    j["text"] = sanitize_utf8(out.text);
    if (!schema_mode) {
      j["fills"] = nlohmann::json::array();
      for (const std::string& f : out.fills) j["fills"].push_back(sanitize_utf8(f));
    }
    j["tokens"] = out.tokens;
    j["mode"] = decode_mode_name(out.mode);
    j["finish_reason"] = out.finish_reason;
    j["filled_tokens"] = out.filled_tokens;
    j["prompt_tokens"] = out.prompt.size();
    j["passes"] = out.passes;
    j["prompt_ms"] = out.prompt_ms;
    j["decode_ms"] = out.decode_ms;
    j["rows_computed"] = out.rows_computed;
    j["seed"] = out.seed;
    std::cout << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << std::endl;
    return 0;
  }
  std::cout << (schema_mode ? out.text : sanitize_utf8(out.text)) << std::endl;
  std::fprintf(stderr,
               "[%lld tokens filled, %lld passes, prompt %lld tokens %.1f ms, decode %.1f ms, %.2f tokens/s, seed %llu, "
               "%s, %d threads]\n",
               (long long)out.filled_tokens, (long long)out.passes, (long long)out.prompt.size(), out.prompt_ms,
               out.decode_ms, out.tokens_per_second(), (unsigned long long)out.seed, simd_level_name(simd_level()),
               pool->size());
  return 0;
}

}  // namespace canvas::cli
