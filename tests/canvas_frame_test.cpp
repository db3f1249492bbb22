// The live view's frame: what each position of the canvas is drawn as, and control characters escaped.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "decode/canvas_frame.h"
#include "io/utf8.h"
#include "test_util.h"

namespace canvas {
namespace {

const std::string kBold = "\x1b[1;32m", kDim = "\x1b[2m", kOff = "\x1b[0m";

TEST(CanvasFrame, StylesFinalCommittedMaskedAndDraftedPositions) {
  const std::vector<int32_t> canvas = {11, 12, 99, 13, 14};
  StepEvent e;
  e.block = 1;
  e.step = 2;
  e.passes = 7;
  e.canvas = &canvas;
  e.committed = {1, 8};  // an index past the canvas is ignored
  e.final_end = 3;
  const std::string frame = canvas_frame(e, nullptr, /*mask=*/99, "say\n");
  EXPECT_EQ(frame, "[block 1 step 2, 7 passes] " + kBold + "committed" + kOff + " " + kDim + "noise/draft" + kOff +
                       "\n" + kDim + "say\\n" + kOff + "<11>" + kBold + "<12>" + kOff + kDim + "\xE2\x96\x91" + kOff +
                       kDim + "<13>" + kOff + kDim + "<14>" + kOff + "\n");
  e.final_end = -1;  // unknown: nothing after the final tokens
  EXPECT_EQ(canvas_frame(e, nullptr, 99, "").find(kDim + "<13>"), std::string::npos);
}

TEST(CanvasFrame, TokenPiecesArePrintable) {
  const TextTokenizer t = TextTokenizer::open(test::fixture("hf/tokenizer.json"));
  const std::vector<int32_t> ids = t.encode("a\nb", false, false);
  StepEvent e;
  e.canvas = &ids;
  const std::string frame = canvas_frame(e, &t, -1, "");
  EXPECT_NE(frame.find("a\\nb"), std::string::npos) << frame;
  EXPECT_EQ(escape_controls("x\t\r\x01\x7f"), "x\\t\\r\\x01\\x7f");
}

}  // namespace
}  // namespace canvas
