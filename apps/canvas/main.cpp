// canvas: command-line front end (generate, logits, inspect).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "args.h"
#include "commands.h"
#include "device.h"
#include "infill.h"
#include "core/cpu.h"
#include "core/error.h"
#include "decode/ar.h"
#include "decode/masked.h"
#include "decode/uniform_state.h"
#include "io/gguf.h"
#include "io/npy.h"
#include "io/tokenizer.h"
#include "model/model.h"
#include "text_model.h"

using namespace canvas;
using canvas::cli::Args;
using canvas::cli::CanvasView;
using canvas::cli::make_pool;
using canvas::cli::sanitize_utf8;
using canvas::cli::TextTokenizer;

namespace {

const char* kUsage = R"(canvas: a C++ engine for text-diffusion language models

usage: canvas <command> [options]

commands:
  generate   generate text from a prompt (masked diffusion or autoregressive)
  chat       talk with a model (DiffusionGemma / Gemma chat template), one line per turn on stdin
  logits     write a model's logits for given token ids to a .npy file
  inspect    print a GGUF file's metadata and tensor table
  score      likelihood of a text under a left-to-right model (bits per byte)
  tokenize   print the token ids of a text (works on vocabulary-only GGUF files); detokenize: the reverse
  train      train a small diffusion or AR model from a config file (resumable)
  tokenizer  train a Gemma-style BPE tokenizer on a corpus; export it as tokenizer.json; measure it
  sudoku     generate Sudoku puzzle sets, solve puzzles with a model, evaluate solve rates
  convert    convert a Hugging Face DiffusionGemma / Gemma 4 checkpoint to GGUF
  quantize   re-type a GGUF file's matrices (f16, bf16, q8_0, q4_0, ..., q6_k), reporting every fallback
  bench      measure roofs, then AR vs diffusion decoding speed over a grid (model or synthetic)
  serve      OpenAI-compatible HTTP server with step-level batching and a live web page

Run `canvas <command> --help` or `canvas help <command>` for the options of a command;
`canvas --version` for the version and build.
)";

