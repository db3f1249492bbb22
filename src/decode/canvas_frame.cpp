// One frame of the live canvas view.
#include "decode/canvas_frame.h"

#include <vector>

#include "io/utf8.h"

namespace canvas {

std::string canvas_frame(const StepEvent& e, const TextTokenizer* tokenizer, int32_t mask, const std::string& prompt) {
  const std::vector<int32_t>& canvas = *e.canvas;
  std::vector<uint8_t> committed(canvas.size(), 0);
  for (int64_t i : e.committed)
    if (i >= 0 && i < int64_t(committed.size())) committed[size_t(i)] = 1;
  const int64_t final_end = e.final_end >= 0 ? e.final_end : int64_t(canvas.size());
  std::string text;
  for (size_t i = 0; i < canvas.size(); ++i) {
    const int32_t id = canvas[i];
    if (id == mask) {
      text += "\x1b[2m\xE2\x96\x91\x1b[0m";
      continue;
    }
    const std::string piece = tokenizer ? escape_controls(sanitize_utf8(tokenizer->token_piece(id)))
                                        : "<" + std::to_string(id) + ">";
    if (committed[i]) text += "\x1b[1;32m" + piece + "\x1b[0m";
    else if (int64_t(i) >= final_end) text += "\x1b[2m" + piece + "\x1b[0m";
    else text += piece;
  }
  return "[block " + std::to_string(e.block) + " step " + std::to_string(e.step) + ", " + std::to_string(e.passes) +
         " passes] \x1b[1;32mcommitted\x1b[0m \x1b[2mnoise/draft\x1b[0m\n\x1b[2m" +
         escape_controls(sanitize_utf8(prompt)) + "\x1b[0m" + text + "\n";
}

}  // namespace canvas
