// One frame of the live canvas view (--visual): the step's header and the generated region as terminal
// text, with ANSI styles saying what each position is.
#pragma once
#include <cstdint>
#include <string>

#include "decode/events.h"
#include "io/text_tokenizer.h"

namespace canvas {

// Two lines: "[block B step S, P passes]" with the legend, then the prompt (dim) followed by the region:
// final tokens plain, this step's commits bold green, masked positions as shaded blocks (U+2591, dim), and
// positions from e.final_end on (noise, drafts) dim. Pieces are made printable (invalid UTF-8 as U+FFFD,
// control characters escaped); without a tokenizer a token is written "<ID>".
std::string canvas_frame(const StepEvent& e, const TextTokenizer* tokenizer, int32_t mask, const std::string& prompt);

}  // namespace canvas
