// One frame of the live canvas view.
#include "decode/canvas_frame.h"

#include <string_view>
#include <vector>

#include "io/utf8.h"

namespace canvas {

namespace {
constexpr char kPromptStyle[] = "\x1b[36m", kCommitStyle[] = "\x1b[1;32m", kDimStyle[] = "\x1b[2m",
               kPlain[] = "\x1b[0m";

// The view spans lines: newlines stay real, other control characters are escaped (they would move the cursor).
std::string printable(std::string_view s) {
  std::string out;
  for (size_t start = 0;;) {
    const size_t newline = s.find('\n', start);
    out += escape_controls(sanitize_utf8(s.substr(start, newline - start)));
    if (newline == std::string_view::npos) return out;
    out += '\n';
    start = newline + 1;
  }
}

std::string styled(const char* style, const std::string& text) { return style + text + kPlain; }
}  // namespace

std::string canvas_frame(const StepEvent& e, const TextTokenizer* tokenizer, int32_t mask, const std::string& prompt,
                         DecodeMode mode) {
  const std::vector<int32_t>& canvas = *e.canvas;
  std::vector<uint8_t> committed(canvas.size(), 0);
  for (int64_t i : e.committed)
    if (i >= 0 && i < int64_t(committed.size())) committed[size_t(i)] = 1;
  const int64_t final_end = e.final_end >= 0 ? e.final_end : int64_t(canvas.size());
  std::string text;
  for (size_t i = 0; i < canvas.size(); ++i) {
    const int32_t id = canvas[i];
    if (id == mask) {
      text += styled(kDimStyle, "\xE2\x96\x91");
      continue;
    }
    // Sanitised piece by piece: a token may hold part of a character (a byte-fallback token).
    const std::string piece = tokenizer ? printable(tokenizer->token_piece(id)) : "<" + std::to_string(id) + ">";
    if (committed[i]) text += styled(kCommitStyle, piece);
    else if (int64_t(i) >= final_end) text += styled(kDimStyle, piece);
    else text += piece;
  }
  std::string where;
  if (mode == DecodeMode::Diffusion) where = "block " + std::to_string(e.block) + " step " + std::to_string(e.step);
  else where = std::to_string(final_end) + " tokens";
  if (mode == DecodeMode::Verify) where += ", cycle " + std::to_string(e.step);
  return "[" + std::string(decode_mode_name(mode)) + ": " + where + ", " + std::to_string(e.passes) + " passes] " +
         styled(kPromptStyle, "prompt") + " " + styled(kCommitStyle, "committed") + " " +
         styled(kDimStyle, "noise/draft") + "\n" + styled(kPromptStyle, printable(prompt)) + text + "\n";
}

}  // namespace canvas
