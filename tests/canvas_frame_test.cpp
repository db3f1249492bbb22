// The live view's frame: its header, what each position of the canvas is drawn as, and control characters.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "decode/canvas_frame.h"
#include "io/utf8.h"
#include "test_util.h"

namespace canvas {
namespace {

const std::string kBold = "\x1b[1;32m", kDim = "\x1b[2m", kPrompt = "\x1b[36m", kOff = "\x1b[0m";
const std::string kLegend = kPrompt + "prompt" + kOff + " " + kBold + "committed" + kOff + " " + kDim + "noise/draft" + kOff;

TEST(CanvasFrame, StylesPromptFinalCommittedMaskedAndDraftedPositions) {
  const std::vector<int32_t> canvas = {11, 12, 99, 13, 14};
  StepEvent e;
  e.block = 1;
  e.step = 2;
  e.passes = 7;
  e.canvas = &canvas;
  e.committed = {1, 8};  // an index past the canvas is ignored
  e.final_end = 3;
  const std::string frame = canvas_frame(e, nullptr, /*mask=*/99, "say\n", DecodeMode::Diffusion);
  // The prompt in its own style (not the drafts' dim), its newline a real one.
  EXPECT_EQ(frame, "[diffusion: block 1 step 2, 7 passes] " + kLegend + "\n" + kPrompt + "say\n" + kOff + "<11>" +
                       kBold + "<12>" + kOff + kDim + "\xE2\x96\x91" + kOff + kDim + "<13>" + kOff + kDim + "<14>" +
                       kOff + "\n");
  e.final_end = -1;  // unknown: nothing after the final tokens
  EXPECT_EQ(canvas_frame(e, nullptr, 99, "", DecodeMode::Diffusion).find(kDim + "<13>"), std::string::npos);
}

// AR and verify have no blocks: their header counts the final tokens (and verify's cycles), never
// "[block 0 step 24]".
TEST(CanvasFrame, HeaderNamesTheMode) {
  const std::vector<int32_t> canvas = {11, 12, 13, 14, 15};
  StepEvent e;
  e.step = 4;
  e.passes = 5;
  e.canvas = &canvas;
  e.final_end = 5;
  EXPECT_EQ(canvas_frame(e, nullptr, -1, "", DecodeMode::Ar).rfind("[ar: 5 tokens, 5 passes] ", 0), 0u);
  e.step = 2;
  e.passes = 4;
  e.final_end = 3;  // two drafts follow
  const std::string verify = canvas_frame(e, nullptr, -1, "", DecodeMode::Verify);
  EXPECT_EQ(verify.rfind("[verify: 3 tokens, cycle 2, 4 passes] ", 0), 0u) << verify;
  EXPECT_EQ(verify.find("block"), std::string::npos) << verify;
}

TEST(CanvasFrame, TokenPiecesArePrintableWithRealNewlines) {
  const TextTokenizer t = TextTokenizer::open(test::fixture("hf/tokenizer.json"));
  const std::vector<int32_t> ids = t.encode("a\nb", false, false);
  StepEvent e;
  e.canvas = &ids;
  const std::string frame = canvas_frame(e, &t, -1, "x\ty\x1b\n", DecodeMode::Ar);
  EXPECT_NE(frame.find("a\nb"), std::string::npos) << frame;
  EXPECT_EQ(frame.find("\\n"), std::string::npos) << "a newline written as \\n: " << frame;
  EXPECT_NE(frame.find("x\\ty\\x1b\n"), std::string::npos) << frame;  // other control characters escaped
  EXPECT_EQ(escape_controls("x\t\r\x01\x7f"), "x\\t\\r\\x01\\x7f");
}

}  // namespace
}  // namespace canvas
