// canvas: command-line front end (generate, logits, inspect).
#include <cstdio>
#include <iostream>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "cli/output_paths.h"
#include "commands.h"
#include "core/cpu.h"
#include "core/error.h"
#include "decode/generation_report.h"
#include "device.h"
#include "generation_options.h"
#include "infill.h"
#include "io/gguf.h"
#include "io/npy.h"
#include "model/model.h"
#include "model/pass_logits.h"
#include "shipped_models.h"
#include "sudoku/sudoku_task.h"

using namespace canvas;
using canvas::cli::Args;
using canvas::cli::make_pool;

namespace {

const cli::Command kGenerateHead{
    "generate",
    "canvas generate [-m MODEL] (-p TEXT | -f FILE | < FILE) [options]",
    R"(Generates text with a masked-diffusion model (LLaDA, Dream, LLaDA-MoE families), a uniform-state
diffusion model (entropy-bound sampler: DiffusionGemma, canvas's own uniform-state models) or
autoregressively on the same weights (DiffusionGemma: through its causal encoder).
The text is streamed to stdout as it is finalised (in order: a masked block's tokens appear once every
position before them is committed), then a short stats line goes to stderr (mode, tokens, tokens/s; all
the counts with --verbose, none with --quiet); with --json one JSON object instead. Written to a file or
pipe of its own, stdout holds the text byte for byte; on a terminal, or with stderr on the same stream,
a newline ends the text's line first.)",
    {
        {"-m,--model", "MODEL", "GGUF file, or a Hugging Face safetensors directory (DiffusionGemma / Gemma 4)\n"
                                "(default: the shipped text model, models/text-dg.gguf)"},
        {"-p,--prompt", "TEXT", "prompt text (encoded with the model's tokenizer); '-' reads it from stdin"},
        {"-f,--file", "FILE", "read the prompt from a file (one trailing newline dropped); without -p and -f,\n"
                              "a prompt piped into stdin is read"},
        {"--tokenizer", "FILE", "tokenizer.json or a GGUF with a tokenizer (default: the model's own: the GGUF's,\n"
                                "or tokenizer.json beside a safetensors checkpoint)"},
        {"--chat", "", "wrap the prompt in the model's chat template as one user turn (its\n"
                       "tokenizer.chat_template, else the family's built-in format, as canvas chat does)"},
        {"--template", "NAME", "with --chat: auto (default) | gemma4 | gemma | chatml | llama3 (built-in formats)"},
    },
    ""};

const std::vector<cli::Option> kGenerateTail{
        {"--json", "", "print one JSON object instead of the text and stats line: text, tokens (the text's\n"
                       "tokens: no EOS or padding), mode, finish_reason (eos | stop | length | context),\n"
                       "prompt_tokens, new_tokens, pad_tokens, passes, encoder_passes, tokens_per_forward\n"
                       "(= tokens_per_pass: new tokens / passes), prompt_ms, decode_ms, tokens_per_second,\n"
                       "rows_computed, seed; uniform-state: steps_per_canvas; verify: drafted, accepted,\n"
                       "draft_length, overlap, draft_lookup, lookup_cycles (of encoder_passes cycles),\n"
                       "lookup_drafted, lookup_accepted, datastore_cycles, datastore_drafted,\n"
                       "datastore_accepted, draft_tree, tree_cycles, decoder_tree_cycles, tree_drafted,\n"
                       "tree_accepted"},
        cli::heading("Infilling and structured output (diffusion models fill holes; AR models only do --json-schema):"),
        {"--suffix", "TEXT", "fill -n tokens between the prompt and TEXT; the prompt may instead (or also) hold\n"
                             "holes written <|hole:N|> (N tokens each), all filled at once. Prints the whole\n"
                             "text; --json adds \"fills\" (each hole's text)"},
        {"--json-schema", "SCHEMA", "a JSON Schema given inline ('{...}') or as a file: output valid by construction\n"
                                    "for a subset of JSON Schema (docs/infill.md); -n is an\n"
                                    "upper bound and stdout holds the JSON alone. Diffusion: the scaffold is given\n"
                                    "and the value holes are decoded in any order under per-hole token masks;\n"
                                    "--mode ar: the same constraint masks tokens left to right"},
        {"--json-schema-file", "FILE", "the schema from a file (the same as --json-schema FILE)"},
};

cli::Command generate_command() {
  cli::Command c = kGenerateHead;
  c.options = cli::join_options({c.options, cli::decoding_options(), kGenerateTail});
  return c;
}
const cli::Command kGenerate = generate_command();

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
        {"-t,--threads", "N", "threads (default: the CPUs this process may use)"},
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

int cmd_generate(int argc, char** argv) {
  if (cli::print_help_if_asked(kGenerate, argc, argv)) return 0;
  Args args(kGenerate, argc, argv, 2);
  args.check_no_positional();
  GenerationRequest request = cli::request_from_args(args);
  request.text = cli::read_prompt(args, "canvas generate");
  request.chat = args.has("chat");
  check(!args.has("template") || request.chat, "--template applies with --chat (the chat format of the prompt)");
  const TextModel m = cli::load_text_model(args, cli::kDefaultTextModel, "canvas generate");
  // The model's own sampling where the flags give none (llama.cpp's defaults for a pretrained model), as chat
  // and serve sample; canvas's own models and diffusion models stay greedy.
  apply_default_sampling(request.sampling, default_sampling(m.model, m.path).params, cli::sampling_given(args));
  request.verify.datastore = cli::load_datastore(args, m);
  // Infilling (--suffix, <|hole:N|>) and schema-constrained output (--json-schema): apps/canvas/infill.cpp.
  if (cli::infill_requested(args)) return cli::run_infill(args, m, request);
  const Generator generator(m);
  auto pool = make_pool(args);
  // -n beyond the context is refused before auto times the model's passes.
  generator.check_context(request, int64_t(generator.prompt_of(request).size()));
  ModeRouter router(generator, cli::router_options(args, m, pool.get()));
  router.route(request);
  const std::string notice = generator.mode_notice(request.mode);
  if (!notice.empty()) std::fprintf(stderr, "canvas: warning: %s\n", notice.c_str());

  const bool json = args.has("json");
  cli::TerminalOutput output(args, m, request.text, json);
  output.attach(request, generator);
  const GenerationOutput out = generator.run(request, pool.get());
  output.close();
  router.learn(request, out, /*alone=*/true);
  if (json) {
    std::cout << generation_json(out) << std::endl;
  } else {
    output.finish_text(out.text, /*end_line=*/false);
    output.print_stats(out, pool->size());
  }
  return 0;
}

int cmd_logits(int argc, char** argv) {
  if (cli::print_help_if_asked(kLogits, argc, argv)) return 0;
  Args args(kLogits, argc, argv, 2);
  check(args.has("model"), "no model given (-m MODEL)");
  check(args.has("ids"), "no token ids given (--ids 1,2,3)");
  check(args.has("out"), "no output file given (--out FILE.npy)");
  cli::check_output_is_not_input({"--out", args.get("out", "")},
                                 {{"-m", args.get("model", "")}, {"--self-cond", args.get("self-cond", "")}});
  const Model model = Model::load(args.get("model", ""));
  const ModelConfig& c = model.config;
  const std::vector<int32_t> ids = cli::parse_id_list(args.get("ids", ""), "--ids");
  const bool decoder = args.has("canvas-ids");
  // DiffusionGemma's encoder is causal by construction; its bidirectional view is the decoder.
  const bool causal = args.has("causal") || c.causal || c.has_decoder;
  auto pool = make_pool(args);
  std::vector<int32_t> canvas;
  NpyArray self_cond;
  if (decoder) canvas = cli::parse_id_list(args.get("canvas-ids", ""), "--canvas-ids");
  check_pass_logits(c, int64_t(ids.size()), decoder ? &canvas : nullptr, args.has("self-cond"));
  if (args.has("self-cond")) {  // with --canvas-ids (checked)
    self_cond = read_npy(args.get("self-cond", ""));
    check(self_cond.shape == std::vector<int64_t>{int64_t(canvas.size()), c.vocab},
          args.get("self-cond", "") + ": self-conditioning logits must have shape [" + std::to_string(canvas.size()) +
              ", " + std::to_string(c.vocab) + "] (canvas, vocab)");
  }
  const std::vector<float> logits = pass_logits(model, ids, causal, decoder ? &canvas : nullptr,
                                                args.has("self-cond") ? self_cond.data.data() : nullptr, pool.get());
  const int64_t rows = decoder ? int64_t(canvas.size()) : int64_t(ids.size());
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
  std::fputs(gguf_listing(*GgufFile::open(args.positional()[0]), args.has("all") ? size_t(-1) : 8).c_str(), stdout);
  return 0;
}

// Every command: its name, what runs it, and its line in `canvas --help` (continued lines indented).
struct CommandEntry {
  const char* name;
  int (*run)(int argc, char** argv);
  const char* summary;
};
const CommandEntry kCommands[] = {
    {"generate", cmd_generate, "generate text from a prompt (masked diffusion or autoregressive)"},
    {"chat", cli::cmd_chat, "talk with a model in its chat format, one line per turn on stdin"},
    {"logits", cmd_logits, "write a model's logits for given token ids to a .npy file"},
    {"inspect", cmd_inspect, "print a GGUF file's metadata and tensor table"},
    {"score", cli::cmd_score, "likelihood of a text under a left-to-right model (bits per byte)"},
    {"tokenize", cli::cmd_tokenize, "print the token ids of a text (works on vocabulary-only GGUF files)"},
    {"detokenize", cli::cmd_detokenize, "print the text of token ids"},
    {"train", cli::cmd_train, "train a small diffusion or AR model from a config file (resumable)"},
    {"tokenizer", cli::cmd_tokenizer,
     "train a Gemma-style BPE tokenizer on a corpus; export it as tokenizer.json; measure it"},
    {"sudoku", cli::cmd_sudoku, "generate Sudoku puzzle sets, solve puzzles with a model, evaluate solve rates"},
    {"convert", cli::cmd_convert,
     "convert a Hugging Face checkpoint (DiffusionGemma, Gemma 4, LLaDA, Dream, LLaDA-MoE, Llama) to GGUF,\n"
     "or a GGUF back to safetensors"},
    {"quantize", cli::cmd_quantize, "re-type a GGUF file's matrices (f16, bf16, q8_0, q4_0, ..., q6_k), reporting every fallback"},
    {"bench", cli::cmd_bench, "measure roofs, then AR vs diffusion decoding speed over a grid (model or synthetic)"},
    {"serve", cli::cmd_serve, "OpenAI-compatible HTTP server with step-level batching and a live web page"},
};

std::string usage() {
  std::string out = "canvas: a C++ engine for text-diffusion language models\n\nusage: canvas <command> [options]\n\ncommands:\n";
  for (const CommandEntry& c : kCommands) {
    char name[32];
    std::snprintf(name, sizeof name, "  %-12s", c.name);
    std::string summary = c.summary;
    for (size_t i = 0; (i = summary.find('\n', i)) != std::string::npos; i += 15) summary.insert(i + 1, 14, ' ');
    out += name + summary + "\n";
  }
  return out + "\nRun `canvas <command> --help` or `canvas help <command>` for the options of a command;\n"
               "`canvas --version` for the version and build.\n";
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
    std::fputs(usage().c_str(), argc < 2 ? stderr : stdout);
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
      std::fputs(usage().c_str(), stdout);
      return 0;
    }
    help_argv = {argv[0], argv[2], help_flag.data(), nullptr};
    argc = 3;
    argv = help_argv.data();
  }
  const std::string command = argv[1];
  try {
    register_sudoku_task();  // training's default task (`train`, `bench --train`)
    std::vector<std::string> names{"help"};
    for (const CommandEntry& c : kCommands) {
      if (command == c.name) return c.run(argc, argv);
      names.push_back(c.name);
    }
    const std::string suggestion = cli::unknown_option_message(command, names);
    const size_t mean = suggestion.find("did you mean");
    std::fprintf(stderr, "canvas: unknown command '%s'%s\n\n%s", command.c_str(),
                 mean == std::string::npos ? "" : ("; " + suggestion.substr(mean, suggestion.find('?') - mean + 1)).c_str(),
                 usage().c_str());
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