const cli::Command kGenerate{
    "generate",
    "canvas generate [-m MODEL] (-p TEXT | -f FILE | < FILE) [options]",
    R"(Generates text with a masked-diffusion model (LLaDA, Dream, LLaDA-MoE families), a uniform-state
diffusion model (entropy-bound sampler: DiffusionGemma, canvas's own uniform-state models) or
autoregressively on the same weights (DiffusionGemma: through its causal encoder).
The text is streamed to stdout as it is finalised (in order: a masked block's tokens appear once every
position before them is committed), then one stats line goes to stderr; with --json one JSON object
instead.)",
    {
        {"-m,--model", "MODEL", "GGUF file, or a Hugging Face safetensors directory (DiffusionGemma / Gemma 4)\n"
                                "(default: the shipped text model, models/text-dg.gguf)"},
        {"-p,--prompt", "TEXT", "prompt text (encoded with the model's tokenizer); '-' reads it from stdin"},
        {"-f,--file", "FILE", "read the prompt from a file (one trailing newline dropped); without -p and -f,\n"
                              "a prompt piped into stdin is read"},
        {"--tokenizer", "FILE", "tokenizer.json or a GGUF with a tokenizer (default: the model's own: the GGUF's,\n"
                                "or tokenizer.json beside a safetensors checkpoint)"},
        {"--chat", "", "wrap the prompt in the Gemma chat template\n<bos><|turn>user\\n{prompt}<turn|>\\n<|turn>model\\n"},
        {"-n,--n-predict", "N", "tokens to generate (default 64; generation_config.json's max_new_tokens); any N:\n"
                                "masked diffusion pads the last block and cuts it; prompt + N must fit the\n"
                                "model's context length"},
        {"--mode", "MODE", "diffusion | ar (default diffusion for diffusion models, ar otherwise); diffusion\n"
                           "on an autoregressive model is refused, ar on a masked-diffusion model warns"},
        {"--steps", "S", "masked: denoising steps in total (default = N: one token per step), a multiple\n"
                         "of the number of blocks; uniform-state: the most steps per canvas (default 48)"},
        {"--block-length", "B", "masked: block length of the semi-autoregressive schedule (default 32, or N if\n"
                                "smaller); uniform-state: the canvas length (default: the model's)"},
        {"--stop,-r,--reverse-prompt", "STR", "end the text (and generation) at the first occurrence of STR", true},
        {"--temp,--temperature", "T", "temperature (default 0 = greedy); sampling is Gumbel-max"},
        {"--top-k", "K", "keep the K most likely tokens before sampling (0 = off)"},
        {"--top-p", "P", "nucleus sampling mass (1 = off)"},
        {"--min-p", "P", "keep tokens whose probability is at least P times the most likely one's (0 = off)"},
        {"--repeat-penalty", "R", "divide the logits of the last 64 tokens (masked: those before the block and\n"
                                  "every committed one) by R, as llama.cpp does (default 1 = off)"},
        {"-s,--seed", "N", "random seed; -1 or absent: a random one, reported in the stats line and JSON;\n"
                           "the same seed gives the same tokens at any thread count"},
        {"-t,--threads", "N", "threads (default: all cores; more than the cores warns)"},
        {"--device", "NAME", cli::kDeviceHelp},
        {"--no-stream", "", "print the text only when generation has finished"},
        {"--visual", "", "redraw the canvas on stderr at every step (masked positions shown as a shaded\n"
                         "block, control characters escaped); only when stderr is a terminal"},
        {"--visual-delay", "MS", "with --visual: wait MS milliseconds after each redraw, to watch it"},
        {"--json", "", "print one JSON object: text, tokens, prompt_tokens, passes, tokens_per_pass,\n"
                       "prompt_ms, decode_ms, tokens_per_second, seed (uniform-state: also new_tokens,\n"
                       "tokens_per_forward = non-pad tokens / decoder passes, encoder_passes, steps_per_canvas)"},
        cli::heading("Uniform-state diffusion only (defaults: the checkpoint's generation_config.json or GGUF diffusion.*\n"
                     "keys, else DiffusionGemma's release values; EOS ids from there too, else {1, 106, 50} for Gemma):"),
        {"--entropy-bound", "E", "entropy budget (nats) of the positions accepted per step (default 0.1)"},
        {"--t-min", "T", "temperature schedule T = t_min + (t_max - t_min) * s / steps (default 0.4)"},
        {"--t-max", "T", "(default 0.8)"},
        {"--stability", "K", "the argmax canvas must repeat K times before the adaptive stop (default 1)"},
        {"--confidence-threshold", "C", "adaptive stop when the mean entropy is below C (default 0.005)"},
        {"--neighbor-penalty", "P", "penalise, at each canvas position, the token its left neighbour takes, as a\n"
                                    "repetition penalty does (logit / P): against adjacent repeats (\"thy thy\")\n"
                                    "of parallel decoding. Default: the file's diffusion.eb_neighbor_penalty (not with\n"
                                    "--stream-head), else 1 (off)"},
        {"--stream-head", "", "fused streaming LM head (off by default): each decoder pass reduces its logits\n"
                              "tile by tile to entropies, argmax and a Gumbel-max sample, and hands the next\n"
                              "step softmax(logits / T) @ E instead of [canvas x vocab] logits. Same sampler\n"
                              "and distribution, a different random stream: the same seed gives other tokens"},
        cli::heading("Masked diffusion only:"),
        {"--schedule", "NAME", "llada (tokens per step from the block's mask count, default for llada)\n"
                               "| dream (timestep schedule t: 1 -> eps, default for dream)"},
        {"--algorithm", "NAME", "unmasking order: confidence | margin | entropy | random | origin\n"
                                "(default confidence; scores use the softmax of the untempered logits)"},
        {"--threshold", "T", "Fast-dLLM parallel decoding: commit every masked position of the block with\n"
                             "confidence >= T (at least one per step); overrides --steps"},
        {"--cache", "KIND", "none (recompute everything; the reference) | prefix (exact: prompt and\n"
                            "finished blocks computed once) | dual (also reuse the masked suffix within a\n"
                            "block; approximate). Default prefix."},
        {"--freeze", "", "compute-aware decoding (approximate, off by default): after a block's first\n"
                         "pass, recompute only its masked positions and those committed by the previous\n"
                         "step; other positions keep their cached K/V (docs/performance.md). Uniform-state\n"
                         "too: a position accepted as its argmax with the same token two steps in a row is\n"
                         "frozen (its row skipped, its K/V kept) for the rest of the canvas"},
        {"--freeze-refresh", "N", "with --freeze (implied): also recompute everything every N steps of a block"},
        cli::heading("Infilling and structured output (diffusion models fill holes; AR models only do --json-schema):"),
        {"--suffix", "TEXT", "fill -n tokens between the prompt and TEXT; the prompt may instead (or also) hold\n"
                             "holes written <|hole:N|> (N tokens each), all filled at once. Prints the whole\n"
                             "text; --json adds \"fills\" (each hole's text)"},
        {"--json-schema", "FILE", "output valid by construction for a JSON Schema subset (docs/infill.md); -n is an\n"
                                  "upper bound and stdout holds the JSON alone. Diffusion: the scaffold is given\n"
                                  "and the value holes are decoded in any order under per-hole token masks;\n"
                                  "--mode ar: the same constraint masks tokens left to right"},
    },
    ""};

