// canvas tokenizer: train a Gemma-style BPE vocabulary on a corpus, export it as tokenizer.json, measure
// it on a corpus's splits, encode text with it.
#include <cstdio>
#include <string>

#include "cli/options.h"
#include "cli/output_paths.h"
#include "commands.h"
#include "core/error.h"
#include "core/output_file.h"
#include "io/bpe_trainer.h"
#include "io/gguf.h"
#include "io/hf_tokenizer.h"
#include "io/utf8.h"
#include "train/corpus.h"

namespace canvas::cli {
namespace {

const char* kTokenizerSynopsis = "canvas tokenizer <train|export|eval|encode|split> [options]";

const char* kTokenizerAbout =
    R"(Gemma-style subword tokenizers (BPE with byte fallback, '▁' for spaces, <0xNN> byte tokens, Gemma's
special-token ids) learned from a corpus. See docs/tokenizer.md.)";

const char* kTokenizerFile = R"(FILE is a GGUF holding tokenizer.ggml.* ("gemma4"/"llama") or a tokenizer.json.)";

const Option kValFraction{"--val-fraction", "F", "held-out fraction of each part's documents (default 0.02)"};

const Command kTokenizerTrain{
    "tokenizer train",
    "canvas tokenizer train --corpus SPEC --vocab-size N --out FILE.gguf [--json tokenizer.json]",
    R"(Learns a vocabulary of N tokens from the corpus's training split (the held-out documents, the
same ones `canvas train` holds out, are never seen) and writes it as a vocabulary-only GGUF
(tokenizer.ggml.*, model "gemma4"), and as a Hugging Face tokenizer.json with --json.)",
    {
        {"--corpus", "SPEC", "comma-separated: kjv (or bible), fortunes, or text files"},
        {"--vocab-size", "N", "tokens in all (specials, 256 bytes, characters, merges); 4096-8192 suit"},
        {"--out", "FILE.gguf", "the vocabulary-only GGUF to write"},
        {"--json", "FILE", "also write the vocabulary as a Hugging Face tokenizer.json"},
        kValFraction,
        {"--character-coverage", "F", "characters kept as tokens, by frequency (default 1: all)"},
        {"--min-frequency", "N", "pairs seen fewer times are not merged (default 2)"},
    },
    ""};

const Command kTokenizerExport{
    "tokenizer export",
    "canvas tokenizer export --tokenizer FILE.gguf --out tokenizer.json",
    "Writes a GGUF's Gemma-style vocabulary as tokenizer.json (reads back to the same ids).",
    {
        {"--tokenizer", "FILE.gguf", "the GGUF holding the vocabulary (tokenizer.ggml.*)"},
        {"--out", "FILE", "the tokenizer.json to write"},
    },
    ""};

const Command kTokenizerEval{
    "tokenizer eval",
    "canvas tokenizer eval --tokenizer FILE --corpus SPEC [--val-fraction F]",
    "Bytes per token on the corpus's training and held-out splits (documents without <bos>/<eos>).",
    {
        {"--tokenizer", "FILE", "the tokenizer to measure"},
        {"--corpus", "SPEC", "comma-separated: kjv (or bible), fortunes, or text files"},
        kValFraction,
    },
    kTokenizerFile};

const Command kTokenizerEncode{
    "tokenizer encode",
    "canvas tokenizer encode --tokenizer FILE -p TEXT",
    "Prints the ids and pieces of TEXT (special tokens written in TEXT are matched).",
    {
        {"--tokenizer", "FILE", "the tokenizer"},
        {"-p,--prompt", "TEXT", "the text"},
    },
    kTokenizerFile};

