// What generate and chat share on the command line: the decoding option table, a GenerationRequest from
// those flags, the model as the commands load it, and the live view (the stats line and JSON of a result
// are decode/generation_report.h's).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cli/options.h"
#include "core/thread_pool.h"
#include "decode/events.h"
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

// -m MODEL (else the shipped `default_model`) loaded with --device, --tokenizer and --template.
TextModel load_text_model(const Args& args, const std::string& default_model, const std::string& command);

// The prompt of generate: -p TEXT, -p - (stdin), -f/--file FILE, or (without either) stdin when it is
// not a terminal. One trailing newline of a file or stdin is dropped. Throws when there is none.
std::string read_prompt(const Args& args, const std::string& help_command);

// Live view on stderr's alternate screen (left again by finish(), or on SIGINT / SIGTERM): the prompt
// (dim), then the generated region with final tokens plain, this step's commits bold green, masked
// positions as shaded blocks and noise or drafts dim (control characters escaped), redrawn every step,
// then a pause of delay_ms (the generator leaves callback time out of its speed figures).
class CanvasView {
 public:
  CanvasView(const TextTokenizer* tokenizer, int32_t mask, int64_t delay_ms = 0, std::string prompt = "")
      : tokenizer_(tokenizer), mask_(mask), delay_ms_(delay_ms), prompt_(std::move(prompt)) {}
  void draw(const StepEvent& e);
  void finish();

 private:
  const TextTokenizer* tokenizer_;
  int32_t mask_;
  int64_t delay_ms_;
  std::string prompt_;
};

// --visual and --visual-delay: true when --visual is given and stderr is a terminal; says on stderr
// that it is ignored otherwise (escape codes would land in a redirected file).
bool visual_enabled(const Args& args);

}  // namespace canvas::cli