const cli::Command kLogits{
    "logits",
    "canvas logits -m MODEL --ids 1,2,3 --out FILE.npy [--causal]\n"
    "       canvas logits -m MODEL --ids 1,2,3 --canvas-ids 4,5,6 [--self-cond PREV.npy] --out FILE.npy",
    R"(Runs one forward pass over the token ids and writes the logits of every position as a float32 NumPy
array of shape [n, vocab]. Diffusion models attend bidirectionally unless --causal is given; causal
models always attend causally. Rows are the model's own (no shift applied).

DiffusionGemma (models with an encoder and a decoder): without --canvas-ids, the encoder's causal
(sliding-window) logits of every id, [n, vocab]. With --canvas-ids, the ids are encoded into the KV
cache and the decoder's logits of the canvas that follows them are written, [canvas, vocab]; the
canvas attends bidirectionally to the cache and to itself. --self-cond gives the previous denoising
step's logits ([canvas, vocab] .npy) to the self-conditioning input; without it the input is zeros, as
on a canvas's first step.)",
    {
        {"-m,--model", "MODEL", "GGUF file, or a Hugging Face safetensors directory (or its config.json)"},
        {"--ids", "LIST", "comma-separated token ids"},
        {"--canvas-ids", "LIST", "comma-separated canvas ids: decoder logits after --ids (DiffusionGemma)"},
        {"--self-cond", "FILE", "previous step's logits for the decoder's self-conditioning (.npy)"},
        {"--out", "FILE", "output .npy file"},
        {"--causal", "", "causal (autoregressive) attention"},
        {"-t,--threads", "N", "threads (default: all cores)"},
    },
    ""};

const cli::Command kInspect{
    "inspect",
    "canvas inspect FILE.gguf [--all]",
    R"(Prints the GGUF header, every metadata key with its type and value (long arrays abbreviated unless
--all), and a table of tensors (name, dtype, shape, bytes, offset).)",
    {
        {"--all", "", "print long arrays in full"},
    },
    ""};

std::string json_escape(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (ch < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", ch);
          out += buf;
        } else {
          out += char(ch);
        }
    }
  }
  return out;
}

