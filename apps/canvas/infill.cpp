// canvas generate with holes (--suffix, <|hole:N|>) or a JSON schema (--json-schema): builds the plan,
// runs decode/infill.h and prints the text (schema mode: the JSON alone on stdout).
#include "infill.h"

#include <cstdio>
#include <iostream>
#include <sstream>

#include "core/cpu.h"
#include "core/error.h"
#include "decode/infill.h"
#include "io/json.h"

namespace canvas::cli {

namespace {

TextCodec codec_for(const Model& model, const TextTokenizer& tokenizer) {
  const ModelConfig& c = model.config;
  std::vector<std::string> pieces(size_t(c.vocab));
  for (int32_t id = 0; id < int32_t(c.vocab); ++id) {
    if (id == c.mask_token || id == c.bos_token || id == c.eos_token || id == c.pad_token) continue;
    try {
      // Special tokens decode to nothing; a normal token's piece is its bytes.
      if (!tokenizer.decode({id}).empty()) pieces[size_t(id)] = tokenizer.token_piece(id);
    } catch (const Error&) {
    }
  }
  TextCodec codec;
  codec.encode = [&tokenizer](const std::string& text) { return tokenizer.encode(text, false); };
  codec.vocabulary = std::make_shared<const TokenVocabulary>(std::move(pieces));
  return codec;
}

std::string json_string(const std::string& s) {
  return nlohmann::json(sanitize_utf8(s)).dump();
}

void print_stats(const GenerationResult& r, int64_t filled, int threads) {
  const double tps = r.decode_ms > 0 ? double(filled) * 1000.0 / r.decode_ms : 0.0;
  std::fprintf(
      stderr,
      "[%lld tokens filled, %lld passes, prompt %lld tokens %.1f ms, decode %.1f ms, %.2f tokens/s, %s, %d "
      "threads]\n",
      (long long)filled, (long long)r.passes, (long long)r.prompt_tokens, r.prompt_ms, r.decode_ms, tps,
      simd_level_name(simd_level()), threads);
}

void print_json(const GenerationResult& r, const std::string& text, const std::vector<std::string>* fills,
                int64_t filled) {
  std::ostringstream out;
  out << "{\"text\": " << json_string(text);
  if (fills) {
    out << ", \"fills\": [";
    for (size_t i = 0; i < fills->size(); ++i) out << (i ? ", " : "") << json_string((*fills)[i]);
    out << "]";
  }
  out << ", \"tokens\": [";
  for (size_t i = 0; i < r.tokens.size(); ++i) out << (i ? ", " : "") << r.tokens[i];
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "], \"filled_tokens\": %lld, \"prompt_tokens\": %lld, \"passes\": %lld, \"prompt_ms\": %.3f, "
                "\"decode_ms\": %.3f, \"rows_computed\": %lld}",
                (long long)filled, (long long)r.prompt_tokens, (long long)r.passes, r.prompt_ms, r.decode_ms,
                (long long)r.rows_computed);
  out << buf;
  std::cout << out.str() << std::endl;
}

std::string trim_right(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.pop_back();
  return s;
}

}  // namespace

bool infill_requested(const Args& args) {
  return args.has("suffix") || args.has("json-schema") || has_hole_marker(args.get("prompt", ""));
}

