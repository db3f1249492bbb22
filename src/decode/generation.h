// One generation request and its result, and the one dispatcher over the decoding methods (AR, masked
// diffusion, uniform-state diffusion). generate, chat, serve and the tests fill a GenerationRequest and read
// a GenerationOutput; the same request gives the same tokens from every front end.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "text/chat_template.h"
#include "decode/datastore.h"
#include "decode/events.h"
#include "decode/prefix_cache.h"
#include "decode/infill.h"
#include "text/json_schema.h"
#include "decode/masked.h"
#include "decode/sampling.h"
#include "decode/text_model.h"
#include "decode/verify.h"
#include "model/model.h"

namespace canvas {

struct GenerationRun;  // decode/generation.cpp

// auto: decided by decode/mode_router.h for every front end (options that imply a mode, holes to diffusion,
// the model's own way: the file's diffusion.default_mode, else diffusion for masked-diffusion models and AR
// otherwise; for a uniform-state model without a default_mode the fastest of ar and verify by the cost
// model); a Generator given auto runs the model's own way (Generator::resolve). verify: the diffusion decoder drafts and the causal path verifies
// (decode/verify.h): AR's text, several tokens per causal pass.
enum class DecodeMode { Auto, Diffusion, Ar, Verify };
// The most logits a draft-and-verify pass may hold (its rows x the vocabulary x 4 bytes): longer drafts
// are refused before anything is allocated.
constexpr double kMaxVerifyLogitBytes = 512.0 * 1048576;
// The most new tokens of a request that runs to the end of its turn: what the context leaves, at most
// kTurnMaxTokens (llama.cpp's default context: a long-context model's KV cache is sized by it, not by its
// whole context); masked diffusion, whose every pass covers the whole canvas left, at most
// kMaskedTurnMaxTokens (its blocks stop at the end of the text).
constexpr int64_t kTurnMaxTokens = 4096, kMaskedTurnMaxTokens = 256;
DecodeMode parse_decode_mode(const std::string& name);  // auto | diffusion | ar | verify; Error otherwise
const char* decode_mode_name(DecodeMode mode);

// The options of one decoding method, read by that method only; 0, -1 or empty keeps the default. A request
// holds one of each (GenerationRequest::diffusion, masked, uniform_state, verify); generate's and chat's
// flags and serve's JSON fields of the same names fill them.

// Both kinds of diffusion: masked (LLaDA, Dream) and uniform-state (DiffusionGemma).
struct DiffusionOptions {
  // Masked: the denoising steps of the whole canvas (default: its padded length, one token per step).
  // Uniform-state: the most passes per canvas (default: the model's max_denoising_steps).
  int64_t steps = 0;
  // Masked: the block length, min(block_length or 32, N) (Generator::masked_block_length); the canvas is
  // padded to whole blocks and cut back to N tokens. Uniform-state: the canvas length, as canvas_length
  // (its old name).
  int64_t block_length = 0;
  // Compute-aware decoding (an approximation): settled positions are not recomputed by later passes but for
  // a full pass every freeze_refresh steps (0: none); freeze_refresh > 0 implies freeze
  // (MaskedDiffusionParams::freeze, EntropyBoundParams::freeze).
  bool freeze = false;
  int64_t freeze_refresh = 0;
};

// Masked diffusion only.
struct MaskedOptions {
  std::string schedule;                         // llada | dream ("": dream for Dream models, llada otherwise)
  UnmaskOrder order = UnmaskOrder::Confidence;  // which positions a step unmasks (--algorithm)
  float threshold = 0.f;                        // > 0: Fast-dLLM's threshold decoding (the schedule ignored)
  CacheMode cache = CacheMode::Prefix;          // the K/V a block's steps reuse
};

// Uniform-state diffusion (the entropy-bound sampler, EntropyBoundParams); a negative value keeps the
// model's default (SamplerDefaults).
struct UniformStateOptions {
  int64_t canvas_length = 0;  // 0: the model's
  float entropy_bound = -1, t_min = -1, t_max = -1, confidence_threshold = -1, neighbor_penalty = -1;
  int64_t stability = -1;    // EntropyBoundParams::stability_threshold
  bool stream_head = false;  // no [canvas x vocab] logits: the head streamed (EntropyBoundParams)
};

// Draft-and-verify (VerifyParams): the diffusion decoder, n-gram lookups or a datastore draft, the causal
// path verifies.
struct VerifyOptions {
  int64_t draft_length = 0;  // tokens drafted per cycle (0: VerifyParams' default, 4)
  int64_t draft_steps = 1;   // decoder passes per draft
  // One pass per cycle that verifies the drafts and drafts the next cycle (VerifyParams::overlap).
  bool overlap = false;
  // Lookup drafts: the longest n-gram matched (VerifyParams::draft_lookup; -1: its default, 0: off) and
  // their length (VerifyParams::lookup_length; 0: its default).
  int64_t draft_lookup = -1;
  int64_t draft_lookup_length = 0;
  // Datastore drafts from this corpus (VerifyParams::datastore; null: off), the least occurrences of the
  // n-gram that drafts (0: DatastoreDraftParams' default) and the draft's most tokens (0: its default).
  std::shared_ptr<const Datastore> datastore;
  int64_t datastore_min_count = 0;
  int64_t datastore_length = 0;
  // Tree drafts of up to this many tokens a cycle (VerifyParams::draft_tree; -1: its default, 0: off), their
  // paths' most tokens (DraftTreeParams::depth; 0: its default).
  int64_t draft_tree = -1;
  int64_t draft_tree_depth = 0;
};

struct GenerationRequest {
  // The prompt: `prompt` ids when non-empty; else `messages` rendered by the model's chat format; else
  // `text`, encoded with the vocabulary's BOS (as one user turn of the chat format when `chat`).
  std::vector<int32_t> prompt;
  std::string text;
  bool chat = false;
  std::vector<ChatMessage> messages;
  ChatExtras chat_extras;  // the template's tools and thinking switch (with messages or chat)