int cmd_generate(int argc, char** argv) {
  if (cli::print_help_if_asked(kGenerate, argc, argv)) return 0;
  Args args(kGenerate, argc, argv, 2);
  check(args.positional().empty(), "unexpected argument '" + (args.positional().empty() ? "" : args.positional()[0]) + "'");
  const std::string prompt_text = cli::read_prompt(args, "canvas generate");
  const std::string model_path = args.has("model") ? args.get("model", "") : cli::shipped_model_path(cli::kDefaultTextModel, "canvas generate");
  Model model = Model::load(model_path);
  cli::use_device(model, args.get("device", "cpu"));
  const ModelConfig& c = model.config;
  const TextTokenizer tokenizer = TextTokenizer::for_model(model, model_path, args.get("tokenizer", ""));
  // Infilling (--suffix, <|hole:N|>) and schema-constrained output (--json-schema): apps/canvas/infill.cpp.
  if (cli::infill_requested(args)) return cli::run_infill(args, model, model_path, tokenizer);
  const std::vector<int32_t> prompt =
      args.has("chat") ? tokenizer.encode(cli::gemma_user_turn(prompt_text, true), false)
                       : tokenizer.encode(prompt_text, true);
  check(!prompt.empty(), "the prompt encodes to no tokens");
  const cli::SamplerDefaults defaults = cli::sampler_defaults(model, model_path);

  const int64_t n = args.get_int("n-predict", c.uniform_state ? defaults.max_new_tokens : 64);
  check(n > 0 && n <= 1 << 20, "-n must be between 1 and 1048576");
  check(int64_t(prompt.size()) + n <= c.context_length,
        "prompt (" + std::to_string(prompt.size()) + " tokens) + " + std::to_string(n) +
            " new tokens exceed the model's context length " + std::to_string(c.context_length) + " (at most " +
            std::to_string(std::max<int64_t>(0, c.context_length - int64_t(prompt.size()))) +
            " new tokens after this prompt)");
  const std::string mode = args.get("mode", c.is_diffusion() ? "diffusion" : "ar");
  check(mode == "diffusion" || mode == "ar", "--mode must be diffusion or ar");
  check(mode == "ar" || c.is_diffusion(),
        "--mode diffusion: '" + c.arch + "' (" + model_path +
            ") is an autoregressive model without a diffusion objective; use --mode ar");
  const bool is_uniform = mode == "diffusion" && c.uniform_state;
  if (mode == "ar" && c.is_diffusion() && !c.uniform_state && !c.shift_logits)
    std::fprintf(stderr,
                 "canvas: warning: '%s' was trained as a masked-diffusion model, not left to right; --mode ar decodes it "
                 "one [MASK] at a time (a comparison mode: expect weaker text than --mode diffusion)\n",
                 c.arch.c_str());
  check(!args.has("stream-head") || is_uniform,
        "--stream-head applies to uniform-state diffusion decoding (DiffusionGemma's entropy-bound sampler) only");

  const uint64_t seed = cli::resolve_seed(args);
  const SamplingParams sampling = cli::sampling_params(args, seed);
  check(!is_uniform || (!args.has("min-p") && !args.has("repeat-penalty") && !args.has("top-k") &&
                        !args.has("top-p") && !args.has("temp")),
        "--temp, --top-k, --top-p, --min-p and --repeat-penalty apply to masked diffusion and --mode ar; the "
        "uniform-state sampler's temperature is --t-min/--t-max");

  auto pool = make_pool(args);
  const bool visual = cli::visual_enabled(args);
  const bool json = args.has("json");
  // Tokens that end the text: the sampler's EOS ids for uniform-state models, else the config's EOS.
  std::vector<int32_t> stop_ids = c.uniform_state ? defaults.params.eos_ids : std::vector<int32_t>{c.eos_token};
  cli::TextStream stream(&tokenizer, stop_ids, args.get_all("stop"), !json && !args.has("no-stream"));
  CanvasView view(&tokenizer, c.mask_token, args.get_int("visual-delay", 0));
  DecodeCallbacks callbacks;
  int64_t canvas_length = 0;  // uniform-state: tokens per canvas (earlier canvases are final)
  std::vector<int32_t> final_prefix;
  callbacks.on_step = [&](const StepEvent& e) {
    if (visual) view.draw(e);
    // The finished prefix of the generated region: AR tokens are final at once, a masked canvas up to its
    // first masked position, a uniform-state run up to the canvas being denoised.
    const std::vector<int32_t>& region = *e.canvas;
    int64_t final_end = int64_t(region.size());
    if (is_uniform) {
      final_end = std::min<int64_t>(final_end, e.block * canvas_length);
    } else if (mode == "diffusion") {
      final_end = std::find(region.begin(), region.end(), c.mask_token) - region.begin();
    }
    final_end = std::min(final_end, n);
    final_prefix.assign(region.begin(), region.begin() + final_end);
    stream.update(final_prefix);
  };
  callbacks.should_stop = [&] { return stream.stop_string_seen(); };

  GenerationResult result;
  EntropyBoundResult uniform;  // uniform-state runs only
  int64_t decode_tokens = 0;
  if (is_uniform) {
    const EntropyBoundParams p = cli::uniform_state_params(args, defaults, n, seed);
    canvas_length = p.canvas_length;
    uniform = generate_uniform_state(model, prompt, p, pool.get(), callbacks);
    result = uniform;
    decode_tokens = uniform.new_tokens;
  } else if (mode == "diffusion") {
    check(c.mask_token >= 0, "model has no mask token: use --mode ar");
    MaskedDiffusionParams p;
    p.block_length = std::min<int64_t>(args.get_int("block-length", 32), n);
    check(p.block_length > 0, "--block-length must be positive");
    // Any N: the canvas is padded to whole blocks, and the text cut back to N tokens.
    p.gen_length = (n + p.block_length - 1) / p.block_length * p.block_length;
    check(int64_t(prompt.size()) + p.gen_length <= c.context_length,
          "-n " + std::to_string(n) + " rounded up to whole blocks of " + std::to_string(p.block_length) + " is " +
              std::to_string(p.gen_length) + " tokens, which with the prompt (" + std::to_string(prompt.size()) +
              " tokens) exceeds the model's context length " + std::to_string(c.context_length) +
              "; give -n a multiple of --block-length or a smaller --block-length");
    p.steps = args.get_int("steps", p.gen_length);
    p.schedule = parse_step_schedule(args.get("schedule", c.arch == "dream" ? "dream" : "llada"));
    p.order = parse_unmask_order(args.get("algorithm", "confidence"));
    p.threshold = float(args.get_float("threshold", 0.0));
    check(p.threshold >= 0 && p.threshold <= 1, "--threshold must be in [0, 1]");
    p.cache = parse_cache_mode(args.get("cache", "prefix"));
    p.freeze = args.has("freeze") || args.has("freeze-refresh");
    p.freeze_refresh = args.get_int("freeze-refresh", 0);
    check(p.freeze_refresh >= 0, "--freeze-refresh must be >= 0");
    p.sampling = sampling;
    result = generate_masked(model, prompt, p, pool.get(), callbacks);
    if (int64_t(result.tokens.size()) > n) result.tokens.resize(size_t(n));
    decode_tokens = int64_t(result.tokens.size());
  } else {
    ArParams p;
    p.max_new_tokens = n;
    p.sampling = sampling;
    p.stop_ids = stop_ids;
    result = generate_ar(model, prompt, p, pool.get(), callbacks);
    decode_tokens = int64_t(result.tokens.size()) - 1;  // the first token comes from the prompt pass
  }
  if (visual) view.finish();

  // Text ends at the first end-of-sequence token or stop string.
  const std::string text = stream.finish(result.tokens);
  const int64_t new_tokens = is_uniform ? uniform.new_tokens : int64_t(result.tokens.size());
  const double tokens_per_pass = result.passes ? double(new_tokens) / double(result.passes) : 0.0;
  const double tps = result.decode_ms > 0 ? double(decode_tokens) * 1000.0 / result.decode_ms : 0.0;
  if (json) {
    std::ostringstream out;
    out << "{\"text\": \"" << json_escape(sanitize_utf8(text)) << "\", \"tokens\": [";
    for (size_t i = 0; i < result.tokens.size(); ++i) out << (i ? ", " : "") << result.tokens[i];
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "], \"prompt_tokens\": %lld, \"passes\": %lld, \"tokens_per_pass\": %.4f, \"prompt_ms\": %.3f, "
                  "\"decode_ms\": %.3f, \"tokens_per_second\": %.3f, \"rows_computed\": %lld, \"seed\": %llu",
                  (long long)result.prompt_tokens, (long long)result.passes, tokens_per_pass, result.prompt_ms,
                  result.decode_ms, tps, (long long)result.rows_computed, (unsigned long long)seed);
    out << buf;
    if (is_uniform) {
      std::snprintf(buf, sizeof buf, ", \"new_tokens\": %lld, \"tokens_per_forward\": %.4f, \"encoder_passes\": %lld",
                    (long long)uniform.new_tokens, uniform.tokens_per_forward, (long long)uniform.encoder_passes);
      out << buf << ", \"steps_per_canvas\": [";
      for (size_t i = 0; i < uniform.steps_per_canvas.size(); ++i)
        out << (i ? ", " : "") << uniform.steps_per_canvas[i];
      out << "]";
    }
    out << "}";
    std::cout << out.str() << std::endl;
  } else {
    if (args.has("no-stream")) std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    if (is_uniform) {
      std::string steps;
      for (int64_t s : uniform.steps_per_canvas) steps += (steps.empty() ? "" : ",") + std::to_string(s);
      std::fprintf(stderr,
                   "[%lld new tokens, %lld decoder passes, tokens_per_forward %.2f, steps per canvas %s, %lld encoder "
                   "passes, prompt %lld tokens %.1f ms, decode %.1f ms, %.2f tokens/s, seed %llu, %s, %d threads]\n",
                   (long long)uniform.new_tokens, (long long)uniform.passes, uniform.tokens_per_forward, steps.c_str(),
                   (long long)uniform.encoder_passes, (long long)result.prompt_tokens, result.prompt_ms,
                   result.decode_ms, tps, (unsigned long long)seed, simd_level_name(simd_level()), pool->size());
    } else {
      std::fprintf(stderr,
                   "[%lld new tokens, %lld passes, %.2f tokens/pass, prompt %lld tokens %.1f ms, decode %.1f ms, %.2f "
                   "tokens/s, seed %llu, %s, %d threads]\n",
                   (long long)new_tokens, (long long)result.passes, tokens_per_pass, (long long)result.prompt_tokens,
                   result.prompt_ms, result.decode_ms, tps, (unsigned long long)seed, simd_level_name(simd_level()),
                   pool->size());
    }
  }
  return 0;
}