int run_infill(const Args& args, const Model& model, const std::string& model_path,
               const TextTokenizer& tokenizer) {
  const ModelConfig& c = model.config;
  check(!args.has("chat"), "--chat cannot be combined with --suffix, <|hole:N|> or --json-schema");
  check(!args.has("stream-head"),
        "--stream-head cannot be combined with --suffix, <|hole:N|> or --json-schema");
  check(args.positional().empty(),
        "unexpected argument '" + (args.positional().empty() ? "" : args.positional()[0]) + "'");
  const TextCodec codec = codec_for(model, tokenizer);
  const std::string mode = args.get("mode", c.is_diffusion() ? "diffusion" : "ar");
  check(mode == "diffusion" || mode == "ar", "--mode must be diffusion or ar");
  const SamplerDefaults defaults = sampler_defaults(model, model_path);
  const int64_t n = args.get_int("n-predict", 64);
  check(n > 0 && n <= 1 << 20, "-n must be between 1 and 1048576");
  auto pool = make_pool(args);
  const uint64_t seed = resolve_seed(args);
  const SamplingParams sampling = sampling_params(args, seed);
  const std::string prompt_text = args.get("prompt", "");
  const std::vector<int32_t> bos =
      tokenizer.wants_bos() ? tokenizer.encode("", true) : std::vector<int32_t>{};
  const bool schema_mode = args.has("json-schema");
  check(!(schema_mode && (args.has("suffix") || has_hole_marker(prompt_text))),
        "--json-schema cannot be combined with --suffix or <|hole:N|> holes");

  CanvasView view(&tokenizer, c.mask_token);
  DecodeCallbacks callbacks;
  if (args.has("visual")) callbacks.on_step = [&](const StepEvent& e) { view.draw(e); };

  FillPlan plan;
  if (schema_mode) {
    const std::string path = args.get("json-schema", "");
    const JsonTemplate schema = compile_json_schema(load_json_file(path), path);
    std::vector<int32_t> prompt = bos;
    const std::vector<int32_t> body = tokenizer.encode(prompt_text, false);
    prompt.insert(prompt.end(), body.begin(), body.end());
    if (mode == "ar") {
      check(!prompt.empty(), "AR decoding needs a prompt (-p TEXT)");
      check(int64_t(prompt.size()) + n + 1 <= c.context_length,
            "prompt (" + std::to_string(prompt.size()) + " tokens) + -n " + std::to_string(n) +
                " exceed the model's context length " + std::to_string(c.context_length));
      ArParams p;
      p.max_new_tokens = n;
      p.sampling = sampling;
      p.stop_ids = c.uniform_state ? defaults.params.eos_ids : std::vector<int32_t>{c.eos_token};
      const ConstrainedArResult r =
          generate_constrained_ar(model, prompt, schema, codec, p, pool.get(), callbacks);
      if (args.has("visual")) view.finish();
      if (args.has("json")) {
        print_json(r, r.text, nullptr, int64_t(r.tokens.size()));
      } else {
        std::cout << r.text << std::endl;
        print_stats(r, int64_t(r.tokens.size()), pool->size());
      }
      return 0;
    }
    plan = plan_json(schema, prompt, codec, c.uniform_state ? -1 : c.mask_token,
                     std::min<int64_t>(n, c.context_length - int64_t(prompt.size())));
  } else {
    check(c.is_diffusion(),
          "model '" + c.arch +
              "' is autoregressive: it cannot fill holes between fixed text (it was not trained to "
              "fill in the middle); use a masked or uniform-state diffusion model");
    check(mode == "diffusion", "--suffix and <|hole:N|> need diffusion decoding (not --mode ar)");
    std::vector<TextPiece> pieces = parse_holes(prompt_text);
    if (args.has("suffix")) {
      if (std::none_of(pieces.begin(), pieces.end(), [](const TextPiece& p) { return p.is_hole(); }))
        pieces.push_back({"", n});
      pieces.push_back({args.get("suffix", ""), 0});
    }
    plan = plan_text_infill(pieces, bos, codec, c.uniform_state ? -1 : c.mask_token);
  }
  check(int64_t(plan.prompt.size() + plan.canvas.size()) <= c.context_length,
        "prompt (" + std::to_string(plan.prompt.size()) + " tokens) + canvas (" +
            std::to_string(plan.canvas.size()) + " tokens) exceed the model's context length " +
            std::to_string(c.context_length));

  FillParams params;
  MaskedDiffusionParams& m = params.masked;
  m.steps = args.get_int("steps", 0);
  m.schedule = parse_step_schedule(args.get("schedule", c.arch == "dream" ? "dream" : "llada"));
  m.order = parse_unmask_order(args.get("algorithm", "confidence"));
  m.threshold = float(args.get_float("threshold", 0.0));
  check(m.threshold >= 0 && m.threshold <= 1, "--threshold must be in [0, 1]");
  m.cache = parse_cache_mode(args.get("cache", "prefix"));
  m.freeze = args.has("freeze") || args.has("freeze-refresh");
  m.freeze_refresh = args.get_int("freeze-refresh", 0);
  m.sampling = sampling;
  if (c.uniform_state) {
    params.uniform = uniform_state_params(args, defaults, int64_t(plan.canvas.size()), seed);
    check(!params.uniform.freeze, "--freeze is for plain generation with a uniform-state model, not with --suffix, "
                                  "<|hole:N|> or --json-schema");
  }
  const FillResult r = fill(model, plan, params, codec, pool.get(), callbacks);
  if (args.has("visual")) view.finish();
  const int64_t filled = std::count(plan.canvas.begin(), plan.canvas.end(), plan.mask_id);

  std::string text = schema_mode ? trim_right(r.text) : codec_text(codec, plan.prompt) + r.text;
  if (args.has("json")) {
    print_json(r, text, schema_mode ? nullptr : &r.fills, filled);
  } else {
    std::cout << (schema_mode ? text : sanitize_utf8(text)) << std::endl;
    print_stats(r, filled, pool->size());
  }
  return 0;
}

}  // namespace canvas::cli
