// canvas chat: an interactive conversation with a model, one stdin line per user turn, in the model's own
// chat format; the conversation is re-rendered every turn and its oldest turns dropped when it outgrows
// the context.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "device.h"
#include "core/error.h"
#include "decode/ar.h"
#include "decode/chat_template.h"
#include "decode/masked.h"
#include "decode/uniform_state.h"
#include "io/gguf.h"
#include "io/json.h"
#include "model/model.h"
#include "text_model.h"

namespace canvas::cli {
namespace {

const Command kChat{
    "chat",
    "canvas chat [-m MODEL] [options] < LINES",
    R"(Talks with a model: each line read from stdin is one user turn, added to the conversation, which is
rendered in the model's chat format; the reply is streamed to stdout on its own line, then a stats line
goes to stderr. The format is the model's chat template (a GGUF's tokenizer.chat_template, a
checkpoint's tokenizer_config.json chat_template), rendered by canvas's Jinja
subset (what the Gemma, LLaDA and Dream templates use); without one, or when the template needs more
than the subset, the built-in Gemma 4 format (a notice says so). The reply ends at the first EOS id (for
DiffusionGemma {1, 106, 50}) or at the format's end-of-turn token or text. When the conversation no longer fits
the model's context, the oldest turns are dropped (a notice on stderr) and the chat goes on. An empty
line is skipped, "/reset" forgets the conversation, "/exit" or end of input ends.
Decodes uniform-state models (DiffusionGemma) with the entropy-bound sampler, masked-diffusion models
(LLaDA, Dream) with the masked block schedule, and, with --mode ar (the default for AR models),
autoregressively.)",
    {
        {"-m,--model", "MODEL", "GGUF file, or a Hugging Face safetensors directory\n"
                                "(default: the shipped instruction-tuned model,\n"
                                "models/text-dg-chat.gguf)"},
        {"--tokenizer", "FILE", "tokenizer.json or a GGUF with a tokenizer (default: the model's own)"},
        {"--system,-sys,--system-prompt", "TEXT", "system prompt, kept at the start of the conversation"},
        {"--template", "NAME", "chat format: auto (the model's tokenizer.chat_template, default) | gemma4 | gemma |\n"
                               "chatml | llama3 (built-in formats)"},
        {"-n,--n-predict", "N", "most tokens per reply (default: generation_config.json's max_new_tokens, else 64)"},
        {"--mode", "MODE", "diffusion | ar (default diffusion for diffusion models, ar otherwise)"},
        {"--steps", "S", "denoising steps (masked: in total, default = N; uniform-state: per canvas)"},
        {"--block-length", "B", "masked block length (default 32) / uniform-state canvas length"},
        {"--entropy-bound", "E", "uniform-state sampler settings (see canvas generate --help)"},
        {"--t-min", "T", ""},
        {"--t-max", "T", ""},
        {"--stability", "K", ""},
        {"--confidence-threshold", "C", ""},
        {"--neighbor-penalty", "P", ""},
        {"--stream-head", "", "fused streaming LM head for the uniform-state sampler (see canvas generate --help)"},
        {"--temp,--temperature", "T", "masked / AR sampling temperature (default 0 = greedy)"},
        {"--top-k", "K", "masked / AR top-k (0 = off)"},
        {"--top-p", "P", "masked / AR nucleus mass (1 = off)"},
        {"--min-p", "P", "masked / AR min-p (0 = off)"},
        {"--repeat-penalty", "R", "masked / AR repetition penalty (1 = off)"},
        {"-s,--seed", "N", "random seed (-1 or absent: random, reported on stderr)"},
        {"-t,--threads", "N", "threads (default: all cores)"},
        {"--device", "NAME", kDeviceHelp},
        {"--no-stream", "", "print each reply only when it is finished"},
        {"--visual", "", "redraw the canvas on stderr at every step (only when stderr is a terminal)"},
        {"--visual-delay", "MS", "with --visual: wait MS milliseconds after each redraw"},
    },
    ""};

// A chat format: how a conversation becomes the model's prompt, and the text that closes a model turn.
// `jinja` holds the model's own template (rendered by decode/chat_template); empty: the built-in `name`.
struct ChatFormat {
  std::string name;
  std::string turn_end;  // also ends a reply
  std::string jinja;
};

ChatFormat chat_format(const std::string& name) {
  if (name == "gemma4") return {name, "<turn|>", ""};
  if (name == "gemma") return {name, "<end_of_turn>", ""};
  if (name == "chatml") return {name, "<|im_end|>", ""};
  if (name == "llama3") return {name, "<|eot_id|>", ""};
  throw Error("--template: unknown chat format '" + name + "' (auto, gemma4, gemma, chatml, llama3)");
}

// The end-of-turn text a template writes, from the markers of the known families ("" when none).
std::string turn_end_of(const std::string& tmpl) {
  const std::pair<const char*, const char*> markers[] = {
      {"<turn|>", "<turn|>"}, {"<end_of_turn>", "<end_of_turn>"}, {"<|im_end|>", "<|im_end|>"}, {"<|eot_id|>", "<|eot_id|>"}};
  for (const auto& [marker, end] : markers)
    if (tmpl.find(marker) != std::string::npos) return end;
  return "";
}

// The conversation in a built-in format, ending with an open model turn.
std::string render_builtin(const ChatFormat& f, const std::vector<ChatMessage>& messages) {
  std::string out;
  std::string pending_system;  // Gemma (2/3) has no system role: it prefixes the first user turn
  for (const ChatMessage& m : messages) {
    const std::string role = m.role == "assistant" ? (f.name == "gemma4" || f.name == "gemma" ? "model" : "assistant")
                                                   : m.role;
    if (f.name == "gemma4") {
      out += "<|turn>" + role + "\n" + m.content + "<turn|>\n";
    } else if (f.name == "gemma") {
      if (role == "system") {
        pending_system = m.content + "\n\n";
        continue;
      }
      out += "<start_of_turn>" + role + "\n" + pending_system + m.content + "<end_of_turn>\n";
      pending_system.clear();
    } else if (f.name == "chatml") {
      out += "<|im_start|>" + role + "\n" + m.content + "<|im_end|>\n";
    } else {  // llama3
      out += "<|start_header_id|>" + role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
    }
  }
  if (f.name == "gemma4") return "<bos>" + out + "<|turn>model\n";
  if (f.name == "gemma") return "<bos>" + out + "<start_of_turn>model\n";
  if (f.name == "chatml") return out + "<|im_start|>assistant\n";
  return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
}

}  // namespace

