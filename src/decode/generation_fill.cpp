// The generator's infilling and schema branch: a request with a suffix, <|hole:N|> holes or a JSON schema
// becomes a fill plan (decode/infill.h) decoded by masked or uniform-state diffusion, or a schema decoded
// left to right under the constraint.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <mutex>

#include "core/error.h"
#include "decode/generation.h"
#include "decode/mode_router.h"

namespace canvas {

const TextCodec& Generator::codec() const {
  canvas::check(tokenizer_ != nullptr, "infilling needs the model's tokenizer");
  std::call_once(codec_->built, [&] {
    const ModelConfig& c = model_.config;
    std::vector<std::string> pieces(size_t(c.vocab));
    for (int32_t id = 0; id < int32_t(c.vocab); ++id) {
      if (id == c.mask_token || id == c.bos_token || id == c.eos_token || id == c.pad_token) continue;
      try {
        // Special tokens decode to nothing; a normal token's piece is its bytes.
        if (!tokenizer_->decode({id}).empty()) pieces[size_t(id)] = tokenizer_->token_piece(id);
      } catch (const Error&) {
      }
    }
    const TextTokenizer* tokenizer = tokenizer_;
    codec_->codec.encode = [tokenizer](const std::string& text) { return tokenizer->encode(text, false); };
    codec_->codec.vocabulary = std::make_shared<const TokenVocabulary>(std::move(pieces));
  });
  return codec_->codec;
}

bool Generator::fills_holes(const GenerationRequest& r) {
  return r.suffix.has_value() || r.json_schema != nullptr || has_hole_marker(r.text);
}

namespace {

std::string trim_right(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.pop_back();
  return s;
}

}  // namespace

GenerationOutput Generator::run_fill(const GenerationRequest& r, ThreadPool* pool) const {
  const ModelConfig& c = model_.config;
  canvas::check((!r.chat && r.messages.empty()) || r.json_schema,
                "--chat cannot be combined with --suffix or <|hole:N|> holes");
  canvas::check(!r.uniform_state.stream_head, "--stream-head cannot be combined with --suffix, <|hole:N|> or --json-schema");
  canvas::check(r.prompt.empty(), "infilling takes the prompt as text");
  canvas::check(!r.ignore_eos, "ignore_eos applies to plain generation, not to infilling or a schema");
  const bool schema_mode = r.json_schema != nullptr;
  canvas::check(!(schema_mode && (r.suffix || has_hole_marker(r.text))),
                "--json-schema cannot be combined with --suffix or <|hole:N|> holes");
  const TextCodec& text_codec = codec();
  GenerationOutput out;
  // auto fills holes and schemas by diffusion where the model has it (decode/mode_router.h).
  const bool fill_by_diffusion = fills_by_diffusion(c, has_diffusion(), r);
  out.mode = fill_by_diffusion ? DecodeMode::Diffusion : resolve(r.mode);
  out.mode_reason = fill_by_diffusion ? "auto: holes and schemas are filled by diffusion" : mode_reason(r);
  out.modes = modes();
  out.seed = r.sampling.seed;
  const int64_t n = r.max_new_tokens > 0 ? r.max_new_tokens : 64;
  canvas::check(n <= (int64_t(1) << 20), "-n must be between 1 and 1048576");
  const std::vector<int32_t> bos = tokenizer_->wants_bos() ? tokenizer_->encode("", true) : std::vector<int32_t>{};
  DecodeCallbacks callbacks;
  callbacks.forward = request_forward(r, [] { throw Error("the request was cancelled"); });
  if (r.on_step) callbacks.on_step = r.on_step;

  FillPlan plan;
  if (schema_mode) {
    // The text after the vocabulary's BOS, or a conversation in the model's chat format.
    std::vector<int32_t> prompt = bos;
    if (r.chat || !r.messages.empty()) {
      canvas::check(chat_ != nullptr, "this generator has no chat format");
      prompt = chat_->encode(*tokenizer_, r.messages.empty() ? std::vector<ChatMessage>{{"user", r.text}} : r.messages,
                             r.parse_special.value_or(false), r.chat_extras);
    } else {
      const std::vector<int32_t> body = tokenizer_->encode(r.text, false);
      prompt.insert(prompt.end(), body.begin(), body.end());
    }
    if (out.mode == DecodeMode::Ar) {
      canvas::check(has_ar(), "--mode ar: '" + c.arch + "' cannot decode autoregressively");
      canvas::check(!prompt.empty(), "AR decoding needs a prompt (-p TEXT)");
      canvas::check(int64_t(prompt.size()) + n + 1 <= c.context_length,
                    "prompt (" + std::to_string(prompt.size()) + " tokens) + -n " + std::to_string(n) +
                        " exceed the model's context length " + std::to_string(c.context_length));
      ArParams p;
      p.max_new_tokens = n;
      p.sampling = r.sampling;
      p.stop_ids = stop_ids_;
      const ConstrainedArResult res =
          generate_constrained_ar(model_, prompt, *r.json_schema, text_codec, p, pool, callbacks);
      out.prompt = prompt;
      out.region = res.tokens;
      out.tokens.assign(res.tokens.begin(),
                        std::find_first_of(res.tokens.begin(), res.tokens.end(), stop_ids_.begin(), stop_ids_.end()));
      out.text = res.text;
      out.filled_tokens = int64_t(out.tokens.size());
      out.decode_tokens = out.filled_tokens;
      out.passes = res.passes;
      out.rows_computed = res.rows_computed;
      out.prompt_ms = res.prompt_ms;
      out.decode_ms = res.decode_ms;
      // "stop" once the schema's document is complete, "length" when N ran out first.
      out.finish_reason = nlohmann::json::accept(out.text) ? "stop" : "length";
      if (r.on_text) r.on_text(out.text, int64_t(out.tokens.size()));
      return out;
    }
    plan = plan_json(*r.json_schema, prompt, text_codec, c.uniform_state ? -1 : c.mask_token,
                     std::min<int64_t>(n, c.context_length - int64_t(prompt.size())));
  } else {
    canvas::check(c.is_diffusion(), "model '" + c.arch +
                                        "' is autoregressive: it cannot fill holes between fixed text (it was not "
                                        "trained to fill in the middle); use a masked or uniform-state diffusion model");
    canvas::check(out.mode == DecodeMode::Diffusion, std::string("--suffix and <|hole:N|> need diffusion decoding, not --mode ") +
                                                         decode_mode_name(out.mode));
    std::vector<TextPiece> pieces = parse_holes(r.text);
    if (r.suffix) {
      if (std::none_of(pieces.begin(), pieces.end(), [](const TextPiece& p) { return p.is_hole(); }))
        pieces.push_back({"", n});
      pieces.push_back({*r.suffix, 0});
    }
    plan = plan_text_infill(pieces, bos, text_codec, c.uniform_state ? -1 : c.mask_token);
  }
  canvas::check(int64_t(plan.prompt.size() + plan.canvas.size()) <= c.context_length,
                "prompt (" + std::to_string(plan.prompt.size()) + " tokens) + canvas (" +
                    std::to_string(plan.canvas.size()) + " tokens) exceed the model's context length " +
                    std::to_string(c.context_length));

  FillParams params;
  params.masked = masked_params(r);
  canvas::check(params.masked.threshold >= 0 && params.masked.threshold <= 1, "--threshold must be in [0, 1]");
  if (c.uniform_state) {
    params.uniform = uniform_params(r, int64_t(plan.canvas.size()));
    canvas::check(!params.uniform.freeze, "--freeze is for plain generation with a uniform-state model, not with "
                                          "--suffix, <|hole:N|> or --json-schema");
  }
  const FillResult res = fill(model_, plan, params, text_codec, pool, callbacks);
  out.prompt = plan.prompt;
  out.region = res.canvas;
  out.tokens = res.tokens;
  out.fills = res.fills;
  out.filled_tokens = std::count(plan.canvas.begin(), plan.canvas.end(), plan.mask_id);
  out.decode_tokens = out.filled_tokens;
  out.text = schema_mode ? trim_right(res.text) : codec_text(text_codec, plan.prompt) + res.text;
  out.passes = res.passes;
  out.rows_computed = res.rows_computed;
  out.prompt_ms = res.prompt_ms;
  out.decode_ms = res.decode_ms;
  out.finish_reason = schema_mode ? "stop" : "length";  // a schema's scaffold is a whole document
  if (r.on_text) r.on_text(out.text, -1);
  return out;
}

}  // namespace canvas
