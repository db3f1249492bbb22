// canvas chat: an interactive conversation with a model, one stdin line per user turn, in the model's own
// chat format; the conversation is re-rendered every turn and its oldest turns dropped when it outgrows
// the context.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli/interrupt.h"
#include "cli/line_editor.h"
#include "commands.h"
#include "core/error.h"
#include "text/chat_template.h"
#include "decode/conversation.h"
#include "decode/gemma_channels.h"
#include "generation_options.h"
#include "io/utf8.h"
#include "model/model.h"
#include "serve/served_models.h"
#include "shipped_models.h"

namespace canvas::cli {
namespace {

const Command kChatHead{
    "chat",
    "canvas chat [-m MODEL] [options] < LINES",
    R"(Talks with a model: each line read from stdin is one user turn, added to the conversation, which is
rendered in the model's chat format; the reply is streamed to stdout on its own line, then a short stats
line goes to stderr (mode, tokens, tokens/s; all the counts with --verbose, none with --quiet). The format is the model's chat template (a GGUF's tokenizer.chat_template, a
checkpoint's tokenizer_config.json chat_template), rendered by canvas's Jinja
subset (what the Gemma, LLaDA and Dream templates use); without one, or when the template needs more
than the subset, the built-in Gemma 4 format (a notice says so). The reply ends at the first EOS id (for
DiffusionGemma {1, 106, 50}) or at the format's end-of-turn token or text. When the conversation no longer fits
the model's context, the oldest turns are dropped (a notice on stderr) and the chat goes on. An empty
line is skipped. Commands: /help, /reset (forget the conversation), /system TEXT (set the system prompt),
/save FILE and /load FILE (the conversation as JSON messages), /exit (or end of input); any other line
starting with '/' prints the commands (start a message with a space to send a '/'). Ctrl-C interrupts a
reply and returns to the prompt (what was written so far stays in the conversation).
With a template that has Gemma 4's channels (the release's chat_template.jinja), the model's
thinking is shown apart from its answer: dimmed on a terminal, else between [thinking] and [/thinking]
lines; the conversation keeps the answer (and the thinking as reasoning_content, which such templates
leave out of later turns). --think turns the thinking on where the template has the switch
(enable_thinking).
Decodes uniform-state models (DiffusionGemma) with the entropy-bound sampler, masked-diffusion models
(LLaDA, Dream) with the masked block schedule, and, with --mode ar (the default for AR models),
autoregressively. The decoding options are generate's: the first turn of a chat gives the tokens of
`canvas generate --chat` with the same options and seed.)",
    {
        {"-m,--model", "MODEL", "GGUF file, or a Hugging Face safetensors directory\n"
                                "(default: the shipped instruction-tuned model,\n"
                                "models/text-dg-chat.gguf)"},
        {"--tokenizer", "FILE", "tokenizer.json or a GGUF with a tokenizer (default: the model's own)"},
        {"--system,-sys,--system-prompt", "TEXT", "system prompt, kept at the start of the conversation"},
        {"--template", "NAME", "chat format: auto (the model's tokenizer.chat_template, default) | gemma4 | gemma |\n"
                               "chatml | llama3 (built-in formats)"},
        {"--think", "", "let the model think before it answers (the template's enable_thinking,\n"
                        "e.g. Gemma 4's); its thinking is shown apart"},
    },
    ""};

// Writes a reply whose text has Gemma 4's channels as it grows: the thinking dimmed (on a terminal) or
// between [thinking] lines, then the answer, each piece once; the tool calls at the end.
class ChannelPrinter {
 public:
  ChannelPrinter(const ChatFormat& format, bool terminal) : deltas_(&format), terminal_(terminal) {}
  void update(const std::string& text, bool more_to_come) {
    const ReplyDelta delta = deltas_.next(text, !more_to_come);
    if (!delta.reasoning_content.empty()) {
      if (!in_thinking_) put(terminal_ ? "\x1b[2m" : "[thinking]\n");
      in_thinking_ = true;
      put(sanitize_utf8(delta.reasoning_content));
    }
    if ((!delta.content.empty() || !more_to_come) && in_thinking_) {
      put(terminal_ ? "\x1b[22m\n" : "\n[/thinking]\n");
      in_thinking_ = false;
    }
    put(sanitize_utf8(delta.content));
    if (!more_to_come)
      for (const ChatToolCall& call : reply().tool_calls) put("\n[tool call " + call.name + " " + call.arguments + "]");
    std::fflush(stdout);
  }
  const ChatReply& reply() const { return deltas_.reply(); }

 private:
  void put(const std::string& s) { std::fwrite(s.data(), 1, s.size(), stdout); }
  ReplyDeltas deltas_;
  bool terminal_;
  bool in_thinking_ = false;
};

Command chat_command() {
  Command c = kChatHead;
  c.options = join_options({c.options, decoding_options()});
  return c;
}
const Command kChat = chat_command();

}  // namespace

