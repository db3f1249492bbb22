// canvas score: the negative log-likelihood of a text (or of a continuation given a prompt) under a model's
// causal reading, in nats per token and bits per byte.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "core/error.h"
#include "decode/score.h"
#include "io/gguf.h"
#include "io/tokenizer.h"

namespace canvas::cli {
namespace {

const char* kScoreUsage = R"(usage: canvas score -m MODEL.gguf (-p TEXT | -f FILE) [--context TEXT] [-t N]

Scores a text with a model that reads left to right (an AR model, or a uniform-state model's encoder):
the negative log-likelihood of the text's tokens given the tokens before them, in one pass. With
--context, the context is prepended and only the text is scored (e.g. a generated continuation given its
prompt). Prints one JSON object: tokens, bytes, nll_nats, nats_per_token, bits_per_byte.

  -m, --model FILE     GGUF model
  -p, --text TEXT      the text to score
  -f, --file FILE      read the text from a file instead
      --context TEXT   text before the scored text (conditioned on, not scored)
  -t, --threads N      threads (default: all cores)
)";

}  // namespace

int cmd_score(int argc, char** argv) {
  if (wants_help(argc, argv)) {
    std::fputs(kScoreUsage, stdout);
    return 0;
  }
  Args args(argc, argv, 2,
            {{"-m", "model"}, {"--model", "model"}, {"-p", "text"}, {"--text", "text"}, {"-f", "file"},
             {"--file", "file"}, {"--context", "context"}, {"-t", "threads"}, {"--threads", "threads"}},
            {"model", "text", "file", "context", "threads"}, {});
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
  const Model model = Model::load(args.get("model", ""));
  check(model.file != nullptr, "canvas score needs a GGUF model (its tokenizer is read from the file)");
  const Tokenizer tokenizer = Tokenizer::from_gguf(*model.file);
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
  const int64_t threads = args.get_int("threads", 0);
  check(threads >= 0 && threads <= 1024, "--threads must be between 0 and 1024");
  ThreadPool pool(static_cast<int>(threads));
  const SequenceScore s = score_causal(model, tokens, first, &pool);
  const int64_t bytes = int64_t(text.size()) - skipped_bytes;
  std::printf("{\"tokens\": %lld, \"bytes\": %lld, \"nll_nats\": %.6f, \"nats_per_token\": %.6f, \"bits_per_byte\": %.6f}\n",
              (long long)s.scored, (long long)bytes, s.nll_nats, s.scored ? s.nll_nats / double(s.scored) : 0.0,
              bytes > 0 ? s.nll_nats / std::log(2.0) / double(bytes) : 0.0);
  return 0;
}

}  // namespace canvas::cli
