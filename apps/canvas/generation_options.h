// What generate and chat share on the command line: the decoding option table, a GenerationRequest from
// those flags, the model as the commands load it, and the terminal output (stream or live view) (the stats line and JSON of a result
// are decode/generation_report.h's).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli/live_screen.h"
#include "cli/options.h"
#include "core/thread_pool.h"
#include "decode/cost_model.h"
#include "decode/mode_router.h"
#include "decode/default_sampling.h"
#include "decode/events.h"
#include "io/text_tokenizer.h"
#include "decode/generation.h"
#include "decode/text_model.h"

namespace canvas::cli {

// The decoding options generate and chat share (-n, --mode, sampling, masked and uniform-state settings,
// threads, device, streaming and the live view).
std::vector<Option> decoding_options();

// A thread pool of --threads N (0 or absent: all cores); checks the range.
std::unique_ptr<ThreadPool> make_pool(const Args& args);

// The run's seed: -s/--seed N, or a fresh random one when the flag is absent or -1 (the caller reports it).
uint64_t resolve_seed(const Args& args);

// A request from the decoding options (the prompt is left to the caller); the seed resolved.
GenerationRequest request_from_args(const Args& args);
// One -l/--logit-bias value, llama.cpp's TOKEN_ID(+|-)BIAS ("15043+1", "15043-inf": a ban); Error otherwise.
std::pair<int32_t, float> parse_logit_bias(const std::string& text);

// The sampling flags given (--temp, --top-k, --top-p, --min-p); the model's defaults fill the others.
SamplingGiven sampling_given(const Args& args);

// --mode auto's router for generate and chat (decode/mode_router.h): the cost model kept per model and machine
// in --cost-model FILE (default default_cost_model_file(); "none": not kept), its passes timed on `pool` on
// first use; --draft-datastore weighs verify with the datastore against AR.
RouterOptions router_options(const Args& args, const TextModel& m, ThreadPool* pool);

// --draft-datastore FILE's corpus, tokenized by m's tokenizer (cached; warnings on stderr); null without it.
std::shared_ptr<const Datastore> load_datastore(const Args& args, const TextModel& m);

// Error for -m FOLDER without config.json (a folder of GGUFs is serve's), naming the GGUFs in it.
void check_model_path(const std::string& path, const std::string& command);

// -m MODEL (else the shipped `default_model`) loaded with --device, --tokenizer and --template.
TextModel load_text_model(const Args& args, const std::string& default_model, const std::string& command);

// The prompt of generate: -p TEXT, -p - (stdin), -f/--file FILE, or (without either) stdin when it is
// not a terminal. One trailing newline of a file or stdin is dropped. Throws when there is none.
std::string read_prompt(const Args& args, const std::string& help_command);

// Where a run's text, canvas and stats go on the terminal. With --visual (and stderr a terminal; otherwise a
// notice says it is ignored) the live view on stderr's alternate screen (left again by close(), or on
// SIGINT / SIGTERM): a header naming the mode, the prompt (cyan; a chat's turn on a line of its own), then
// the generated region with final tokens plain, this step's commits bold green, masked positions as shaded
// blocks and noise or drafts dim (newlines kept, other control characters escaped), redrawn every step,
// each frame at least --visual-delay ms (default 50) on screen (the generator leaves callback time out of
// its speed figures). The view leaves nothing behind: the text then goes to stdout once, as it does when
// stdout is piped. Otherwise the text is streamed to stdout as it is finalised, unless --no-stream or
// `whole_text_only` (--json: stdout holds one object; infilling prints the whole text at the end).
class TerminalOutput {
 public:
  TerminalOutput(const Args& args, const TextModel& m, std::string prompt, bool whole_text_only);
  // Sets the request's on_step (the view) or on_text (the stream); the view's header names the mode
  // `generator` runs the request in. A chat calls it for every turn (its mode and prompt change).
  void attach(GenerationRequest& request, const Generator& generator);
  // Leaves the live view (a no-op without one).
  void close();
  // The reply's end: the text where it was not streamed, then a newline with `end_line` (chat: each reply
  // on lines of its own), or where the text left its line open and something follows on the same screen or
  // stream: the shell's prompt (stdout a terminal), the stats line (stdout and stderr one terminal, pipe or
  // file). Otherwise stdout holds the text byte for byte.
  void finish_text(const std::string& text, bool end_line);
  // The stats line on stderr: generation_summary_line, generation_stats_line with --verbose, none with
  // --quiet; "[interrupted]" after Ctrl-C either way.
  void print_stats(const GenerationOutput& out, int threads) const;

 private:
  void draw(const StepEvent& e);
  void write(const std::string& text);  // to stdout, flushed
  const TextTokenizer* tokenizer_;
  int32_t mask_;
  LiveScreen screen_;
  const std::string given_prompt_;                       // generate's prompt ("" for infilling)
  std::string prompt_;                                   // the one drawn
  DecodeMode mode_ = DecodeMode::Auto;
  bool visual_ = false, stream_ = false, quiet_ = false, verbose_ = false;
  bool line_open_ = false;  // stdout's last byte written is not a newline
};

}  // namespace canvas::cli