  // Special-token text the client wrote (e.g. "<|turn>"): parsed as special tokens, or encoded as the
  // characters it is. Unset: message contents (and `text` with `chat`) are plain, so a client cannot open
  // or close turns, while a plain `text` prompt is parsed (it is the whole prompt, markers and all).
  std::optional<bool> parse_special;

  DecodeMode mode = DecodeMode::Auto;
  // Why `mode` (and the draft length and overlap) are what they are, when a front end chose them for auto
  // (ModeRouter::choose, decode/mode_router.h); reported as GenerationOutput::mode_reason. Empty: "asked for", or for auto the
  // model's own mode (Generator::resolve).
  std::string mode_reason;
  // 0: the default (a uniform-state model's max_new_tokens, else 64), cut to what the context leaves; with
  // to_end_of_turn, up to the end of the turn (Generator::new_tokens_of).
  int64_t max_new_tokens = 0;
  // Without max_new_tokens: decode until the text ends (EOS, end of turn, a stop string) or the context is
  // full, as llama-server and OpenAI's API do (chat and serve), instead of the default N (generate's -n).
  bool to_end_of_turn = false;
  // Masked and AR: as SamplingParams says. Uniform-state models map them onto the entropy-bound sampler:
  // temperature 0 (when given) makes an accepted position take its argmax, T > 0 scales both ends of the
  // temperature ramp (t_min * T, t_max * T; not given: the ramp as it is); top_k, top_p and min_p restrict
  // the token an accepted position draws; repeat_penalty does not apply (its neighbour penalty does).
  // frequency_penalty and presence_penalty count the tokens generated so far: AR and verify only (diffusion
  // is refused); logit_bias: AR, verify and masked diffusion (every position's row), not uniform-state.
  SamplingParams sampling;
  bool temperature_given = false;

  // Each decoding method's own options (above).
  DiffusionOptions diffusion;
  MaskedOptions masked;
  UniformStateOptions uniform_state;
  VerifyOptions verify;

  std::vector<std::string> stop;  // the text ends before the first of these (and generation stops)
  // Decode all N tokens: EOS, pad and end-of-turn ids neither end generation nor cut the text (stop strings
  // still do). For timing runs (random weights may pick EOS at any step); not with infilling or a schema.
  bool ignore_eos = false;

  // >= 0: each generated token's log-probability and this many most likely alternatives
  // (GenerationOutput::logprobs; TokenLogprob says which distribution). -1: off (nothing is computed).
  // Not with infilling or schemas, nor with a streamed uniform-state head.
  int64_t logprobs = -1;

  // Infilling and structured output (diffusion models fill holes; AR models only take a schema). With a
  // suffix, N tokens are filled between `text` and it; holes written <|hole:N|> in `text` are filled at once;
  // with a schema the output is a JSON document valid for it (diffusion: the scaffold is given and the value
  // holes decoded under per-hole token masks; AR: the same constraint masks tokens left to right).
  std::optional<std::string> suffix;
  std::shared_ptr<const JsonTemplate> json_schema;