int cmd_logits(int argc, char** argv) {
  if (cli::print_help_if_asked(kLogits, argc, argv)) return 0;
  Args args(kLogits, argc, argv, 2);
  check(args.has("model"), "no model given (-m MODEL)");
  check(args.has("ids"), "no token ids given (--ids 1,2,3)");
  check(args.has("out"), "no output file given (--out FILE.npy)");
  const Model model = Model::load(args.get("model", ""));
  const ModelConfig& c = model.config;
  const std::vector<int32_t> ids = cli::parse_id_list(args.get("ids", ""), "--ids");
  const int64_t n = int64_t(ids.size());
  const bool decoder = args.has("canvas-ids");
  // The same bound generate enforces: positions past the context have no trained meaning (and no learned
  // position embedding).
  const int64_t canvas_n =
      decoder ? int64_t(cli::parse_id_list(args.get("canvas-ids", ""), "--canvas-ids").size()) : 0;
  check(n + canvas_n <= c.context_length,
        std::to_string(n) + " ids" + (decoder ? " + " + std::to_string(canvas_n) + " canvas ids" : std::string()) +
            " exceed the model's context length " + std::to_string(c.context_length));
  check(!decoder || c.has_decoder, "--canvas-ids needs a model with a decoder (DiffusionGemma); '" + c.arch +
                                       "' has none");
  check(decoder || !args.has("self-cond"), "--self-cond needs --canvas-ids");
  // DiffusionGemma's encoder is causal by construction; its bidirectional view is the decoder.
  const bool causal = args.has("causal") || c.causal || c.has_decoder;
  auto pool = make_pool(args);
  KvCache cache(c, n);
  std::vector<int32_t> groups(size_t(n), 0);
  if (causal)
    for (int64_t i = 0; i < n; ++i) groups[size_t(i)] = int32_t(i);
  ForwardRequest req;
  req.tokens = ids.data();
  req.n = n;
  req.groups = groups.data();
  std::vector<float> logits;
  if (!decoder) {
    for (int64_t i = 0; i < n; ++i) req.logit_rows.push_back(int32_t(i));
    logits.resize(size_t(n * c.vocab));
    req.logits = logits.data();
  }
  forward(model, cache, req, pool.get());
  int64_t rows = n;
  if (decoder) {
    const std::vector<int32_t> canvas = cli::parse_id_list(args.get("canvas-ids", ""), "--canvas-ids");
    rows = int64_t(canvas.size());
    NpyArray self_cond;
    if (args.has("self-cond")) {
      self_cond = read_npy(args.get("self-cond", ""));
      check(self_cond.shape == std::vector<int64_t>{rows, c.vocab},
            args.get("self-cond", "") + ": self-conditioning logits must have shape [" + std::to_string(rows) + ", " +
                std::to_string(c.vocab) + "] (canvas, vocab)");
    }
    ForwardRequest dec;
    dec.tokens = canvas.data();
    dec.n = rows;
    dec.pos0 = n;
    dec.decoder = true;
    dec.self_cond = args.has("self-cond") ? self_cond.data.data() : nullptr;
    for (int64_t i = 0; i < rows; ++i) dec.logit_rows.push_back(int32_t(i));
    logits.resize(size_t(rows * c.vocab));
    dec.logits = logits.data();
    forward(model, cache, dec, pool.get());
  }
  write_npy(args.get("out", ""), logits.data(), {rows, c.vocab});
  std::fprintf(stderr, "wrote %s: [%lld, %lld] float32 logits (%s)\n", args.get("out", "").c_str(), (long long)rows,
               (long long)c.vocab,
               decoder ? (args.has("self-cond") ? "decoder, self-conditioned" : "decoder")
                       : causal ? "causal attention" : "bidirectional attention");
  return 0;
}