int cmd_chat(int argc, char** argv) {
  if (print_help_if_asked(kChat, argc, argv)) return 0;
  Args args(kChat, argc, argv, 2);
  args.check_no_positional();
  GenerationRequest request = request_from_args(args);
  request.to_end_of_turn = true;  // without -n a reply runs to the end of its turn (or the context)
  const TextModel m = load_text_model(args, kDefaultChatModel, "canvas chat");
  // The model's own sampling where the flags give none (llama.cpp's defaults for a pretrained model).
  const DefaultSampling sampling = default_sampling(m.model, m.path);
  apply_default_sampling(request.sampling, sampling.params, sampling_given(args));
  if (args.has("think")) {
    request.chat_extras.enable_thinking = true;
    if (!m.chat.has_thinking_switch())
      std::fprintf(stderr, "canvas: warning: --think does nothing: the chat format (%s) has no thinking switch "
                           "(enable_thinking)\n", m.chat.origin.c_str());
  }
  // Gemma 4's channels: the generated text keeps its markers, and the reply is shown split.
  const bool channels = chat_format_has_channels(m.chat);
  request.special_text = channels;
  request.verify.datastore = load_datastore(args, m);
  const Generator generator(m);
  const ModelConfig& c = m.model.config;
  auto pool = make_pool(args);
  ModeRouter router(generator, router_options(args, m, pool.get()));
  GenerationRequest first = request;  // what the first turn runs (auto chooses again at each turn)
  router.route(first);
  const DecodeMode mode = generator.resolve(first.mode);
  // auto's choice is named as "auto" (the stats line of each reply names its setting); --verbose says why.
  const std::string why = generator.mode_reason(first);
  const std::string chosen_by = args.has("verbose") || why.rfind("auto", 0) != 0 ? why : "auto";
  std::fprintf(stderr, "[chat: %s, %s decoding (%s), format %s (%s), seed %llu]\n", m.path.c_str(),
               mode == DecodeMode::Ar       ? "autoregressive"
               : mode == DecodeMode::Verify ? (first.verify.overlap ? "draft-and-verify (overlapped)" : "draft-and-verify")
               : c.uniform_state            ? "uniform-state diffusion"
                                            : "masked diffusion",
               chosen_by.c_str(), m.chat.name.c_str(), m.chat.origin.c_str(),
               (unsigned long long)request.sampling.seed);
  const SamplingParams& s = request.sampling;
  if (s.temperature > 0)
    std::fprintf(stderr, "[sampling: temp %g, top-k %lld, top-p %g, min-p %g (%s); --temp 0 is greedy]\n",
                 double(s.temperature), (long long)s.top_k, double(s.top_p), double(s.min_p),
                 sampling_given(args).temperature ? "as given" : sampling.source.c_str());
  const std::string notice = generator.mode_notice(mode);
  if (!notice.empty()) std::fprintf(stderr, "canvas: warning: %s\n", notice.c_str());
  if (!m.chat.model_has_template && !serve::is_chat_model_name(serve::model_id_of(m.path)))
    std::fprintf(stderr,
                 "canvas: note: %s has no chat template and its name does not say instruction-tuned (-it, "
                 "-instruct, -chat): it looks like a base model, which continues text rather than answering "
                 "(canvas generate -p TEXT)\n",
                 m.path.c_str());

  TerminalOutput output(args, m, "", false);
  const bool interactive = isatty(STDIN_FILENO);
  LineEditor editor(STDIN_FILENO, STDERR_FILENO);  // line editing and history on a terminal

  PrefixCache kept;  // K/V of the conversation's tokens, from turn to turn
  ChatSession session(args.get("system", ""));
  // Ctrl-C while a reply is written ends that reply (the generator polls the flag before every pass).
  request.cancelled = &InterruptRequest::requested;
  std::string line;
  while (true) {
    if (!editor.read("> ", line)) {
      if (interactive && !editor.interactive()) std::fputs("\n", stderr);  // Ctrl-D: a line of its own
      break;
    }
    editor.add_history(line);
    if (line.empty()) continue;
    if (line[0] == '/') {
      const ChatSession::Reply reply = session.command(line);
      if (reply.exit) break;
      std::fprintf(stderr, "%s\n", reply.text.c_str());
      continue;
    }
    std::vector<ChatMessage>& conversation = session.messages();
    conversation.push_back({"user", line});
    GenerationRequest turn = request;
    router.route(turn);
    turn.prefix_cache = &kept;  // the conversation so far is not encoded again
    // From here to the end of the turn Ctrl-C ends the reply, not the chat (one pressed while the prompt is
    // fitted and encoded ends the reply before its first pass).
    const InterruptRequest interrupt(/*sigterm_too=*/false);
    const FittedConversation fitted = fit_conversation(generator, conversation, session.first_turn(), turn);
    if (!fitted.error.empty()) {
      std::fprintf(stderr, "canvas chat: %s; turn skipped\n", fitted.error.c_str());
      conversation.pop_back();
      continue;
    }
    if (fitted.dropped > 0)
      std::fprintf(stderr, "[the conversation outgrew the context of %lld tokens: dropped the %lld oldest turn%s]\n",
                   (long long)c.context_length, (long long)fitted.dropped, fitted.dropped == 1 ? "" : "s");
    output.attach(turn, generator);  // this turn's mode and line for --visual
    ChannelPrinter printer(m.chat, isatty(STDOUT_FILENO));
    std::string so_far;
    if (channels && turn.on_text)
      turn.on_text = [&](const std::string& chunk, int64_t) {
        so_far += chunk;
        printer.update(so_far, true);
      };
    GenerationOutput out;
    out = generator.run(turn, pool.get());
    output.close();
    router.learn(turn, out, /*alone=*/true);
    // After Ctrl-C the reply holds only the text that was final (nothing of a canvas still being denoised).
    // The conversation keeps the model's own bytes, so that the next turn encodes what it wrote (and reuses
    // its cached K/V); the terminal and /save get them as valid UTF-8. A reply with channels keeps its
    // answer as content and its thinking as reasoning_content.
    if (channels) {
      printer.update(out.text, false);
      std::fputs("\n", stdout);
      std::fflush(stdout);
    } else {
      output.finish_text(sanitize_utf8(out.text), /*end_line=*/true);
    }
    output.print_stats(out, pool->size());
    ChatMessage reply{"assistant", channels ? printer.reply().content : out.text};
    if (channels) reply.reasoning_content = printer.reply().reasoning_content;
    conversation.push_back(std::move(reply));
  }
  return 0;
}

}  // namespace canvas::cli
