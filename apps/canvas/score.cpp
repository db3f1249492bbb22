// canvas score: the negative log-likelihood of a text (or of a continuation given a prompt) under a model's
// causal reading, in nats per token and bits per byte; text longer than the context is scored in windows.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/options.h"
#include "cli/progress.h"
#include "commands.h"
#include "core/error.h"
#include "decode/score.h"
#include "decode/text_model.h"
#include "device.h"
#include "io/gguf.h"
#include "io/tokenizer.h"

namespace canvas::cli {
namespace {

const Command kScore{
    "score",
    "canvas score -m MODEL.gguf (-p TEXT | -f FILE) [--context TEXT] [--stride N] [-t N]",
    R"(Scores a text with a model that reads left to right (an AR model, or a uniform-state model's encoder):
the negative log-likelihood of the text's tokens given the tokens before them. With --context, the
context is prepended and only the text is scored (e.g. a generated continuation given its prompt).
Text longer than the model's context is scored in overlapping windows of the context length that advance
by the stride: each token is scored once, in the first window that ends after it, given the up to
(context - stride) tokens before it in that window (the usual strided perplexity); a note on stderr says
so, with a progress line per window. Prints one JSON object: tokens, bytes, nll_nats, nats_per_token,
bits_per_byte, windows, stride.)",
    {
        {"-m,--model", "FILE", "GGUF model"},
        {"-p,--text", "TEXT", "the text to score"},
        {"-f,--file", "FILE", "read the text from a file instead"},
        {"--context", "TEXT", "text before the scored text (conditioned on, not scored)"},
        {"--stride", "N", "tokens a window advances when the text exceeds the context\n"
                          "(default: half the context length; below the context length)"},
        {"-t,--threads", "N", "threads (default: all cores)"},
        {"--device", "NAME", kDeviceHelp},
    },
    ""};

}  // namespace

int cmd_score(int argc, char** argv) {
  if (print_help_if_asked(kScore, argc, argv)) return 0;
  Args args(kScore, argc, argv, 2);
  check(args.has("model"), "no model given (-m FILE.gguf); see canvas score --help");
  check(args.has("text") != args.has("file"), "give exactly one of -p TEXT and -f FILE; see canvas score --help");
  std::string text = args.get("text", "");
  if (args.has("file")) {
    std::ifstream in(args.get("file", ""), std::ios::binary);
    check(bool(in), "cannot open " + args.get("file", ""));
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  Model model = Model::load(args.get("model", ""));
  use_device(model, args.get("device", "cpu"));
  check(model.file != nullptr, "canvas score needs a GGUF model (its tokenizer is read from the file)");
  // The model's own tokenizer, either kind (byte-level BPE, or Gemma-style SentencePiece BPE).
  const TextTokenizer tokenizer = tokenizer_for_model(model, args.get("model", ""), "");
  const std::string context = args.get("context", "");
  std::vector<int32_t> tokens = tokenizer.encode(context, true);
  const std::vector<int32_t> scored = tokenizer.encode(text, false);
  check(!scored.empty(), "the text encodes to no tokens");
  // Without a context (and without a BOS token) the first token has nothing to be predicted from.
  int64_t first = int64_t(tokens.size());
  int64_t skipped_bytes = 0;
  if (first == 0) {
    first = 1;
    skipped_bytes = int64_t(tokenizer.decode({scored[0]}).size());
  }
  tokens.insert(tokens.end(), scored.begin(), scored.end());
  ThreadPool pool(thread_count(args));
  const int64_t n = int64_t(tokens.size());
  const int64_t window = model.config.context_length > 0 ? model.config.context_length : n;
  const int64_t stride = args.get_int("stride", std::max<int64_t>(1, window / 2));
  // A window shares window - stride tokens with the one before, so that its first scored token has context.
  check(stride >= 1 && stride < window, "--stride must be between 1 and the context length - 1 (" +
                                            std::to_string(window - 1) + ")");
  check(first < window, "the context (" + std::to_string(first) + " tokens) leaves no room in the model's context of " +
                            std::to_string(window) + " tokens");

  int64_t windows = 0;
  std::unique_ptr<Progress> progress;  // only when the text is scored in several windows
  if (n > window) {
    std::fprintf(stderr,
                 "[%lld tokens exceed the context of %lld: scoring in %lld windows of %lld tokens, stride %lld; each "
                 "token sees at least %lld tokens before it]\n",
                 (long long)n, (long long)window, (long long)score_window_count(n, window, stride), (long long)window,
                 (long long)stride, (long long)std::min<int64_t>(window - stride, first));
    progress = std::make_unique<Progress>("windows", score_window_count(n, window, stride));
  }
  const SequenceScore total = score_causal_windows(model, tokens, first, window, stride, &pool, &windows, [&] {
    if (progress) progress->add();
  });
  if (progress) progress->finish();
  const int64_t bytes = int64_t(text.size()) - skipped_bytes;
  std::printf("{\"tokens\": %lld, \"bytes\": %lld, \"nll_nats\": %.6f, \"nats_per_token\": %.6f, \"bits_per_byte\": "
              "%.6f, \"windows\": %lld, \"stride\": %lld}\n",
              (long long)total.scored, (long long)bytes, total.nll_nats,
              total.scored ? total.nll_nats / double(total.scored) : 0.0,
              bytes > 0 ? total.nll_nats / std::log(2.0) / double(bytes) : 0.0, (long long)windows,
              (long long)(n > window ? stride : 0));
  return 0;
}

}  // namespace canvas::cli