const Command kTokenizerSplit{
    "tokenizer split",
    "canvas tokenizer split --corpus SPEC [--val-fraction F] --train FILE --held-out FILE",
    R"(Writes the corpus's training and held-out documents (the split `canvas train` uses) as text,
each document followed by an empty line (e.g. held-out prompts, or another tool's input).)",
    {
        {"--corpus", "SPEC", "comma-separated: kjv (or bible), fortunes, or text files"},
        kValFraction,
        {"--train", "FILE", "write the training documents to FILE"},
        {"--held-out", "FILE", "write the held-out documents to FILE"},
    },
    ""};

void print_measure(const char* name, const train::TokenizationMeasure& m) {
  std::printf("%-9s %7lld documents %10lld bytes %9lld tokens  %.3f bytes/token\n", name, (long long)m.documents,
              (long long)m.bytes, (long long)m.tokens, m.bytes_per_token());
}

// The corpus spec's text files, as inputs an output must not overwrite.
std::vector<NamedPath> corpus_inputs(const std::string& spec) {
  std::vector<NamedPath> inputs;
  for (const std::string& file : train::corpus_files(spec)) inputs.push_back({"corpus file", file});
  return inputs;
}

double held_out_fraction(const Args& args) {
  const double f = args.get_float("val-fraction", 0.02);
  check(f >= 0 && f < 1, "--val-fraction must be in [0, 1)");
  return f;
}

int train_command(int argc, char** argv) {
  if (print_help_if_asked(kTokenizerTrain, argc, argv, 3)) return 0;
  Args args(kTokenizerTrain, argc, argv, 3);
  check(args.has("corpus"), "no corpus given (--corpus kjv); see canvas tokenizer --help");
  check(args.has("vocab-size"), "no vocabulary size given (--vocab-size N)");
  check(args.has("out"), "no output file given (--out FILE.gguf)");
  BpeTrainOptions o;
  const int64_t vocab = args.get_int("vocab-size", 0);
  check(vocab > 0 && vocab <= 262144, "--vocab-size must be between 1 and 262144");
  o.vocab_size = int32_t(vocab);
  o.character_coverage = args.get_float("character-coverage", o.character_coverage);
  check(o.character_coverage > 0 && o.character_coverage <= 1, "--character-coverage must be in (0, 1]");
  o.min_frequency = args.get_int("min-frequency", o.min_frequency);
  check(o.min_frequency >= 1, "--min-frequency must be at least 1");
  const double fraction = held_out_fraction(args);
  const std::string spec = args.get("corpus", ""), out = args.get("out", "");
  std::vector<NamedPath> inputs = corpus_inputs(spec);
  check_output_is_not_input({"--out", out}, inputs);
  inputs.push_back({"--out", out});
  check_output_is_not_input({"--json", args.get("json", "")}, inputs);

  const train::CorpusTokenizer t = train::train_corpus_tokenizer(spec, fraction, o);
  write_vocab_gguf(t.vocab, out, t.metadata);
  if (args.has("json")) write_file(args.get("json", ""), tokenizer_json_text(t.vocab));
  std::fprintf(stderr,
               "trained %zu tokens (%d alphabet characters, %d merges%s) from %lld training documents, %lld "
               "characters, %lld distinct words\n",
               t.vocab.tokens.size(), t.stats.alphabet, t.stats.merges,
               t.stats.stopped_early ? "; stopped early: no pair left at --min-frequency" : "",
               (long long)t.training_documents, (long long)t.stats.characters, (long long)t.stats.distinct_words);
  std::fprintf(stderr, "time: %.1f s reading and counting, %.1f s learning merges\n", t.counting_seconds,
               t.merging_seconds);
  print_measure("train", t.train);
  print_measure("held-out", t.held_out);
  std::fprintf(stderr, "wrote %s%s%s\n", out.c_str(), args.has("json") ? " and " : "",
               args.has("json") ? args.get("json", "").c_str() : "");
  return 0;
}

int export_command(int argc, char** argv) {
  if (print_help_if_asked(kTokenizerExport, argc, argv, 3)) return 0;
  Args args(kTokenizerExport, argc, argv, 3);
  check(args.has("tokenizer"), "no tokenizer given (--tokenizer FILE.gguf)");
  check(args.has("out"), "no output file given (--out tokenizer.json)");
  check_output_is_not_input({"--out", args.get("out", "")}, {{"--tokenizer", args.get("tokenizer", "")}});
  const auto file = GgufFile::open(args.get("tokenizer", ""));
  write_file(args.get("out", ""), tokenizer_json_text(HfTokenizer::vocab_from_gguf(*file)));
  std::fprintf(stderr, "wrote %s\n", args.get("out", "").c_str());
  return 0;
}

int eval_command(int argc, char** argv) {
  if (print_help_if_asked(kTokenizerEval, argc, argv, 3)) return 0;
  Args args(kTokenizerEval, argc, argv, 3);
  check(args.has("tokenizer"), "no tokenizer given (--tokenizer FILE)");
  check(args.has("corpus"), "no corpus given (--corpus SPEC)");
  const HfTokenizer tokenizer = HfTokenizer::from_file(args.get("tokenizer", ""));
  const train::CorpusSplit split = train::split_corpus(train::load_corpus(args.get("corpus", "")), held_out_fraction(args));
  std::printf("%s: %d tokens\n", args.get("tokenizer", "").c_str(), tokenizer.vocab_size());
  print_measure("train", train::measure_tokenization(split.train, tokenizer));
  print_measure("held-out", train::measure_tokenization(split.held_out, tokenizer));
  return 0;
}

int encode_command(int argc, char** argv) {
  if (print_help_if_asked(kTokenizerEncode, argc, argv, 3)) return 0;
  Args args(kTokenizerEncode, argc, argv, 3);
  check(args.has("tokenizer"), "no tokenizer given (--tokenizer FILE)");
  check(args.has("prompt"), "no text given (-p TEXT)");
  const HfTokenizer tokenizer = HfTokenizer::from_file(args.get("tokenizer", ""));
  const std::vector<int32_t> ids = tokenizer.encode(args.get("prompt", ""), false, true);
  for (int32_t id : ids)  // as stored, with control bytes escaped
    std::printf("%d\t%s\n", id, escape_controls(tokenizer.token_text(id)).c_str());
  std::fprintf(stderr, "%zu tokens, %zu bytes\n", ids.size(), args.get("prompt", "").size());
  return 0;
}

int split_command(int argc, char** argv) {
  if (print_help_if_asked(kTokenizerSplit, argc, argv, 3)) return 0;
  Args args(kTokenizerSplit, argc, argv, 3);
  check(args.has("corpus"), "no corpus given (--corpus SPEC)");
  check(args.has("train") || args.has("held-out"), "nothing to write (--train FILE and/or --held-out FILE)");
  std::vector<NamedPath> inputs = corpus_inputs(args.get("corpus", ""));
  check_output_is_not_input({"--train", args.get("train", "")}, inputs);
  inputs.push_back({"--train", args.get("train", "")});
  check_output_is_not_input({"--held-out", args.get("held-out", "")}, inputs);
  const train::CorpusSplit split = train::split_corpus(train::load_corpus(args.get("corpus", "")), held_out_fraction(args));
  for (const auto& [flag, docs] : {std::pair<const char*, const std::vector<train::CorpusDocument>*>{"train", &split.train},
                                   {"held-out", &split.held_out}}) {
    if (!args.has(flag)) continue;
    const std::string path = args.get(flag, "");
    const std::vector<train::CorpusDocument>& documents = *docs;  // clang 14 cannot capture a binding
    write_file(path, [&documents](std::ostream& out) {
      for (const train::CorpusDocument& d : documents) out << d.text << "\n";
    });
    std::fprintf(stderr, "wrote %zu documents to %s\n", documents.size(), path.c_str());
  }
  return 0;
}

}  // namespace

int cmd_tokenizer(int argc, char** argv) {
  static const CommandGroup group{"tokenizer", kTokenizerSynopsis, kTokenizerAbout,
                                  {{&kTokenizerTrain, train_command},
                                   {&kTokenizerExport, export_command},
                                   {&kTokenizerEval, eval_command},
                                   {&kTokenizerEncode, encode_command},
                                   {&kTokenizerSplit, split_command}},
                                  kTokenizerFile};
  return run_command_group(group, argc, argv);
}

}  // namespace canvas::cli
