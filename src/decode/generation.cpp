// The one generation path: a request's prompt, defaults and checks, its decoding method, streamed text with
// stop ids and strings, and one result schema for every mode.
#include "decode/generation.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/timer.h"
#include "decode/ar.h"
#include "decode/gemma_channels.h"
#include "decode/mode_router.h"
#include "text/text_stream.h"
#include "decode/uniform_state.h"
#include "decode/verify.h"
#include "model/limits.h"

namespace canvas {

namespace {
// Thrown out of the decoding loop's callbacks when the request is cancelled.
struct Cancelled {};
constexpr int64_t kMaxNewTokens = int64_t(1) << 20;
}  // namespace

ForwardFn request_forward(const GenerationRequest& r, std::function<void()> abandon) {
  if (!r.forward && !r.cancelled) return {};
  return [&r, abandon = std::move(abandon)](const Model& m, KvCache& cache, std::span<const ForwardRequest> reqs,
                                            ThreadPool* p) {
    if (r.cancelled && r.cancelled()) abandon();
    if (r.forward) r.forward(m, cache, reqs, p);
    else forward_on(m, cache, reqs, p);
  };
}

DecodeMode parse_decode_mode(const std::string& name) {
  if (name == "auto") return DecodeMode::Auto;
  if (name == "diffusion") return DecodeMode::Diffusion;
  if (name == "ar") return DecodeMode::Ar;
  if (name == "verify") return DecodeMode::Verify;
  throw Error("unknown mode '" + name + "' (auto, diffusion, ar, verify)");
}

const char* decode_mode_name(DecodeMode mode) {
  switch (mode) {
    case DecodeMode::Auto: return "auto";
    case DecodeMode::Diffusion: return "diffusion";
    case DecodeMode::Ar: return "ar";
    case DecodeMode::Verify: return "verify";
  }
  return "?";
}

Generator::Generator(const Model& model, const TextTokenizer* tokenizer, SamplerDefaults defaults,
                     const ChatFormat* chat)
    : model_(model),
      tokenizer_(tokenizer),
      defaults_(std::move(defaults)),
      chat_(chat),
      codec_(std::make_shared<CodecCache>()) {
  const ModelConfig& c = model_.config;
  auto add = [&](int32_t id) {
    if (id >= 0 && id != c.mask_token && std::find(stop_ids_.begin(), stop_ids_.end(), id) == stop_ids_.end())
      stop_ids_.push_back(id);
  };
  if (c.uniform_state) {
    for (int32_t id : defaults_.params.eos_ids) add(id);
    add(defaults_.params.pad_id);
  } else {
    add(c.eos_token);
    add(c.pad_token);
  }
  // The chat format's end of turn, and in a format with Gemma 4's channels the hand-over to the tools after a
  // call: an AR model stops at its config's one EOS id, so without them it would write on past its turn
  // (after a call, the tool's response it makes up).
  if (chat_ && tokenizer_) {
    std::vector<std::string> ends;
    if (!chat_->turn_end.empty()) ends.push_back(chat_->turn_end);
    if (chat_format_has_channels(*chat_)) ends.emplace_back(kGemmaToolHandover);
    for (const std::string& text : ends)
      if (const std::vector<int32_t> end = tokenizer_->encode(text, false); end.size() == 1) add(end[0]);
  }
}

bool Generator::has_diffusion() const {
  const ModelConfig& c = model_.config;
  return c.uniform_state || (!c.causal && c.mask_token >= 0);
}

bool Generator::has_ar() const {
  const ModelConfig& c = model_.config;
  return c.causal || c.shift_logits || c.uniform_state || c.mask_token >= 0;
}

DecodeMode Generator::resolve(DecodeMode mode) const {
  return mode != DecodeMode::Auto ? mode : model_default_mode(model_.config);
}

std::string Generator::mode_reason(const GenerationRequest& r) const {
  if (!r.mode_reason.empty()) return r.mode_reason;
  if (r.mode != DecodeMode::Auto) return "asked for";
  return model_default_reason(model_.config, defaults_.params.canvas_length);
}

std::vector<DecodeMode> Generator::modes() const {
  std::vector<DecodeMode> out = {resolve(DecodeMode::Auto)};  // auto's mode first
  auto add = [&](bool has, DecodeMode mode) {
    if (has && std::find(out.begin(), out.end(), mode) == out.end()) out.push_back(mode);
  };
  add(has_ar(), DecodeMode::Ar);
  add(supports_verify(model_.config), DecodeMode::Verify);
  add(has_diffusion(), DecodeMode::Diffusion);
  return out;
}

std::string Generator::mode_notice(DecodeMode mode) const {
  const ModelConfig& c = model_.config;
  if (resolve(mode) == DecodeMode::Ar && c.is_diffusion() && !c.uniform_state && !c.shift_logits)
    return "'" + c.arch + "' was trained as a masked-diffusion model, not left to right; --mode ar decodes it one "
           "[MASK] at a time (a comparison mode: expect weaker text than --mode diffusion)";
  return "";
}

std::vector<int32_t> Generator::prompt_of(const GenerationRequest& r) const {
  if (!r.prompt.empty()) return r.prompt;
  canvas::check(tokenizer_ != nullptr, "this generator has no tokenizer: give the prompt as token ids");
  if (!r.messages.empty() || r.chat) {
    canvas::check(chat_ != nullptr, "this generator has no chat format");
    return chat_->encode(*tokenizer_, r.messages.empty() ? std::vector<ChatMessage>{{"user", r.text}} : r.messages,
                         r.parse_special.value_or(false), r.chat_extras);
  }
  return tokenizer_->encode(r.text, true, r.parse_special.value_or(true));
}

int64_t Generator::new_tokens_of(const GenerationRequest& r, int64_t prompt_tokens, bool* clipped) const {
  if (clipped) *clipped = false;
  if (r.max_new_tokens > 0) return r.max_new_tokens;
  const ModelConfig& c = model_.config;
  const bool masked = resolve(r.mode) == DecodeMode::Diffusion && !c.uniform_state;
  const int64_t n = !r.to_end_of_turn ? (c.uniform_state ? defaults_.max_new_tokens : 64)
                    : masked          ? kMaskedTurnMaxTokens
                                      : kTurnMaxTokens;
  const int64_t room = c.context_length - prompt_tokens;
  if (room > 0 && room < n) {
    if (clipped) *clipped = true;
    return room;
  }
  return n;
}

int64_t Generator::verify_draft_length(const VerifyOptions& v) {
  return v.draft_length > 0 ? v.draft_length : VerifyParams{}.draft_length;
}

int64_t Generator::verify_rows(int64_t k, bool overlap) { return overlap ? (k + 1) * (k + 2) : k + 1; }

int64_t Generator::masked_block_length(const DiffusionOptions& d, int64_t n, int64_t prompt_tokens) const {
  if (d.block_length > 0) return std::min(d.block_length, n);
  // 32, the canvas padded to whole blocks and cut back; when the padding would not fit the context, one block.
  const int64_t block = std::min<int64_t>(32, n);
  const int64_t padded = (n + block - 1) / block * block;
  return prompt_tokens + padded > model_.config.context_length ? n : block;
}

MaskedDiffusionParams Generator::masked_params(const GenerationRequest& r) const {
  const DiffusionOptions& d = r.diffusion;
  const MaskedOptions& m = r.masked;
  MaskedDiffusionParams p;
  p.steps = d.steps;
  p.schedule =
      parse_step_schedule(!m.schedule.empty() ? m.schedule : model_.config.arch == "dream" ? "dream" : "llada");
  p.order = m.order;
  p.threshold = m.threshold;
  p.cache = m.cache;
  p.freeze = d.freeze || d.freeze_refresh > 0;
  p.freeze_refresh = d.freeze_refresh;
  p.sampling = r.sampling;
  return p;
}

MaskedDiffusionParams Generator::masked_params(const GenerationRequest& r, int64_t n,
                                               int64_t prompt_tokens) const {
  MaskedDiffusionParams p = masked_params(r);
  p.block_length = masked_block_length(r.diffusion, n, prompt_tokens);
  // Any N: the canvas is padded to whole blocks, and the text cut back to N tokens.
  p.gen_length = (n + p.block_length - 1) / p.block_length * p.block_length;
  if (p.steps == 0) p.steps = p.gen_length;
  return p;
}

EntropyBoundParams Generator::uniform_params(const GenerationRequest& r, int64_t n) const {
  const DiffusionOptions& d = r.diffusion;
  const UniformStateOptions& u = r.uniform_state;
  EntropyBoundParams p = defaults_.params;
  p.max_new_tokens = n;
  const int64_t canvas = u.canvas_length > 0 ? u.canvas_length : d.block_length;
  // The release's checkpoints denoise whole canvases of their canvas_length (the text is cut to N tokens),
  // as the reference does; canvas's own models shrink the canvas to N.
  if (canvas > 0) p.canvas_length = canvas;
  if (!model_.config.release_form || canvas > 0) p.canvas_length = std::min<int64_t>(p.canvas_length, n);
  if (d.steps > 0) p.max_denoising_steps = d.steps;
  if (u.entropy_bound >= 0) p.entropy_bound = u.entropy_bound;
  if (u.t_min >= 0) p.t_min = u.t_min;
  if (u.t_max >= 0) p.t_max = u.t_max;
  if (u.stability >= 0) p.stability_threshold = u.stability;
  if (u.confidence_threshold >= 0) p.confidence_threshold = u.confidence_threshold;
  p.seed = r.sampling.seed;
  if (r.ignore_eos) p.eos_ids.clear();
  p.stream_head = u.stream_head;
  if (r.temperature_given && r.sampling.temperature == 0) {
    p.greedy = true;
  } else if (r.temperature_given) {
    p.t_min *= r.sampling.temperature;
    p.t_max *= r.sampling.temperature;
  }
  p.top_k = r.sampling.top_k;
  p.top_p = r.sampling.top_p;
  p.min_p = r.sampling.min_p;
  // The streamed head has no logits to penalise: it drops the file's default, and only an explicit
  // neighbour penalty with it is an error.
  if (u.neighbor_penalty >= 0) p.neighbor_penalty = u.neighbor_penalty;
  else if (p.stream_head) p.neighbor_penalty = 1.f;
  p.freeze = d.freeze || d.freeze_refresh > 0;
  p.freeze_refresh = d.freeze_refresh;
  return p;
}

VerifyParams Generator::verify_params(const GenerationRequest& r, int64_t n) const {
  const VerifyOptions& v = r.verify;
  VerifyParams p;
  p.max_new_tokens = n;
  p.draft_length = verify_draft_length(v);
  p.draft_steps = v.draft_steps;
  p.overlap = v.overlap;
  if (v.draft_lookup >= 0) p.draft_lookup = v.draft_lookup;
  if (v.draft_lookup_length > 0) p.lookup_length = v.draft_lookup_length;
  p.datastore = v.datastore.get();
  if (v.datastore_min_count > 0) p.datastore_draft.min_count = v.datastore_min_count;
  if (v.datastore_length > 0) p.datastore_length = v.datastore_length;
  if (v.draft_tree >= 0) p.draft_tree = v.draft_tree;
  if (v.draft_tree_depth > 0) p.tree.depth = v.draft_tree_depth;
  p.sampling = r.sampling;
  p.draft_temperature = defaults_.params.t_min;
  p.stop_ids = stop_ids_;
  p.stop_at_eos = !r.ignore_eos;
  p.prefix_cache = r.prefix_cache;
  return p;
}

void Generator::check_context(const GenerationRequest& r, int64_t P) const {
  const ModelConfig& c = model_.config;
  canvas::check(P > 0, "the prompt encodes to no tokens");
  canvas::check(r.max_new_tokens >= 0 && r.max_new_tokens <= kMaxNewTokens, "-n must be between 1 and 1048576");
  const int64_t n = new_tokens_of(r, P);
  if (P + n > c.context_length)
    throw RequestRefused("prompt (" + std::to_string(P) + " tokens) + " + std::to_string(n) +
                             " new tokens exceed the model's context length " + std::to_string(c.context_length) +
                             " (at most " + std::to_string(std::max<int64_t>(0, c.context_length - P)) +
                             " new tokens after this prompt)",
                         RefusedOption::Length, true);
  // The KV cache the request sizes (P + n positions, and one more for AR's last token), refused before it is
  // allocated: a config's context length (up to kMaxContextLength) says nothing of this machine's memory.
  const int64_t per_token = kv_cache_bytes_per_position(c);
  const uint64_t limit = max_request_kv_bytes();
  const double kv_bytes = double(P + n + 1) * double(per_token);
  if (kv_bytes > double(limit)) {
    const int64_t most = std::max<int64_t>(0, int64_t(limit / uint64_t(per_token)) - P - 1);
    throw RequestRefused("prompt (" + std::to_string(P) + " tokens) + " + std::to_string(n) + " new tokens need " +
                             std::to_string(int64_t(kv_bytes / 1048576)) + " MiB of KV cache (" +
                             std::to_string(per_token) + " bytes a token on this model); one request may take " +
                             std::to_string(limit / 1048576) + " MiB, half the memory this process may use: at most " +
                             std::to_string(most) + " new tokens after this prompt",
                         RefusedOption::Length);
  }
}

void Generator::check(const GenerationRequest& r, int64_t P) const {
  const ModelConfig& c = model_.config;
  const DecodeMode mode = resolve(r.mode);
  check_context(r, P);
  const int64_t n = new_tokens_of(r, P);
  // Each mode's check names that mode: verify on an AR-only model is refused as verify, not as diffusion.
  canvas::check(mode != DecodeMode::Diffusion || c.is_diffusion(),
                "--mode diffusion: '" + c.arch + "' is an autoregressive model without a diffusion objective; use --mode ar");
  canvas::check(mode != DecodeMode::Ar || has_ar(),
                "--mode ar: '" + c.arch + "' cannot decode autoregressively; use --mode diffusion");
  canvas::check(mode != DecodeMode::Verify || supports_verify(c),
                "--mode verify needs a diffusion decoder and a causal path on the same weights (DiffusionGemma, or a "
                "uniform-state model); '" + c.arch + "' has not: use " +
                    (c.is_diffusion() && has_ar() ? "--mode ar or --mode diffusion"
                                                  : c.is_diffusion() ? "--mode diffusion" : "--mode ar"));
  const VerifyOptions& v = r.verify;
  canvas::check(v.draft_length >= 0 && v.draft_length <= 1024, "--draft-length must be between 1 and 1024");
  canvas::check(v.draft_steps >= 1 && v.draft_steps <= 64, "--draft-steps must be between 1 and 64");
  canvas::check(v.draft_lookup >= -1 && v.draft_lookup <= 64, "--draft-lookup must be between 0 and 64");
  canvas::check(v.draft_lookup_length >= 0 && v.draft_lookup_length <= 1024,
                "--draft-lookup-length must be between 1 and 1024");
  canvas::check(v.draft_tree >= -1 && v.draft_tree <= 63, "--draft-tree must be between 0 and 63");
  canvas::check(v.draft_tree_depth >= 0 && v.draft_tree_depth <= 63, "--draft-tree-depth must be between 1 and 63");
  if (mode == DecodeMode::Verify) {
    // A cycle's rows grow with k (with the square of k when overlapped), and each keeps a logits row: bounded
    // by the context and by kMaxVerifyLogitBytes before anything is allocated.
    auto fits = [&](int64_t rows) {
      return rows <= c.context_length && double(rows) * double(c.vocab) * sizeof(float) <= kMaxVerifyLogitBytes;
    };
    const int64_t k = verify_draft_length(v), rows = verify_rows(k, v.overlap);
    if (!fits(rows)) {
      int64_t most = 0;  // the longest draft that fits both bounds
      while (most < k && fits(verify_rows(most + 1, v.overlap))) ++most;
      const double bytes = double(rows) * double(c.vocab) * sizeof(float);
      throw Error("--draft-length " + std::to_string(k) + (v.overlap ? " with --overlap" : "") + " computes " +
                  std::to_string(rows) + " rows per pass (" + std::to_string(int64_t(bytes / 1048576)) +
                  " MiB of logits); the limit is the context (" + std::to_string(c.context_length) + " rows) and " +
                  std::to_string(int64_t(kMaxVerifyLogitBytes / 1048576)) + " MiB: at most --draft-length " +
                  std::to_string(most) + (v.overlap ? " with --overlap" : "") + " on this model");
    }
    // A lookup or datastore cycle verifies its draft and the last token in one pass.
    auto check_draft_rows = [&](bool used, const char* flag, int64_t length) {
      if (used && !fits(length + 1))
        throw Error(std::string(flag) + " " + std::to_string(length) + " computes " + std::to_string(length + 1) +
                    " rows per pass; the limit is the context (" + std::to_string(c.context_length) + " rows) and " +
                    std::to_string(int64_t(kMaxVerifyLogitBytes / 1048576)) + " MiB of logits on this model");
    };
    check_draft_rows(v.draft_lookup != 0, "--draft-lookup-length",
                     v.draft_lookup_length > 0 ? v.draft_lookup_length : VerifyParams{}.lookup_length);
    check_draft_rows(v.datastore != nullptr, "--draft-datastore-length",
                     v.datastore_length > 0 ? v.datastore_length : VerifyParams{}.datastore_length);
  }
  const bool uniform = mode == DecodeMode::Diffusion && c.uniform_state;
  // Masked diffusion's own options, refused where they would be ignored, naming the mode in use.
  const std::string mode_in_use = uniform ? std::string("uniform-state diffusion") : std::string("--mode ") + decode_mode_name(mode);
  const bool masked = mode == DecodeMode::Diffusion && !c.uniform_state;
  const DiffusionOptions& d = r.diffusion;
  const MaskedOptions& m = r.masked;
  const UniformStateOptions& u = r.uniform_state;
  canvas::check(m.threshold <= 0 || masked, "--threshold is masked diffusion's (Fast-dLLM), not " + mode_in_use +
                                                (uniform ? "'s: it accepts positions by --entropy-bound" : ""));
  canvas::check(m.cache == CacheMode::Prefix || masked,
                "--cache none|dual is masked diffusion's; " + mode_in_use + " keeps the prefix's K/V itself");
  const SamplingParams& s = r.sampling;
  canvas::check(std::isfinite(s.temperature) && s.temperature >= 0 && s.temperature <= 100,
                "--temp must be between 0 and 100");
  canvas::check(s.top_k >= 0, "--top-k must be >= 0");
  canvas::check(s.top_p > 0 && s.top_p <= 1, "--top-p must be in (0, 1]");
  canvas::check(s.min_p >= 0 && s.min_p <= 1, "--min-p must be in [0, 1]");
  canvas::check(std::isfinite(s.repeat_penalty) && s.repeat_penalty > 0, "--repeat-penalty must be > 0");
  canvas::check(std::isfinite(s.frequency_penalty) && std::isfinite(s.presence_penalty),
                "--frequency-penalty and --presence-penalty must be finite");
  const auto refuse_unless = [](bool condition, const std::string& message, RefusedOption option) {
    if (!condition) throw RequestRefused(message, option);
  };
  for (const auto& [id, bias] : s.logit_bias) {
    refuse_unless(id >= 0 && id < c.vocab,
                  "logit bias: token id " + std::to_string(id) + " is outside the vocabulary (ids 0 to " +
                      std::to_string(c.vocab - 1) + ")",
                  RefusedOption::LogitBias);
    refuse_unless(bias < std::numeric_limits<float>::infinity() && !std::isnan(bias),
                  "logit bias of token id " + std::to_string(id) + ": a number or -inf", RefusedOption::LogitBias);
  }
  // The presence and frequency penalties count the tokens generated before each one, left to right; a
  // diffusion canvas commits its positions in parallel, with no such history.
  const std::string diffusion_name = uniform ? "uniform-state diffusion" : "masked diffusion";
  refuse_unless(mode != DecodeMode::Diffusion || !s.counts_penalized(),
                "presence and frequency penalties count the tokens generated before each one, left to right: " +
                    diffusion_name + " (--mode diffusion) has no such order; use --mode ar" +
                    (supports_verify(c) ? " or verify" : "") +
                    (uniform ? " (its repetition control is --neighbor-penalty)" : ""),
                s.presence_penalty != 0 ? RefusedOption::PresencePenalty : RefusedOption::FrequencyPenalty);
  // The uniform-state sampler reads rows that also feed the next step (self-conditioning) or never exist
  // (--stream-head): no place where a bias means what it means to AR.
  refuse_unless(!uniform || s.logit_bias.empty(),
                "logit bias applies to --mode ar, verify and masked diffusion, not uniform-state diffusion (--mode "
                "diffusion): use --mode ar" + std::string(supports_verify(c) ? " or verify" : ""),
                RefusedOption::LogitBias);
  canvas::check(d.steps >= 0 && d.block_length >= 0, "--steps and --block-length must be positive");
  canvas::check(u.canvas_length >= 0, "--canvas-length must be positive");
  canvas::check(u.canvas_length == 0 || uniform,
                "--canvas-length is the canvas of uniform-state diffusion (DiffusionGemma); masked diffusion takes "
                "--block-length, and AR has no canvas");
  canvas::check(u.canvas_length == 0 || d.block_length == 0 || u.canvas_length == d.block_length,
                "--canvas-length and --block-length (its old name for uniform-state models) disagree");
  canvas::check(d.freeze_refresh >= 0, "--freeze-refresh must be >= 0");
  canvas::check(r.logprobs < 0 || !(uniform && u.stream_head),
                "log-probabilities need the materialised head: not with --stream-head");
  canvas::check(r.logprobs <= 100, "at most 100 alternatives per token (logprobs)");
  canvas::check(!u.stream_head || uniform,
                "--stream-head applies to uniform-state diffusion decoding (DiffusionGemma's entropy-bound sampler) only");
  for (const std::string& stop : r.stop) canvas::check(!stop.empty(), "--stop needs a non-empty string");
  if (uniform) {
    canvas::check(s.repeat_penalty == 1,
                  "--repeat-penalty applies to masked diffusion and --mode ar; the uniform-state sampler's repetition "
                  "control is --neighbor-penalty");
    const EntropyBoundParams p = uniform_params(r, n);
    canvas::check(!p.stream_head || (!p.greedy && p.top_k == 0 && p.top_p == 1 && p.min_p == 0),
                  "--temp 0, --top-k, --top-p and --min-p need the materialised head: not with --stream-head");
    canvas::check(p.neighbor_penalty > 0 && std::isfinite(p.neighbor_penalty),
                  "--neighbor-penalty must be positive (1: off)");
    canvas::check(!p.freeze || !p.stream_head, "--freeze needs the materialised head: not with --stream-head");
    canvas::check(p.neighbor_penalty == 1.f || !p.stream_head,
                  "--neighbor-penalty needs the materialised head: not with --stream-head");
    canvas::check(p.canvas_length > 0 && p.max_denoising_steps > 0, "--block-length and --steps must be positive");
    canvas::check(std::isfinite(p.entropy_bound) && std::isfinite(p.t_min) && std::isfinite(p.t_max) &&
                      p.entropy_bound >= 0 && p.t_min > 0 && p.t_max >= p.t_min,
                  "need --entropy-bound >= 0 and 0 < --t-min <= --t-max");
    canvas::check(p.stability_threshold >= 0 && p.confidence_threshold >= 0,
                  "--stability and --confidence-threshold must be >= 0");
  } else if (mode == DecodeMode::Diffusion) {
    canvas::check(c.mask_token >= 0, "model has no mask token: use --mode ar");
    canvas::check(m.threshold >= 0 && m.threshold <= 1, "--threshold must be in [0, 1]");
    if (!m.schedule.empty()) parse_step_schedule(m.schedule);
    const int64_t block = masked_block_length(d, n, P);
    const int64_t padded = (n + block - 1) / block * block;
    if (P + padded > c.context_length)
      throw RequestRefused("-n " + std::to_string(n) + " rounded up to whole blocks of " + std::to_string(block) +
                               " is " + std::to_string(padded) + " tokens, which with the prompt (" +
                               std::to_string(P) + " tokens) exceeds the model's context length " +
                               std::to_string(c.context_length) +
                               "; give -n a multiple of --block-length or a smaller --block-length",
                           RefusedOption::Length, true);
    const int64_t blocks = padded / block;
    canvas::check(d.steps == 0 || m.threshold > 0 || d.steps % blocks == 0,
                  "--steps (" + std::to_string(d.steps) + ") must be a multiple of the number of blocks (" +
                      std::to_string(blocks) + ")");
  }
}

namespace {

// How many of `tokens` the text needs: the fewest whose text is at least `text_bytes` long.
int64_t tokens_covering(const TextTokenizer& tokenizer, const std::vector<int32_t>& tokens, size_t text_bytes,
                        bool special_text) {
  int64_t lo = 0, hi = int64_t(tokens.size());
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    const std::vector<int32_t> prefix(tokens.begin(), tokens.begin() + mid);
    if ((special_text ? tokenizer.decode_with_special(prefix) : tokenizer.decode(prefix)).size() >= text_bytes) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

}  // namespace

// One request's run: what Generator::run sets up before the decoding loop (decode) and reads after it.
struct GenerationRun {
  GenerationRun(const Generator& g, const GenerationRequest& r, ThreadPool* pool);
  GenerationRun(const GenerationRun&) = delete;  // the callbacks point at it
  GenerationRun& operator=(const GenerationRun&) = delete;
  void decode();
  GenerationOutput finish();