int cmd_chat(int argc, char** argv) {
  if (print_help_if_asked(kChat, argc, argv)) return 0;
  Args args(kChat, argc, argv, 2);
  check(args.positional().empty(), "unexpected argument '" + (args.positional().empty() ? "" : args.positional()[0]) + "'");
  const std::string model_path =
      args.has("model") ? args.get("model", "") : shipped_model_path(kDefaultChatModel, "canvas chat");
  Model model = Model::load(model_path);
  use_device(model, args.get("device", "cpu"));
  const ModelConfig& c = model.config;
  const TextTokenizer tokenizer = TextTokenizer::for_model(model, model_path, args.get("tokenizer", ""));
  const SamplerDefaults defaults = sampler_defaults(model, model_path);
  const int64_t n = args.get_int("n-predict", c.uniform_state ? defaults.max_new_tokens : 64);
  check(n > 0 && n <= 1 << 20, "-n must be between 1 and 1048576");
  const std::string mode = args.get("mode", c.is_diffusion() ? "diffusion" : "ar");
  check(mode == "diffusion" || mode == "ar", "--mode must be diffusion or ar");
  check(mode == "ar" || c.is_diffusion(),
        "--mode diffusion: '" + c.arch + "' is an autoregressive model without a diffusion objective; use --mode ar");
  check(mode == "ar" || c.uniform_state || c.mask_token >= 0, "'" + c.arch + "' has no mask token: use --mode ar");
  const bool is_uniform = mode == "diffusion" && c.uniform_state;
  check(!args.has("stream-head") || is_uniform, "--stream-head applies to uniform-state diffusion decoding only");
  const uint64_t seed = resolve_seed(args);
  const EntropyBoundParams diffusion = uniform_state_params(args, defaults, n, seed);
  SamplingParams sampling;
  sampling.temperature = float(args.get_float("temp", 0.0));
  sampling.top_k = args.get_int("top-k", 0);
  sampling.top_p = float(args.get_float("top-p", 1.0));
  sampling.min_p = float(args.get_float("min-p", 0.0));
  sampling.repeat_penalty = float(args.get_float("repeat-penalty", 1.0));
  sampling.seed = seed;
  check(sampling.temperature >= 0 && sampling.top_k >= 0 && sampling.top_p > 0 && sampling.top_p <= 1 &&
            sampling.min_p >= 0 && sampling.min_p <= 1 && sampling.repeat_penalty > 0,
        "need --temp >= 0, --top-k >= 0, --top-p in (0, 1], --min-p in [0, 1] and --repeat-penalty > 0");
  // The format: --template NAME (built-in), else the model's tokenizer.chat_template when canvas's Jinja
  // subset renders it, else the built-in Gemma 4 format.
  const std::string template_name = args.get("template", "auto");
  ChatFormat format = chat_format(template_name == "auto" ? "gemma4" : template_name);
  std::string format_origin = "--template";
  const std::string bos = c.bos_token >= 0 ? tokenizer.token_piece(c.bos_token) : "";
  const std::string eos = c.eos_token >= 0 ? tokenizer.token_piece(c.eos_token) : "";
  if (template_name == "auto") {
    // A GGUF's tokenizer.chat_template, or tokenizer_config.json's chat_template beside a checkpoint.
    std::string jinja;
    if (model.file) {
      jinja = model.file->get_string("tokenizer.chat_template", "");
    } else {
      const std::filesystem::path config =
          std::filesystem::path(checkpoint_directory(model, model_path)) / "tokenizer_config.json";
      if (std::filesystem::exists(config)) jinja = JsonDocument::load(config.string()).get_string("chat_template", "");
    }
    format_origin = "built-in (the model has no tokenizer.chat_template)";
    if (!jinja.empty()) {
      try {
        ChatTemplateInputs probe;
        probe.messages = {{"user", "hello"}};
        probe.bos_token = bos;
        probe.eos_token = eos;
        render_chat_template(jinja, probe);
        format = {"the model's", turn_end_of(jinja), jinja};
        format_origin = "tokenizer.chat_template";
      } catch (const Error& e) {
        format_origin = std::string("built-in; the model's tokenizer.chat_template was not usable: ") + e.what();
      }
    }
  }
  // Gemma formats write <bos> themselves, as do model templates (through bos_token); the others take
  // the tokenizer's BOS.
  const bool add_bos = format.jinja.empty() && format.name != "gemma4" && format.name != "gemma" && tokenizer.wants_bos();
  auto render = [&](const std::vector<ChatMessage>& messages) {
    if (format.jinja.empty()) return render_builtin(format, messages);
    ChatTemplateInputs in;
    in.messages = messages;
    in.bos_token = bos;
    in.eos_token = eos;
    return render_chat_template(format.jinja, in);
  };
  // The end-of-turn marker ends a reply: as a token id when it is one token, else as text.
  std::vector<int32_t> stop_ids = c.uniform_state ? defaults.params.eos_ids : std::vector<int32_t>{c.eos_token};
  if (!format.turn_end.empty()) {
    const std::vector<int32_t> end = tokenizer.encode(format.turn_end, false);
    if (end.size() == 1) stop_ids.push_back(end[0]);
  }
  std::fprintf(stderr, "[chat: %s, %s decoding, format %s (%s), seed %llu]\n", model_path.c_str(),
               is_uniform ? "uniform-state diffusion" : mode == "diffusion" ? "masked diffusion" : "autoregressive",
               format.name.c_str(), format_origin.c_str(), (unsigned long long)seed);

  auto pool = make_pool(args);
  const bool visual = visual_enabled(args);
  CanvasView view(&tokenizer, c.mask_token, args.get_int("visual-delay", 0));
  const bool interactive = isatty(STDIN_FILENO);

  std::vector<ChatMessage> conversation;
  if (args.has("system")) conversation.push_back({"system", args.get("system", "")});
  const size_t first_turn = conversation.size();  // the system prompt is never dropped
  std::string line;
  while (true) {
    if (interactive) std::fputs("> ", stderr);
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (line == "/reset") {
      conversation.resize(first_turn);
      std::fputs("[conversation reset]\n", stderr);
      continue;
    }
    conversation.push_back({"user", line});
    std::vector<int32_t> prompt;
    int64_t dropped = 0;
    while (true) {
      try {
        prompt = tokenizer.encode(render(conversation), add_bos);
      } catch (const Error& e) {
        prompt.clear();
        std::fprintf(stderr, "canvas chat: %s; turn skipped\n", e.what());
        break;
      }
      // Masked diffusion pads the reply to whole blocks; that padding must fit too.
      const int64_t block = std::min<int64_t>(args.get_int("block-length", 32), n);
      const int64_t reply_room = mode == "diffusion" && !is_uniform && block > 0 ? (n + block - 1) / block * block : n;
      if (int64_t(prompt.size()) + reply_room <= c.context_length) break;
      if (conversation.size() - first_turn <= 1) break;
      // Drop the oldest exchange (a user turn and the reply to it).
      const size_t drop = conversation.size() - first_turn >= 3 ? 2 : 1;
      conversation.erase(conversation.begin() + long(first_turn), conversation.begin() + long(first_turn + drop));
      dropped += int64_t(drop);
    }
    if (prompt.empty()) {
      conversation.pop_back();
      continue;
    }
    if (dropped > 0)
      std::fprintf(stderr, "[the conversation outgrew the context of %lld tokens: dropped the %lld oldest turn%s]\n",
                   (long long)c.context_length, (long long)dropped, dropped == 1 ? "" : "s");
    if (int64_t(prompt.size()) + n > c.context_length) {
      std::fprintf(stderr,
                   "canvas chat: this turn (%lld tokens) + %lld reply tokens exceed the model's context length %lld; "
                   "skipped (write less, or give a smaller -n)\n",
                   (long long)prompt.size(), (long long)n, (long long)c.context_length);
      conversation.pop_back();
      continue;
    }

    TextStream stream(&tokenizer, stop_ids,
                      format.turn_end.empty() ? std::vector<std::string>{} : std::vector<std::string>{format.turn_end},
                      !args.has("no-stream"));
    DecodeCallbacks callbacks;
    int64_t canvas_length = diffusion.canvas_length;
    std::vector<int32_t> final_prefix;
    callbacks.on_step = [&](const StepEvent& e) {
      if (visual) view.draw(e);
      int64_t end = int64_t(e.canvas->size());
      if (is_uniform) end = std::min(end, e.block * canvas_length);
      else if (mode == "diffusion") end = std::find(e.canvas->begin(), e.canvas->end(), c.mask_token) - e.canvas->begin();
      end = std::min(end, n);
      final_prefix.assign(e.canvas->begin(), e.canvas->begin() + end);
      stream.update(final_prefix);
    };
    callbacks.should_stop = [&] { return stream.stop_string_seen(); };
    GenerationResult result;
    EntropyBoundResult uniform;
    if (is_uniform) {
      uniform = generate_uniform_state(model, prompt, diffusion, pool.get(), callbacks);
      result = uniform;
    } else if (mode == "diffusion") {
      MaskedDiffusionParams p;
      p.block_length = std::min<int64_t>(args.get_int("block-length", 32), n);
      check(p.block_length > 0, "--block-length must be positive");
      p.gen_length = (n + p.block_length - 1) / p.block_length * p.block_length;
      p.steps = args.get_int("steps", p.gen_length);
      p.schedule = parse_step_schedule(c.arch == "dream" ? "dream" : "llada");
      p.cache = CacheMode::Prefix;
      p.sampling = sampling;
      result = generate_masked(model, prompt, p, pool.get(), callbacks);
      if (int64_t(result.tokens.size()) > n) result.tokens.resize(size_t(n));
    } else {
      ArParams ar;
      ar.max_new_tokens = n;
      ar.sampling = sampling;
      ar.stop_ids = stop_ids;
      result = generate_ar(model, prompt, ar, pool.get(), callbacks);
    }
    if (visual) view.finish();
    const std::string reply = stream.finish(result.tokens);
    if (args.has("no-stream")) std::fputs(sanitize_utf8(reply).c_str(), stdout);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    if (is_uniform) {
      std::fprintf(stderr, "[%lld new tokens, %lld decoder passes, tokens_per_forward %.2f, prompt %lld tokens, "
                           "%.1f ms]\n",
                   (long long)uniform.new_tokens, (long long)uniform.passes, uniform.tokens_per_forward,
                   (long long)result.prompt_tokens, result.prompt_ms + result.decode_ms);
    } else {
      std::fprintf(stderr, "[%lld new tokens, %lld passes, prompt %lld tokens, %.1f ms]\n",
                   (long long)result.tokens.size(), (long long)result.passes, (long long)result.prompt_tokens,
                   result.prompt_ms + result.decode_ms);
    }
    conversation.push_back({"assistant", reply});
  }
  return 0;
}

}  // namespace canvas::cli