  // The text (GenerationOutput::text and on_text's pieces) writes special tokens out as their text (e.g.
  // Gemma 4's "<|channel>"), for a front end that reads the format's markers (chat_reply); stop ids still end it.
  bool special_text = false;

  // Each decoding step (the canvas as it stands), and each new piece of final text, in order, with the number
  // of the generated region's first tokens whose text the text so far holds whole (TextStream; -1 for an
  // infilled document, whose text is not its tokens in order).
  std::function<void(const StepEvent&)> on_step;
  std::function<void(const std::string& piece, int64_t tokens)> on_text;
  // With logprobs >= 0: each token's log-probability as it is committed (its position in the generated
  // region), before the text it belongs to is sent to on_text.
  std::function<void(int64_t position, const TokenLogprob&)> on_logprob;
  // Runs the forward passes instead of forward() (DecodeCallbacks::forward): a server's batcher, or a
  // benchmark that counts each pass's rows before calling forward().
  ForwardFn forward;
  // Polled before every pass; true abandons the run (finish_reason "cancelled").
  std::function<bool()> cancelled;
  // K/V kept from one request to the next (a chat's turns): AR, verify and uniform-state runs encode only the
  // prompt tokens after those the cache holds, and leave theirs there. Null: nothing kept.
  PrefixCache* prefix_cache = nullptr;
};

// The passes of a request: r.forward (forward_on when unset), with r.cancelled polled before each pass;
// `abandon` runs, and throws, when it says true. Empty when the request sets neither (the loop's default).
ForwardFn request_forward(const GenerationRequest& r, std::function<void()> abandon);

struct GenerationOutput {
  DecodeMode mode = DecodeMode::Ar;  // the mode that ran (never Auto)
  std::vector<int32_t> prompt;
  // Every id the decoder left in the generated region (EOS and padding included; a masked canvas cut to N).
  std::vector<int32_t> region;
  // The text's tokens: those before the first EOS / pad / end-of-turn id, and only as many as the text
  // needs when a stop string cut it.
  std::vector<int32_t> tokens;
  std::string text;
  // With request.logprobs >= 0: one per token of `tokens` (fewer when cancelled).
  std::vector<TokenLogprob> logprobs;
  std::string finish_reason;  // eos | stop | length | context | cancelled
  int64_t pad_tokens = 0;     // region positions holding the pad id
  int64_t passes = 0;         // decoder passes (AR: steps) that produced logits
  int64_t encoder_passes = 0; // uniform-state: passes of the causal encoder over committed canvases; verify:
                              // the verifying causal passes (passes counts them too)
  VerifyStats verify;         // verify: its setting and what its cycles did
  std::string mode_reason;            // why this mode ran (GenerationRequest::mode_reason)
  std::vector<DecodeMode> modes;      // the modes the model runs (Generator::modes)
  int64_t rows_computed = 0;
  std::vector<int64_t> steps_per_canvas;  // uniform-state
  int64_t decode_tokens = 0;  // tokens produced after the prompt pass (AR: the first comes with it)
  std::vector<std::string> fills;  // infilling: each hole's text, in order
  int64_t filled_tokens = 0;       // infilling and schemas: canvas positions the model decided
  double prompt_ms = 0, decode_ms = 0;
  int64_t cached_prompt_tokens = 0;  // prompt tokens whose K/V a PrefixCache held (not run again)
  uint64_t seed = 0;

  double tokens_per_forward() const { return passes > 0 ? double(tokens.size()) / double(passes) : 0.0; }
  double tokens_per_second() const { return decode_ms > 0 ? double(decode_tokens) * 1000.0 / decode_ms : 0.0; }
};

// A request Generator::check refuses for one of its options (other refusals are plain Errors), so that a front
// end names its own field for it (serve: `max_tokens`, `presence_penalty`, `logit_bias`, ...).
enum class RefusedOption : uint8_t { Length, PresencePenalty, FrequencyPenalty, LogitBias };
class RequestRefused : public Error {
 public:
  RequestRefused(const std::string& message, RefusedOption option, bool exceeds_context = false)
      : Error(message), option(option), exceeds_context(exceeds_context) {}
  RefusedOption option;
  bool exceeds_context;  // the prompt and the new tokens do not fit the model's context
};

class Generator {
 public:
  // tokenizer and chat may be null (token-level use: no text, no messages).
  Generator(const Model& model, const TextTokenizer* tokenizer, SamplerDefaults defaults,
            const ChatFormat* chat = nullptr);
  explicit Generator(const TextModel& m) : Generator(m.model, &m.tokenizer, m.defaults, &m.chat) {}