  const Generator& g;
  const GenerationRequest& r;
  ThreadPool* pool;
  GenerationOutput out;
  int64_t P = 0, n = 0;
  bool clipped = false, uniform = false, masked = false;
  // Time spent in the caller's callbacks (a live view's drawing and pauses, printing) is not decoding.
  double callback_ms = 0;
  std::vector<int32_t> stop_ids;
  std::unique_ptr<TextStream> stream;
  int64_t canvas_length = 0;
  std::vector<int32_t> final_prefix;
  DecodeCallbacks callbacks;
  // The passes run, for the stats of a cancelled request (the loops report theirs only when they return).
  int64_t passes_run = 0;
  std::vector<TokenLogprob> logprobs;  // by position in the generated region
  std::vector<char> have_logprob;
  GenerationResult result;
  bool cancelled = false;
  double started_ms = 0;
  ArParams ar_params;
};

GenerationRun::GenerationRun(const Generator& generator, const GenerationRequest& request, ThreadPool* p)
    : g(generator), r(request), pool(p) {
  const ModelConfig& c = g.model_.config;
  out.mode = g.resolve(r.mode);
  out.mode_reason = g.mode_reason(r);
  out.modes = g.modes();
  out.prompt = g.prompt_of(r);
  out.seed = r.sampling.seed;
  P = int64_t(out.prompt.size());
  g.check(r, P);
  n = g.new_tokens_of(r, P, &clipped);
  uniform = out.mode == DecodeMode::Diffusion && c.uniform_state;
  masked = out.mode == DecodeMode::Diffusion && !c.uniform_state;

  // A chat turn also ends at the format's end-of-turn text (as a token id it is a stop id already).
  std::vector<std::string> stops = r.stop;
  if ((r.chat || !r.messages.empty()) && g.chat_ && !g.chat_->turn_end.empty() &&
      std::find(stops.begin(), stops.end(), g.chat_->turn_end) == stops.end())
    stops.push_back(g.chat_->turn_end);
  TextStream::Sink sink;
  if (r.on_text)
    sink = [this](const std::string& chunk, int64_t tokens) {
      const double t0 = now_ms();
      r.on_text(chunk, tokens);
      callback_ms += now_ms() - t0;
    };
  stop_ids = r.ignore_eos ? std::vector<int32_t>{} : g.stop_ids_;
  stream = std::make_unique<TextStream>(g.tokenizer_, stop_ids, stops, sink, r.special_text);
  callbacks.forward = request_forward(r, [] { throw Cancelled{}; });
  if (callbacks.forward)
    callbacks.forward = [inner = callbacks.forward, this](const Model& m, KvCache& cache,
                                                          std::span<const ForwardRequest> reqs, ThreadPool* tp) {
      inner(m, cache, reqs, tp);
      ++passes_run;
    };
  callbacks.on_step = [this, &c](const StepEvent& e) {
    // The finished prefix of the generated region: AR tokens are final at once, a masked canvas up to its
    // first masked position, a uniform-state run up to the canvas being denoised.
    const std::vector<int32_t>& region = *e.canvas;
    int64_t end = int64_t(region.size());
    if (uniform) end = std::min<int64_t>(end, e.block * canvas_length);
    else if (masked) end = std::find(region.begin(), region.end(), c.mask_token) - region.begin();
    if (e.final_end >= 0) end = std::min(end, e.final_end);  // set by the loop (verify: drafts follow)
    end = std::min(end, n);
    if (r.on_step) {
      const double t0 = now_ms();
      StepEvent shown = e;
      shown.final_end = end;
      r.on_step(shown);
      callback_ms += now_ms() - t0;
    }
    final_prefix.assign(region.begin(), region.begin() + end);
    stream->update(final_prefix);
    if (r.cancelled && r.cancelled()) throw Cancelled{};
  };
  callbacks.should_stop = [this] { return stream->stop_string_seen() || stream->stop_id_seen(); };
  if (r.logprobs >= 0) {
    callbacks.logprobs_top = r.logprobs;
    callbacks.on_logprob = [this](int64_t position, const TokenLogprob& lp) {
      if (int64_t(logprobs.size()) <= position) {
        logprobs.resize(size_t(position + 1));
        have_logprob.resize(size_t(position + 1), 0);
      }
      logprobs[size_t(position)] = lp;
      have_logprob[size_t(position)] = 1;
      if (r.on_logprob) r.on_logprob(position, lp);
    };
  }
  ar_params.max_new_tokens = n;
  ar_params.sampling = r.sampling;
  ar_params.stop_ids = g.stop_ids_;
  ar_params.stop_at_eos = !r.ignore_eos;
  ar_params.prefix_cache = r.prefix_cache;
  started_ms = now_ms();
}

void GenerationRun::decode() {
  try {
    if (uniform) {
      const EntropyBoundParams p = g.uniform_params(r, n);
      canvas_length = p.canvas_length;
      const EntropyBoundResult u = generate_uniform_state(g.model_, out.prompt, p, pool, callbacks, r.prefix_cache);
      result = u;
      out.encoder_passes = u.encoder_passes;
      out.steps_per_canvas = u.steps_per_canvas;
      out.decode_tokens = u.new_tokens;
    } else if (masked) {
      const MaskedDiffusionParams p = g.masked_params(r, n, P);
      result = generate_masked(g.model_, out.prompt, p, pool, callbacks);
      if (int64_t(result.tokens.size()) > n) result.tokens.resize(size_t(n));
      out.decode_tokens = int64_t(result.tokens.size());
    } else if (out.mode == DecodeMode::Verify) {
      const VerifyResult v = generate_verify(g.model_, out.prompt, g.verify_params(r, n), pool, callbacks);
      result = v;
      out.encoder_passes = v.encoder_passes;
      out.verify = v.stats;
      out.decode_tokens = std::max<int64_t>(0, int64_t(v.tokens.size()) - 1);  // the first comes with the prompt
    } else {
      result = generate_ar(g.model_, out.prompt, ar_params, pool, callbacks);
      out.decode_tokens = std::max<int64_t>(0, int64_t(result.tokens.size()) - 1);  // the first comes with the prompt
    }
  } catch (const Cancelled&) {
    // Only what was final is kept: AR's tokens, a masked canvas up to its first mask, a uniform-state run's
    // finished canvases (none when the first was still being denoised), verify's accepted tokens.
    cancelled = true;
  }
}

GenerationOutput GenerationRun::finish() {
  const ModelConfig& c = g.model_.config;
  if (cancelled) {
    result.tokens = final_prefix;
    result.passes = passes_run;
    result.decode_ms = now_ms() - started_ms;  // the prompt's pass included: the loop did not say when it ended
  }
  out.region = std::move(result.tokens);
  out.passes = result.passes;
  out.rows_computed = result.rows_computed;
  out.prompt_ms = result.prompt_ms;
  out.cached_prompt_tokens = result.cached_prompt_tokens;
  out.decode_ms = std::max(0.0, result.decode_ms - callback_ms);

  out.text = stream->finish(out.region);
  const auto stop = std::find_first_of(out.region.begin(), out.region.end(), stop_ids.begin(), stop_ids.end());
  out.tokens.assign(out.region.begin(), stop);
  if (stream->stop_string_seen() && g.tokenizer_)
    out.tokens.resize(size_t(tokens_covering(*g.tokenizer_, out.tokens, out.text.size(), r.special_text)));
  if (r.logprobs >= 0) {
    size_t known = 0;  // the text's tokens in order, up to the first one without a log-probability
    while (known < out.tokens.size() && known < have_logprob.size() && have_logprob[known]) ++known;
    out.logprobs.assign(logprobs.begin(), logprobs.begin() + known);
  }
  const int32_t pad = uniform ? g.defaults_.params.pad_id : c.pad_token;
  out.pad_tokens = pad >= 0 ? std::count(out.region.begin(), out.region.end(), pad) : 0;
  out.finish_reason = cancelled                    ? "cancelled"
                      : stream->stop_string_seen() ? "stop"
                      : stop != out.region.end()    ? "eos"
                      : clipped                     ? "context"
                                                    : "length";
  return std::move(out);
}

GenerationOutput Generator::run(const GenerationRequest& r, ThreadPool* pool) const {
  if (fills_holes(r)) return run_fill(r, pool);
  GenerationRun run(*this, r, pool);
  run.decode();
  return run.finish();
}

}  // namespace canvas
