// canvas tokenize / detokenize: text <-> token ids with a model's vocabulary (a GGUF, including
// vocabulary-only GGUF files, a tokenizer.json, or a safetensors checkpoint's directory).
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/options.h"
#include "commands.h"
#include "core/error.h"
#include "io/bpe_json.h"
#include "io/gguf.h"
#include "io/hf_tokenizer.h"
#include "io/input_file.h"
#include "io/json.h"
#include "io/spm_tokenizer.h"
#include "io/text_tokenizer.h"
#include "io/tokenizer.h"
#include "shipped_models.h"

namespace canvas::cli {
namespace {

const Command kTokenize{
    "tokenize",
    "canvas tokenize -m MODEL (-p TEXT | -f FILE) [--json] [--bos]",
    R"(Prints the token ids of the text, space-separated on one line. Special tokens written literally in the
text (e.g. "<|endoftext|>") are matched as single tokens.)",
    {
        {"-m,--model", "MODEL",
         "a GGUF file (a vocabulary-only GGUF is enough: tokenizer.ggml.model gpt2, llama\n"
         "with scores, llama / gemma4 with merges), a tokenizer.json, or a Hugging Face\n"
         "checkpoint directory holding tokenizer.json (default: the shipped text model's,\n"
         "models/text-dg.gguf)"},
        {"-p,--prompt", "TEXT", "the text"},
        {"-f,--file", "FILE", "read the text from FILE (its bytes, unchanged; at most 16 MiB)"},
        {"--json", "",
         "print {\"ids\": [...], \"pieces\": [...]} instead: each token's bytes as a string\n"
         "(bytes that are not UTF-8 on their own are shown as U+FFFD)"},
        {"--bos", "", "prepend the vocabulary's BOS token (none is added otherwise)"},
    },
    ""};

const Command kDetokenize{
    "detokenize",
    "canvas detokenize -m MODEL --ids 1,2,3",
    "Prints the text of the token ids (control tokens such as BOS are dropped). MODEL as for tokenize.",
    {
        {"-m,--model", "MODEL", "a GGUF file, a tokenizer.json, or a Hugging Face checkpoint directory\n"
                                "(default: the shipped text model's, models/text-dg.gguf)"},
        {"--ids", "IDS", "the token ids, comma-separated (1,2,3)"},
    },
    ""};

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  if (print_help_if_asked(kTokenize, argc, argv)) return 0;
  Args args(kTokenize, argc, argv, 2);
  check(args.has("prompt") != args.has("file"), "give the text with exactly one of -p TEXT or -f FILE");
  // A prompt's bound (as generate -f): the file is refused by its size before it is read.
  const std::string text = args.has("file")
                               ? read_file_bounded(args.get("file", ""), kMaxPromptBytes, "text file", "kMaxPromptBytes")
                               : args.get("prompt", "");
  const TextTokenizer t = TextTokenizer::open(model_or_shipped(args, kDefaultTextModel, "canvas tokenize"));
  check(!args.has("bos") || t.bos_id() >= 0, "--bos: the vocabulary has no BOS token");
  const std::vector<int32_t> ids = t.encode(text, args.has("bos"));
  if (args.has("json")) {
    nlohmann::json out = {{"ids", ids}, {"pieces", nlohmann::json::array()}};
    for (int32_t id : ids) out["pieces"].push_back(t.token_piece(id));
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  std::printf("%s\n", line.c_str());
  return 0;
}

int cmd_detokenize(int argc, char** argv) {
  if (print_help_if_asked(kDetokenize, argc, argv)) return 0;
  Args args(kDetokenize, argc, argv, 2);
  check(args.has("ids"), "no token ids given (--ids 1,2,3)");
  const TextTokenizer t = TextTokenizer::open(model_or_shipped(args, kDefaultTextModel, "canvas detokenize"));
  const std::string text = t.decode(parse_id_list(args.get("ids", ""), "--ids"));
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace canvas::cli
