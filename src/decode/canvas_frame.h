// One frame of the live canvas view (--visual): the step's header and the generated region as terminal
// text, with ANSI styles saying what each position is.
#pragma once
#include <cstdint>
#include <string>

#include "decode/events.h"
#include "decode/generation.h"
#include "io/text_tokenizer.h"

namespace canvas {

// A header naming `mode` and where the run is ("[diffusion: block B step S, P passes]"; AR and verify,
// which have no blocks: "[ar: N tokens, P passes]", "[verify: N tokens, cycle C, P passes]") with the
// legend, then the prompt (cyan) followed by the region: final tokens plain, this step's commits bold
// green, masked positions as shaded blocks (U+2591, dim), and positions from e.final_end on (noise,
// drafts) dim. Text keeps its newlines, other control characters are escaped and invalid UTF-8 is
// U+FFFD; without a tokenizer a token is written "<ID>".
std::string canvas_frame(const StepEvent& e, const TextTokenizer* tokenizer, int32_t mask, const std::string& prompt,
                         DecodeMode mode);

}  // namespace canvas
