// Decoding options, requests from flags, loading and the live view shared by generate and chat.
#include "generation_options.h"
#include "shipped_models.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>

#include "cli/output_paths.h"
#include "core/error.h"
#include "decode/canvas_frame.h"
#include "decode/generation_report.h"
#include "decode/random_seed.h"
#include "decode/verify.h"
#include "device.h"
#include "io/input_file.h"

namespace canvas::cli {

std::vector<Option> decoding_options() {
  return {
        {"-n,--n-predict", "N", "tokens to generate (generate: default 64, a uniform-state model's\n"
                                "generation_config.json max_new_tokens, 256 for the DiffusionGemma release;\n"
                                "chat: to the end of the turn or the context); any N: masked diffusion pads the\n"
                                "last block and cuts it, the DiffusionGemma release denoises whole canvases\n"
                                "and cuts the text; prompt + N must fit the model's context length"},
        {"--mode", "MODE", "auto (default) | diffusion | ar | verify. diffusion on an autoregressive model is\n"
                           "refused, ar on a masked-diffusion model warns. verify (uniform-state models,\n"
                           "DiffusionGemma): the decoder drafts --draft-length tokens, one causal pass verifies\n"
                           "them: exactly --mode ar's text (greedy: the same tokens; sampling: the same\n"
                           "distribution), several tokens per pass. auto: the file's diffusion.default_mode,\n"
                           "else diffusion for masked-diffusion models, ar for autoregressive ones, and for\n"
                           "uniform-state models the fastest of ar and verify (each draft length, plain or\n"
                           "--overlap) measured on this machine (--cost-model); the stats line says which ran\n"
                           "(\"[verify k=8 (auto): ...]\"), --verbose also why. A verify option with auto\n"
                           "means --mode verify"},
        {"--cost-model", "FILE", "auto's cost model: pass times measured once per model and machine, and what\n"
                                 "verify keeps per cycle, learned from its runs (default: a file per model in\n"
                                 "$XDG_CACHE_HOME/canvas or ~/.cache/canvas; none: measured each run, not kept)"},
        {"--draft-length", "K", "verify: tokens drafted per cycle (default 4)"},
        {"--draft-steps", "S", "verify: decoder passes per draft, self-conditioned after the first (default 1)"},
        {"--overlap", "", "verify: one forward per cycle: the pass that verifies the drafts also drafts the\n"
                          "next cycle for every number of drafts that may be kept ((k+1)(k+2) rows per pass;\n"
                          "models with a decoder, --draft-steps 1)"},
        {"--draft-lookup", "N", "verify: lookup drafts: when the text's last n tokens (n = N down to 2; N = 1:\n"
                                "single tokens) occurred before (prompt or generated), the tokens that followed\n"
                                "their latest occurrence are the cycle's drafts, with no decoder pass (where the\n"
                                "text repeats itself they are often kept whole); the decoder drafts the other\n"
                                "cycles. 0 = off (default 3)"},
        {"--draft-lookup-length", "L", "verify: tokens per lookup draft, whatever --draft-length (default 8)"},
        {"--draft-datastore", "FILE", "verify: datastore drafts (retrieval, as REST) from the text in FILE, tokenized\n"
                                      "with the model's tokenizer (the ids cached in $XDG_CACHE_HOME/canvas or\n"
                                      "~/.cache/canvas, keyed by FILE's path, size and time and the tokenizer): a\n"
                                      "cycle with no lookup draft takes the longest of the text's last n tokens\n"
                                      "(n = 5 down to 2) that occurs in FILE at least --draft-datastore-count times\n"
                                      "and drafts its most common continuation there, with no decoder pass. With\n"
                                      "--mode auto: ar, verify with these drafts and verify with trees (--draft-tree\n"
                                      "8, 16, 32) are measured run by run (--cost-model) and the fastest kept"},
        {"--draft-datastore-count", "C", "verify: the fewest occurrences of a datastore n-gram that drafts (default 10)"},
        {"--draft-datastore-length", "L", "verify: tokens per datastore draft, whatever --draft-length (default 4)"},
        {"--draft-tree", "N", "verify: tree drafts: each cycle drafts a tree of up to N tokens (1-63), the\n"
                              "continuations the text's own n-grams and the datastore's vote for, best first,\n"
                              "and one pass with a tree mask verifies every path of it (instead of the lookup\n"
                              "and datastore chains; where they give none, the decoder drafts and its rows'\n"
                              "likeliest tokens make the tree). CPU only. 0 = off (default 0)"},
        {"--draft-tree-depth", "D", "verify: the most tokens on a path of a tree draft (default 8)"},
        {"--steps", "S", "masked: denoising steps in total (default = N: one token per step), a multiple\n"
                         "of the number of blocks; uniform-state: the most steps per canvas (default 48)"},
        {"--block-length", "B", "masked: block length of the semi-autoregressive schedule (default 32, or N if\n"
                                "smaller); uniform-state: its old name for --canvas-length"},
        {"--canvas-length", "L", "uniform-state: the canvas length, positions denoised together (default: the\n"
                                 "model's)"},
        {"--stop,-r,--reverse-prompt", "STR", "end the text (and generation) at the first occurrence of STR", true},
        {"--ignore-eos", "", "generate all N tokens: end-of-sequence, end-of-turn and pad tokens neither end\n"
                             "generation nor cut the text (stop strings still do), as llama.cpp's flag"},
        {"--temp,--temperature", "T", "temperature (0 = greedy; sampling is Gumbel-max). Default: the model's own\n"
                                      "(generation_config.json, GGUF general.sampling.*), else\n"
                                      "llama.cpp's 0.8 with top-k 40, top-p 0.95, min-p 0.05 for a pretrained AR\n"
                                      "model; 0 for canvas's own and diffusion models"},
        {"--top-k", "K", "keep the K most likely tokens before sampling (0 = off)"},
        {"--top-p", "P", "nucleus sampling mass (1 = off)"},
        {"--min-p", "P", "keep tokens whose probability is at least P times the most likely one's (0 = off)"},
        {"--repeat-penalty", "R", "divide the logits of the last 64 tokens (masked: those before the block and\n"
                                  "every committed one) by R, as llama.cpp does (default 1 = off)"},
        {"--presence-penalty", "P", "lower by P the logit of every token this run has generated (its text, not the\n"
                                    "prompt), as OpenAI's presence_penalty (default 0 = off; ar and verify only)"},
        {"--frequency-penalty", "F", "lower each token's logit by F times the number of times this run has\n"
                                     "generated it, as OpenAI's frequency_penalty (default 0 = off; ar and verify\n"
                                     "only)"},
        {"-l,--logit-bias", "ID(+|-)BIAS", "add BIAS to token ID's logit before sampling, greedy too (llama.cpp's\n"
                                           "syntax: 15043+1, 15043-0.5; 15043-inf bans the token, +100 all but forces\n"
                                           "it); may be given several times (ar, verify and masked diffusion)",
         true},
        {"-s,--seed", "N", "random seed; -1 or absent: a random one, reported by --verbose and --json;\n"
                           "the same seed gives the same tokens at any thread count"},
        {"-t,--threads", "N", "threads (default: the CPUs this process may use: its affinity and cgroup CPU\n"
                           "quota; more warns)"},
        {"--device", "NAME", kDeviceHelp},
        {"--cpu-moe", "", kCpuMoeHelp},
        {"--n-cpu-moe", "N", kNCpuMoeHelp},
        {"--check-weights", "", kCheckWeightsHelp},
        {"--no-stream", "", "print the text only when generation has finished"},
        {"--quiet", "", "no stats line on stderr: the text alone (llama.cpp's --log-disable too)"},
        {"-v,--verbose", "", "the full stats line: finish reason, passes, tokens per forward, the mode's own\n"
                             "counts (verify's drafts kept, diffusion's steps per canvas), why auto chose the\n"
                             "mode, prompt and decode times, seed, SIMD and threads (the default line: mode,\n"
                             "tokens, tokens/s)"},
        {"--visual", "", "redraw the canvas on stderr's alternate screen at every step under a header naming\n"
                         "the mode: the prompt cyan (a chat's turn on its own line), final tokens plain,\n"
                         "this step's commits bold green, masks as shaded blocks, noise and drafts dim;\n"
                         "the view is gone when the run ends (also on Ctrl-C) and the text follows on\n"
                         "stdout, once; only when stderr is a terminal"},
        {"--visual-delay", "MS", "with --visual: each frame stays at least MS milliseconds on screen (default 50;\n"
                                 "0: as fast as the model goes; the wait is not counted in the speed figures)"},
        heading("Uniform-state diffusion only (defaults: the checkpoint's generation_config.json or GGUF diffusion.*\n"
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
        heading("Masked diffusion only:"),
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
  };
}

std::unique_ptr<ThreadPool> make_pool(const Args& args) { return std::make_unique<ThreadPool>(thread_count(args)); }

uint64_t resolve_seed(const Args& args) {
  const int64_t seed = args.get_int("seed", -1);
  check(seed >= -1, "--seed must be >= 0, or -1 for a random seed");
  return seed >= 0 ? uint64_t(seed) : random_seed();
}

std::pair<int32_t, float> parse_logit_bias(const std::string& text) {
  const std::string usage = "--logit-bias takes TOKEN_ID(+|-)BIAS, e.g. 15043+1 or 15043-inf (got '" + text + "')";
  const size_t sign = text.find_first_of("+-");
  check(sign != std::string::npos && sign > 0 && sign < 10 &&
            text.find_first_not_of("0123456789") == sign && sign + 1 < text.size(),
        usage);
  const int32_t id = int32_t(std::stol(text.substr(0, sign)));
  const std::string magnitude = text.substr(sign + 1);
  const bool negative = text[sign] == '-';
  if (magnitude == "inf") {
    check(negative, "--logit-bias " + text + ": +inf is no logit; +100 all but forces a token");
    return {id, -std::numeric_limits<float>::infinity()};
  }
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(magnitude, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  check(used == magnitude.size() && std::isfinite(value) && magnitude[0] != '+' && magnitude[0] != '-' &&
            magnitude[0] != ' ',
        usage);
  return {id, float(negative ? -value : value)};
}

GenerationRequest request_from_args(const Args& args) {
  GenerationRequest r;
  if (args.has("n-predict")) {
    r.max_new_tokens = args.get_int("n-predict", 0);
    check(r.max_new_tokens > 0 && r.max_new_tokens <= 1 << 20, "-n must be between 1 and 1048576");
  }
  const std::string mode = args.get("mode", "auto");
  check(mode == "auto" || mode == "diffusion" || mode == "ar" || mode == "verify",
        "--mode must be diffusion, ar or verify (or auto)");
  r.mode = parse_decode_mode(mode);
  r.verify.draft_length = args.get_int("draft-length", 0);
  check(!args.has("draft-length") || (r.verify.draft_length >= 1 && r.verify.draft_length <= 1024),
        "--draft-length must be between 1 and 1024");
  r.verify.draft_steps = args.get_int("draft-steps", 1);
  r.verify.overlap = args.has("overlap");
  r.verify.draft_lookup = args.get_int("draft-lookup", -1);
  check(!args.has("draft-lookup") || (r.verify.draft_lookup >= 0 && r.verify.draft_lookup <= 64),
        "--draft-lookup must be between 0 and 64");
  r.verify.draft_lookup_length = args.get_int("draft-lookup-length", 0);
  check(!args.has("draft-lookup-length") ||
            (r.verify.draft_lookup_length >= 1 && r.verify.draft_lookup_length <= 1024),
        "--draft-lookup-length must be between 1 and 1024");
  r.verify.datastore_min_count = args.get_int("draft-datastore-count", 0);
  check(!args.has("draft-datastore-count") ||
            (r.verify.datastore_min_count >= 1 && r.verify.datastore_min_count <= 1 << 30),
        "--draft-datastore-count must be positive");
  r.verify.datastore_length = args.get_int("draft-datastore-length", 0);
  check(!args.has("draft-datastore-length") ||
            (r.verify.datastore_length >= 1 && r.verify.datastore_length <= 1024),
        "--draft-datastore-length must be between 1 and 1024");
  for (const char* option : {"draft-datastore-count", "draft-datastore-length"})
    check(!args.has(option) || args.has("draft-datastore"), std::string("--") + option + " needs --draft-datastore");
  r.verify.draft_tree = args.get_int("draft-tree", -1);
  check(!args.has("draft-tree") || (r.verify.draft_tree >= 0 && r.verify.draft_tree <= 63),
        "--draft-tree must be between 0 and 63");
  r.verify.draft_tree_depth = args.get_int("draft-tree-depth", 0);
  check(!args.has("draft-tree-depth") || (r.verify.draft_tree_depth >= 1 && r.verify.draft_tree_depth <= 63),
        "--draft-tree-depth must be between 1 and 63");
  check(!args.has("draft-tree-depth") || args.has("draft-tree"), "--draft-tree-depth needs --draft-tree");
  // Draft-and-verify's options are refused where they would be ignored, naming the mode in use.
  for (const char* option : {"overlap", "draft-length", "draft-steps", "draft-lookup", "draft-lookup-length",
                             "draft-datastore", "draft-datastore-count", "draft-datastore-length", "draft-tree",
                             "draft-tree-depth"})
    check(!args.has(option) || (mode != "ar" && mode != "diffusion"),
          std::string("--") + option + " applies to --mode verify, not --mode " + mode);
  auto positive = [&](const char* name) {
    const int64_t v = args.get_int(name, 0);
    check(!args.has(name) || v > 0, std::string("--") + name + " must be positive");
    return v;
  };
  r.diffusion.steps = positive("steps");
  r.diffusion.block_length = positive("block-length");
  r.uniform_state.canvas_length = positive("canvas-length");
  r.masked.schedule = args.get("schedule", "");
  r.masked.order = parse_unmask_order(args.get("algorithm", "confidence"));
  r.masked.threshold = float(args.get_float("threshold", 0.0));
  r.masked.cache = parse_cache_mode(args.get("cache", "prefix"));
  r.diffusion.freeze = args.has("freeze") || args.has("freeze-refresh");
  r.diffusion.freeze_refresh = args.get_int("freeze-refresh", 0);
  auto non_negative = [&](const char* name) {
    const double v = args.get_float(name, -1.0);
    check(!args.has(name) || (std::isfinite(v) && v >= 0), std::string("--") + name + " must be finite and >= 0");
    return float(v);
  };
  r.uniform_state.entropy_bound = non_negative("entropy-bound");
  r.uniform_state.t_min = non_negative("t-min");
  r.uniform_state.t_max = non_negative("t-max");
  r.uniform_state.confidence_threshold = non_negative("confidence-threshold");
  r.uniform_state.neighbor_penalty = non_negative("neighbor-penalty");
  r.uniform_state.stability = args.get_int("stability", -1);
  check(!args.has("stability") || r.uniform_state.stability >= 0, "--stability must be >= 0");
  r.uniform_state.stream_head = args.has("stream-head");
  r.stop = args.get_all("stop");
  r.ignore_eos = args.has("ignore-eos");
  SamplingParams& s = r.sampling;
  s.temperature = float(args.get_float("temp", 0.0));
  check(std::isfinite(s.temperature) && s.temperature >= 0 && s.temperature <= 100, "--temp must be between 0 and 100");
  r.temperature_given = args.has("temp");
  s.top_k = args.get_int("top-k", 0);
  s.top_p = float(args.get_float("top-p", 1.0));
  s.min_p = float(args.get_float("min-p", 0.0));
  s.repeat_penalty = float(args.get_float("repeat-penalty", 1.0));
  check(std::isfinite(s.repeat_penalty) && s.repeat_penalty > 0,
        "--repeat-penalty must be finite and > 0 (got " + args.get("repeat-penalty", "") + ")");
  s.presence_penalty = float(args.get_float("presence-penalty", 0.0));
  s.frequency_penalty = float(args.get_float("frequency-penalty", 0.0));
  check(std::isfinite(s.presence_penalty) && std::isfinite(s.frequency_penalty),
        "--presence-penalty and --frequency-penalty must be finite");
  for (const std::string& bias : args.get_all("logit-bias")) s.logit_bias.push_back(parse_logit_bias(bias));
  s.seed = resolve_seed(args);
  return r;
}

SamplingGiven sampling_given(const Args& args) {
  return {args.has("temp"), args.has("top-k"), args.has("top-p"), args.has("min-p")};
}

RouterOptions router_options(const Args& args, const TextModel& m, ThreadPool* pool) {
  RouterOptions o;
  o.cost_model_key = cost_model_key(m.path, int64_t(pool->size()), device_label(device_choice(args)));
  o.cost_model_file = args.get("cost-model", "");
  if (o.cost_model_file.empty()) o.cost_model_file = default_cost_model_file(o.cost_model_key);
  if (o.cost_model_file == "none") o.cost_model_file.clear();
  o.datastore = args.has("draft-datastore");
  o.lazy_timing = pool;
  return o;
}

std::shared_ptr<const Datastore> load_datastore(const Args& args, const TextModel& m) {
  const std::string path = args.get("draft-datastore", "");
  if (!args.has("draft-datastore")) return nullptr;
  check(!path.empty(), "--draft-datastore needs a file name");
  return load_datastore_reporting(path, m.tokenizer, "canvas", args.has("quiet"));
}

void check_model_path(const std::string& path, const std::string& command) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (!fs::is_directory(path, error) || fs::exists(fs::path(path) / "config.json", error)) return;
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(path, error))
    if (e.path().extension() == ".gguf") names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  std::string ggufs;
  for (const std::string& name : names) ggufs += (ggufs.empty() ? "" : ", ") + name;
  throw Error("-m " + path + " is a folder without config.json (not a Hugging Face checkpoint): " + command +
              " takes one model, a GGUF file or a checkpoint folder" +
              (ggufs.empty() ? "" : " (GGUF files there: " + ggufs + ")") +
              "; canvas serve -m FOLDER serves every GGUF in a folder");
}

TextModel load_text_model(const Args& args, const std::string& default_model, const std::string& command) {
  const DeviceChoice device = device_choice(args);
  const std::string path = args.has("model") ? args.get("model", "") : shipped_model_path(default_model, command);
  check_model_path(path, command);
  Model model = Model::load(path);
  if (args.has("check-weights")) check_all_weights(model, path);
  use_device(model, device);
  return TextModel::from(std::move(model), path, args.get("tokenizer", ""), args.get("template", "auto"));
}

namespace {

// The text without one trailing newline (as a file or a pipe usually ends).
std::string without_final_newline(std::string text) {
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (!text.empty() && text.back() == '\r') text.pop_back();
  return text;
}

}  // namespace

std::string read_prompt(const Args& args, const std::string& help_command) {
  check(!(args.has("prompt") && args.has("file")), "give one of -p TEXT and -f FILE, not both");
  if (args.has("file")) {
    return without_final_newline(
        read_file_bounded(args.get("file", ""), kMaxPromptBytes, "prompt file", "kMaxPromptBytes"));
  }
  if (args.has("prompt") && args.get("prompt", "") != "-") return args.get("prompt", "");
  const bool asked = args.has("prompt");  // -p -
  check(asked || !isatty(STDIN_FILENO),
        "no prompt given (-p TEXT, -f FILE, or text piped into stdin); see " + help_command + " --help");
  std::string text = without_final_newline(read_bounded(std::cin, kMaxPromptBytes, "the prompt on stdin", "kMaxPromptBytes"));
  check(!text.empty() || asked, "no prompt given (-p TEXT, -f FILE, or text piped into stdin; stdin was empty); see " +
                                    help_command + " --help");
  return text;
}

namespace {
int64_t visual_delay_ms(const Args& args) {
  const int64_t delay_ms = args.get_int("visual-delay", 50);
  check(delay_ms >= 0 && delay_ms <= 60000, "--visual-delay must be between 0 and 60000 ms");
  return delay_ms;
}
}  // namespace

TerminalOutput::TerminalOutput(const Args& args, const TextModel& m, std::string prompt, bool whole_text_only)
    : tokenizer_(&m.tokenizer),
      mask_(m.model.config.mask_token),
      screen_(visual_delay_ms(args)),
      given_prompt_(std::move(prompt)),
      quiet_(args.has("quiet")),
      verbose_(args.has("verbose")) {
  visual_ = args.has("visual") && isatty(STDERR_FILENO);
  if (args.has("visual") && !visual_) std::fputs("canvas: --visual ignored: stderr is not a terminal\n", stderr);
  // While the live view is on screen nothing goes to stdout: the text follows once it is gone.
  stream_ = !whole_text_only && !args.has("no-stream") && !visual_;
}

void TerminalOutput::attach(GenerationRequest& request, const Generator& generator) {
  mode_ = generator.resolve(request.mode);
  // A chat's turn is its last message; the reply starts on a line of its own, not run into the prompt.
  const bool chat = request.chat || !request.messages.empty();
  prompt_ = request.messages.empty() ? given_prompt_ : request.messages.back().content;
  if (chat) prompt_ += "\n";
  if (visual_) request.on_step = [this](const StepEvent& e) { draw(e); };
  if (stream_) request.on_text = [this](const std::string& chunk, int64_t) { write(chunk); };
}

void TerminalOutput::write(const std::string& text) {
  if (text.empty()) return;
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  line_open_ = text.back() != '\n';
}

void TerminalOutput::draw(const StepEvent& e) {
  // The generator leaves the wait for a frame's time on screen out of its speed figures.
  screen_.show(canvas_frame(e, tokenizer_, mask_, prompt_, mode_));
}

// Nothing of the view stays on the normal screen: the text follows on stdout, once, as when it is piped.
void TerminalOutput::close() { screen_.close(); }

void TerminalOutput::finish_text(const std::string& text, bool end_line) {
  if (!stream_) write(text);
  if (end_line || (line_open_ && (isatty(STDOUT_FILENO) || (!quiet_ && stdout_shares_stderr())))) write("\n");
  line_open_ = false;
}

void TerminalOutput::print_stats(const GenerationOutput& out, int threads) const {
  const std::string interrupted = out.finish_reason == "cancelled" ? "[interrupted]" : "";
  if (quiet_) {
    if (!interrupted.empty()) std::fprintf(stderr, "%s\n", interrupted.c_str());
    return;
  }
  const std::string line = verbose_ ? generation_stats_line(out, threads) : generation_summary_line(out);
  std::fprintf(stderr, "%s%s\n", interrupted.empty() ? "" : (interrupted + " ").c_str(), line.c_str());
}

}  // namespace canvas::cli
