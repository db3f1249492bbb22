// The charts of an installed canvas: `cmake --install` to a prefix outside the source tree, run from a
// directory elsewhere, and `bench --plot` and `train` must write their PNGs themselves (no python, no
// scripts from the source tree).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "png_test_util.h"
#include "test_util.h"

namespace canvas {
namespace {

// The shell command's exit status and its output (stderr merged).
test::CommandResult run_shell(const std::string& command) {
  test::CommandResult r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, got);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Pixels of exactly `colour` in the image (none in one that did not decode).
int count_colour(const test::DecodedPng& png, std::array<uint8_t, 3> colour) {
  if (png.rgb.size() != size_t(png.width) * size_t(png.height) * 3) return 0;
  int n = 0;
  for (int y = 0; y < png.height; ++y)
    for (int x = 0; x < png.width; ++x) n += png.at(x, y) == colour;
  return n;
}

// Runs `command` (the installed canvas) in `work`: it must succeed and say it plotted `png` (a path
// relative to `work`), and the file must be canvas's own PNG of width x height.
test::DecodedPng run_and_read_chart(const std::string& work, const std::string& command,
                                    const std::string& png, int width, int height) {
  const auto r = run_shell("cd " + work + " && " + command);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("plotted " + png), std::string::npos) << r.output;
  test::DecodedPng chart = test::decode_png(test::read_text(work + "/" + png));
  EXPECT_EQ(chart.error, "") << r.output;
  EXPECT_EQ(chart.width, width);
  EXPECT_EQ(chart.height, height);
  // What wrote it: canvas's encoder names itself (matplotlib would write "Matplotlib version ...").
  EXPECT_EQ(chart.text.count("Software") ? chart.text.at("Software") : "", "canvas");
  return chart;
}

TEST(PlotsCli, InstalledCanvasDrawsBenchAndTrainingChartsItself) {
  test::TempDir dir;
  const std::string prefix = dir.path("prefix"), work = dir.path("work");
  std::filesystem::create_directories(work);
  const auto install =
      run_shell(std::string(CANVAS_CMAKE) + " --install " + CANVAS_BUILD_DIR + " --prefix " + prefix);
  ASSERT_EQ(install.exit_code, 0) << install.output;
  const std::string canvas = prefix + "/bin/canvas";
  ASSERT_TRUE(std::filesystem::exists(canvas)) << install.output;

  // bench --plot, the path relative to a working directory outside the source tree.
  const test::DecodedPng chart = run_and_read_chart(
      work,
      canvas +
          " bench --synthetic llada:tiny --type q8_0 --quick --no-roofs -t 2 --cache prefix,dual "
          "--block-length 4 --plot bench.png",
      "bench.png", 960, 600);
  EXPECT_GT(count_colour(chart, {31, 119, 180}), 20) << "the prefix markers (blue)";
  EXPECT_GT(count_colour(chart, {44, 160, 44}), 20) << "the dual markers (green)";
  EXPECT_GT(count_colour(chart, {128, 128, 128}), 100) << "the AR line (gray)";

  // A two-step training run writes OUT/curves.png.
  std::ofstream(work + "/tiny.cfg")
      << "task = sudoku\nobjective = masked\nlayers = 2\nhidden = 32\nheads = 2\n"
         "kv_heads = 2\nffn = 64\neval_examples = 16\nbatch_size = 4\nsteps = 2\n"
         "warmup = 1\neval_every = 1\ncheckpoint_every = 2\nthreads = 2\n";
  const test::DecodedPng curves =
      run_and_read_chart(work, canvas + " train --config tiny.cfg --out run", "run/curves.png", 880, 495);
  EXPECT_GT(count_colour(curves, {255, 127, 14}), 20) << "the validation loss (orange)";
}

}  // namespace
}  // namespace canvas
