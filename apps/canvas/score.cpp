// canvas score: the negative log-likelihood of a text (or of a continuation given a prompt) under a model's
// causal reading, in nats per token and bits per byte; text longer than the context is scored in windows.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "cli/options.h"
#include "cli/progress.h"
#include "commands.h"
#include "shipped_models.h"
#include "core/error.h"
#include "decode/score.h"
#include "decode/text_model.h"
#include "device.h"
#include "io/input_file.h"

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
        {"-m,--model", "FILE", "GGUF model (default: the shipped text model, models/text-dg.gguf)"},
        {"-p,--text", "TEXT", "the text to score"},
        {"-f,--file", "FILE", "read the text from a file instead"},
        {"--context", "TEXT", "text before the scored text (conditioned on, not scored)"},
        {"--stride", "N", "tokens a window advances when the text exceeds the context\n"
                          "(default: half the context length; below the context length)"},
        {"-t,--threads", "N", "threads (default: the CPUs this process may use)"},
        {"--device", "NAME", kDeviceHelp},
        {"--cpu-moe", "", kCpuMoeHelp},
        {"--n-cpu-moe", "N", kNCpuMoeHelp},
    },
    ""};

}  // namespace

int cmd_score(int argc, char** argv) {
  if (print_help_if_asked(kScore, argc, argv)) return 0;
  Args args(kScore, argc, argv, 2);
  const std::string path = model_or_shipped(args, kDefaultTextModel, "canvas score");
  check(args.has("text") != args.has("file"), "give exactly one of -p TEXT and -f FILE; see canvas score --help");
  const std::string text = args.has("file") ? read_file_bounded(args.get("file", ""), kMaxCorpusBytes, "text file",
                                                                   "kMaxCorpusBytes")
                                             : args.get("text", "");
  const DeviceChoice device = device_choice(args);
  Model model = Model::load(path);
  use_device(model, device);
  check(model.file != nullptr, "canvas score needs a GGUF model (its tokenizer is read from the file)");
  // The model's own tokenizer, either kind (byte-level BPE, or Gemma-style SentencePiece BPE).
  const TextTokenizer tokenizer = tokenizer_for_model(model, path, "");
  const int64_t stride = args.get_int("stride", 0);
  check(!args.has("stride") || stride >= 1, "--stride must be at least 1");
  const TextScoreJob job = plan_text_score(model, tokenizer, args.get("context", ""), text, stride);
  ThreadPool pool(thread_count(args));
  std::unique_ptr<Progress> progress;  // only when the text is scored in several windows
  if (job.windows > 1) {
    std::fprintf(stderr,
                 "[%zu tokens exceed the context of %lld: scoring in %lld windows of %lld tokens, stride %lld; each "
                 "token sees at least %lld tokens before it]\n",
                 job.tokens.size(), (long long)job.window, (long long)job.windows, (long long)job.window,
                 (long long)job.stride, (long long)std::min<int64_t>(job.window - job.stride, job.first));
    progress = std::make_unique<Progress>("windows", job.windows);
  }
  const TextScore score = score_text(model, job, &pool, [&] {
    if (progress) progress->add();
  });
  if (progress) progress->finish();
  std::printf("%s\n", score.json().c_str());
  return 0;
}

}  // namespace canvas::cli
