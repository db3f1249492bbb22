// canvas chat: an interactive conversation with a model in the Gemma chat template, one stdin line per
// user turn; the whole history is re-encoded every turn.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "core/error.h"
#include "decode/ar.h"
#include "decode/uniform_state.h"
#include "model/model.h"
#include "text_model.h"

namespace canvas::cli {
namespace {

const char* kChatUsage = R"(usage: canvas chat -m MODEL [options] < LINES

Talks with a model: each line read from stdin is one user turn, wrapped in the Gemma chat template
(<bos><|turn>user\n{line}<turn|>\n<|turn>model\n) after the conversation so far; the reply is printed
on its own line, then a stats line on stderr. The reply ends at the first EOS id (for DiffusionGemma
{1, 106, 50}: <eos>, <turn|>, <|tool_response>). An empty line is skipped, "/reset" forgets the
conversation, "/exit" or end of input ends. Decodes with the uniform-state entropy-bound sampler
(DiffusionGemma) or, with --mode ar, autoregressively (greedy unless --temp).

  -m, --model MODEL       GGUF file, or a Hugging Face safetensors directory
      --tokenizer FILE    tokenizer.json or a GGUF with a tokenizer (default: the model's own)
  -n, --n-predict N       most tokens per reply (default: generation_config.json's max_new_tokens, else 64)
      --mode MODE         diffusion | ar (default diffusion for uniform-state models, ar otherwise)
      --steps S, --block-length B, --entropy-bound E, --t-min T, --t-max T, --stability K,
      --confidence-threshold C   the uniform-state sampler (see canvas generate --help)
      --stream-head       fused streaming LM head for the uniform-state sampler (see canvas generate --help)
      --temp T, --top-k K, --top-p P   AR sampling (default greedy)
  -s, --seed N            random seed (default 0)
  -t, --threads N         threads (default: all cores)
      --visual            redraw the canvas on stderr at every step
)";

}  // namespace

int cmd_chat(int argc, char** argv) {
  if (wants_help(argc, argv)) {
    std::fputs(kChatUsage, stdout);
    return 0;
  }
  Args args(argc, argv, 2,
            {{"-m", "model"}, {"--model", "model"}, {"-n", "n"}, {"--n-predict", "n"}, {"--mode", "mode"},
             {"--steps", "steps"}, {"--block-length", "block-length"}, {"--temp", "temp"}, {"--top-k", "top-k"},
             {"--top-p", "top-p"}, {"-s", "seed"}, {"--seed", "seed"}, {"-t", "threads"}, {"--threads", "threads"},
             {"--visual", "visual"}, {"--entropy-bound", "entropy-bound"}, {"--t-min", "t-min"},
             {"--t-max", "t-max"}, {"--stability", "stability"}, {"--confidence-threshold", "confidence-threshold"},
             {"--tokenizer", "tokenizer"}, {"--stream-head", "stream-head"}},
            {"model", "n", "mode", "steps", "block-length", "temp", "top-k", "top-p", "seed", "threads",
             "entropy-bound", "t-min", "t-max", "stability", "confidence-threshold", "tokenizer"},
            {"visual", "stream-head"});
  check(args.positional().empty(), "unexpected argument '" + (args.positional().empty() ? "" : args.positional()[0]) + "'");
  check(args.has("model"), "no model given (-m MODEL); see canvas chat --help");
  const std::string model_path = args.get("model", "");
  const Model model = Model::load(model_path);
  const ModelConfig& c = model.config;
  const TextTokenizer tokenizer = TextTokenizer::for_model(model, model_path, args.get("tokenizer", ""));
  const SamplerDefaults defaults = sampler_defaults(model, model_path);
  const int64_t n = args.get_int("n", c.uniform_state ? defaults.max_new_tokens : 64);
  check(n > 0 && n <= 1 << 20, "-n must be between 1 and 1048576");
  const std::string mode = args.get("mode", c.uniform_state ? "diffusion" : "ar");
  check(mode == "diffusion" || mode == "ar", "--mode must be diffusion or ar");
  check(mode == "ar" || c.uniform_state, "canvas chat decodes uniform-state diffusion models (DiffusionGemma) or, "
                                         "with --mode ar, any model; '" + c.arch + "' is neither");
  check(!args.has("stream-head") || mode == "diffusion", "--stream-head applies to diffusion decoding only");
  const EntropyBoundParams diffusion = uniform_state_params(args, defaults, n);
  ArParams ar;
  ar.max_new_tokens = n;
  ar.sampling.temperature = float(args.get_float("temp", 0.0));
  ar.sampling.top_k = args.get_int("top-k", 0);
  ar.sampling.top_p = float(args.get_float("top-p", 1.0));
  ar.sampling.seed = diffusion.seed;
  check(ar.sampling.temperature >= 0 && ar.sampling.top_k >= 0 && ar.sampling.top_p > 0 && ar.sampling.top_p <= 1,
        "need --temp >= 0, --top-k >= 0 and --top-p in (0, 1]");
  ar.stop_ids = c.uniform_state ? defaults.params.eos_ids : std::vector<int32_t>{c.eos_token};
  auto pool = make_pool(args);
  CanvasView view(&tokenizer, c.mask_token);
  DecodeCallbacks callbacks;
  if (args.has("visual")) callbacks.on_step = [&](const StepEvent& e) { view.draw(e); };
  const bool interactive = isatty(STDIN_FILENO);

  std::vector<int32_t> history;  // the conversation so far, ending with the model's closed turn
  std::string line;
  while (true) {
    if (interactive) std::fputs("> ", stderr);
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (line == "/reset") {
      history.clear();
      std::fputs("[conversation reset]\n", stderr);
      continue;
    }
    std::vector<int32_t> prompt = history;
    const std::vector<int32_t> turn = tokenizer.encode(gemma_user_turn(line, history.empty()), false);
    prompt.insert(prompt.end(), turn.begin(), turn.end());
    check(int64_t(prompt.size()) + n <= c.context_length,
          "the conversation (" + std::to_string(prompt.size()) + " tokens) + " + std::to_string(n) +
              " new tokens exceed the model's context length " + std::to_string(c.context_length) + "; /reset");

    GenerationResult result;
    EntropyBoundResult uniform;
    if (mode == "diffusion") {
      uniform = generate_uniform_state(model, prompt, diffusion, pool.get(), callbacks);
      result = uniform;
    } else {
      result = generate_ar(model, prompt, ar, pool.get(), callbacks);
    }
    if (args.has("visual")) view.finish();
    std::vector<int32_t> reply;
    for (int32_t id : result.tokens) {
      if (std::find(ar.stop_ids.begin(), ar.stop_ids.end(), id) != ar.stop_ids.end()) break;
      reply.push_back(id);
    }
    std::cout << sanitize_utf8(tokenizer.decode(reply)) << std::endl;
    if (mode == "diffusion") {
      std::fprintf(stderr, "[%lld new tokens, %lld decoder passes, tokens_per_forward %.2f, prompt %lld tokens, "
                           "%.1f ms]\n",
                   (long long)uniform.new_tokens, (long long)uniform.passes, uniform.tokens_per_forward,
                   (long long)result.prompt_tokens, result.prompt_ms + result.decode_ms);
    } else {
      std::fprintf(stderr, "[%lld new tokens, %lld passes, prompt %lld tokens, %.1f ms]\n",
                   (long long)result.tokens.size(), (long long)result.passes, (long long)result.prompt_tokens,
                   result.prompt_ms + result.decode_ms);
    }
    // The model's turn joins the history as it was generated (up to its end), closed by "<turn|>\n".
    history = prompt;
    history.insert(history.end(), reply.begin(), reply.end());
    const std::vector<int32_t> end = tokenizer.encode(gemma_turn_end(), false);
    history.insert(history.end(), end.begin(), end.end());
  }
  return 0;
}

}  // namespace canvas::cli