  const Model& model() const { return model_; }
  const TextTokenizer* tokenizer() const { return tokenizer_; }
  const SamplerDefaults& defaults() const { return defaults_; }
  bool has_diffusion() const;  // the model decodes by diffusion (uniform-state, or masked with a mask token)
  bool has_ar() const;         // ... and left to right
  // auto -> the model file's diffusion.default_mode, else the model's own mode: diffusion for masked-diffusion
  // models, ar for the others (uniform-state models write AR's text; verify is chosen by a cost model).
  DecodeMode resolve(DecodeMode mode) const;
  std::string mode_reason(const GenerationRequest& request) const;  // why resolve(request.mode) runs
  std::vector<DecodeMode> modes() const;  // the modes this model runs: auto's own first, then ar, verify, diffusion
  // A notice for a mode that runs but is not what the model was trained for ("" when none).
  std::string mode_notice(DecodeMode mode) const;
  // Ids that end the text: the EOS ids, the pad id, the chat format's end-of-turn token and, in a format with
  // Gemma 4's channels, its hand-over to the tools (<|tool_response>).
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }

  std::vector<int32_t> prompt_of(const GenerationRequest& request) const;
  // N for a request with `prompt_tokens` prompt tokens: max_new_tokens; else the default cut to the context,
  // or with to_end_of_turn the context left (at most kTurnMaxTokens; kMaskedTurnMaxTokens for masked
  // diffusion). Sets *clipped when the context cut it.
  int64_t new_tokens_of(const GenerationRequest& request, int64_t prompt_tokens, bool* clipped = nullptr) const;
  // Masked diffusion's block length for N new tokens after `prompt_tokens`: the request's (cut to N), else 32
  // (the canvas padded to whole blocks and cut back to N) or, where that padding would overflow the context,
  // N (one block).
  int64_t masked_block_length(const DiffusionOptions& options, int64_t n, int64_t prompt_tokens) const;
  // Draft-and-verify's k: the options' draft_length, else VerifyParams' default.
  static int64_t verify_draft_length(const VerifyOptions& options);
  // Rows per request of one of draft-and-verify's passes with k drafts: k + 1, or (k + 1)(k + 2) when
  // overlapped.
  static int64_t verify_rows(int64_t draft_length, bool overlap);
  // Masked diffusion's settings of a request (steps 0: the caller's default; lengths left to the caller).
  MaskedDiffusionParams masked_params(const GenerationRequest& request) const;
  // ... and as run() decodes N new tokens after `prompt_tokens`: the block length (masked_block_length), the
  // canvas padded to whole blocks (gen_length) and the steps' default (the padded length: one token per
  // step).
  MaskedDiffusionParams masked_params(const GenerationRequest& request, int64_t n,
                                      int64_t prompt_tokens) const;
  // The uniform-state sampler's settings for a request (N new tokens).
  EntropyBoundParams uniform_params(const GenerationRequest& request, int64_t n) const;
  // Draft-and-verify's settings for a request (N new tokens).
  VerifyParams verify_params(const GenerationRequest& request, int64_t n) const;
  // Throws Error naming the option when the request cannot run on this model (mode, context, settings).
  void check(const GenerationRequest& request, int64_t prompt_tokens) const;
  // The part of check() that holds in every mode: a prompt, and prompt + N within the context.
  void check_context(const GenerationRequest& request, int64_t prompt_tokens) const;

  // Infilling or a schema: the request has a suffix, holes in its text or a JSON schema.
  static bool fills_holes(const GenerationRequest& request);
  GenerationOutput run(const GenerationRequest& request, ThreadPool* pool) const;

 private:
  friend struct GenerationRun;
  GenerationOutput run_fill(const GenerationRequest& request, ThreadPool* pool) const;
  const TextCodec& codec() const;  // the tokenizer as the infilling code sees it (built on first use)

  const Model& model_;
  const TextTokenizer* tokenizer_;
  SamplerDefaults defaults_;
  const ChatFormat* chat_;
  std::vector<int32_t> stop_ids_;
  struct CodecCache {
    std::once_flag built;
    TextCodec codec;
  };
  std::shared_ptr<CodecCache> codec_;
};

}  // namespace canvas