int cmd_inspect(int argc, char** argv) {
  if (cli::print_help_if_asked(kInspect, argc, argv)) return 0;
  Args args(kInspect, argc, argv, 2);
  check(args.positional().size() == 1, "usage: canvas inspect FILE.gguf");
  auto file = GgufFile::open(args.positional()[0]);
  const size_t max_items = args.has("all") ? size_t(-1) : 8;
  std::printf("file: %s\nGGUF version %u, %llu bytes, alignment %llu, data at offset %llu\n", file->path().c_str(),
              file->version(), (unsigned long long)file->file_size(), (unsigned long long)file->alignment(),
              (unsigned long long)file->data_offset());
  std::printf("\nmetadata (%zu keys):\n", file->metadata().size());
  for (const auto& [key, value] : file->metadata()) {
    std::string type = gguf_type_name(value.type);
    if (value.type == GgufType::Array)
      type += std::string("<") + gguf_type_name(value.array_type) + ">[" + std::to_string(value.array_size()) + "]";
    std::printf("  %-44s %-22s %s\n", key.c_str(), type.c_str(), sanitize_utf8(value.to_string(max_items)).c_str());
  }
  int64_t total_bytes = 0, total_elements = 0;
  std::printf("\ntensors (%zu):\n  %-40s %-6s %-26s %14s %14s\n", file->tensors().size(), "name", "dtype", "shape",
              "bytes", "offset");
  for (const TensorView& t : file->tensors()) {
    const uint64_t offset = file->offset_of(t);
    std::printf("  %-40s %-6s %-26s %14lld %14llu\n", t.name.c_str(), dtype_name(t.type), t.shape_string().c_str(),
                (long long)t.bytes(), (unsigned long long)offset);
    total_bytes += t.bytes();
    total_elements += t.elements();
  }
  std::printf("\n%lld parameters, %.2f MiB of tensor data\n", (long long)total_elements, double(total_bytes) / 1048576.0);
  return 0;
}

}  // namespace

// `canvas --version`: the version, how this binary was built, and what it runs with on this machine.
void print_version() {
  std::printf("canvas %s\n", CANVAS_VERSION);
  std::printf("built: %s %s, %s, C++ %ld, %s build\n", __DATE__, __TIME__,
#if defined(__clang__)
              "clang " __clang_version__,
#else
              "gcc " __VERSION__,
#endif
              long(__cplusplus), CANVAS_BUILD_TYPE);
  std::printf("commit: %s (when the build was configured)\n", CANVAS_GIT_COMMIT);
  std::printf("cpu: %s kernels, %u cores\n", simd_level_name(simd_level()), std::thread::hardware_concurrency());
  const std::string data = cli::data_dir();
  std::printf("data dir: %s\n", data.empty() ? "(not installed; models/ from the source tree)" : data.c_str());
}

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 1 : 0;
  }
  if (std::string(argv[1]) == "--version" || std::string(argv[1]) == "-V" || std::string(argv[1]) == "version") {
    print_version();
    return 0;
  }
  // `canvas help [command]` is `canvas [command] --help`.
  std::vector<char*> help_argv;
  std::string help_flag = "--help";
  if (std::string(argv[1]) == "help") {
    if (argc < 3) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    help_argv = {argv[0], argv[2], help_flag.data(), nullptr};
    argc = 3;
    argv = help_argv.data();
  }
  const std::string command = argv[1];
  try {
    if (command == "generate") return cmd_generate(argc, argv);
    if (command == "chat") return cli::cmd_chat(argc, argv);
    if (command == "logits") return cmd_logits(argc, argv);
    if (command == "inspect") return cmd_inspect(argc, argv);
    if (command == "sudoku") return cli::cmd_sudoku(argc, argv);
    if (command == "train") return cli::cmd_train(argc, argv);
    if (command == "convert") return cli::cmd_convert(argc, argv);
    if (command == "bench") return cli::cmd_bench(argc, argv);
    if (command == "score") return cli::cmd_score(argc, argv);
    if (command == "tokenize") return cli::cmd_tokenize(argc, argv);
    if (command == "detokenize") return cli::cmd_detokenize(argc, argv);
    if (command == "tokenizer") return cli::cmd_tokenizer(argc, argv);
    if (command == "serve") return cli::cmd_serve(argc, argv);
    if (command == "quantize") return cli::cmd_quantize(argc, argv);
    const std::string suggestion = cli::unknown_option_message(command, {"generate", "chat", "logits", "inspect", "sudoku",
                                                                         "train", "convert", "bench", "score", "quantize", "tokenizer", "serve", "tokenize", "detokenize", "help"});
    const size_t mean = suggestion.find("did you mean");
    std::fprintf(stderr, "canvas: unknown command '%s'%s\n\n%s", command.c_str(),
                 mean == std::string::npos ? "" : ("; " + suggestion.substr(mean, suggestion.find('?') - mean + 1)).c_str(),
                 kUsage);
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "canvas %s: error: out of memory: a size asked for by the input files or the options (a "
                 "vocabulary, a context length, a batch) is more than this machine can hold\n",
                 command.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "canvas %s: error: %s\n", command.c_str(), e.what());
    return 1;
  }
}
