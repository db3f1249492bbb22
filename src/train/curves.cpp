// training_chart: train.csv's step, loss and val_loss columns as a report::LineChart.
#include "train/curves.h"

#include <cstdlib>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "io/input_file.h"
#include "report/png.h"

namespace canvas::train {
namespace {

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, ',')) cells.push_back(cell);
  if (!line.empty() && line.back() == ',') cells.emplace_back();
  return cells;
}

double number(const std::string& cell, const std::string& where) {
  char* end = nullptr;
  const double v = std::strtod(cell.c_str(), &end);
  check(!cell.empty() && end == cell.c_str() + cell.size(), where + ": '" + cell + "' is not a number");
  return v;
}

}  // namespace

report::LineChart training_chart(const std::string& csv_path) {
  // Read whole with a bound, and only from a regular file (a FIFO would block, a device never end).
  std::istringstream in(read_regular_file_bounded(csv_path, kMaxCorpusBytes, "training log", "kMaxCorpusBytes"));
  std::string line;
  check(bool(std::getline(in, line)), csv_path + " is empty (no header line)");
  const std::vector<std::string> header = split_csv_line(line);
  auto column = [&](const std::string& name) {
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == name) return i;
    throw Error(csv_path + ": no '" + name + "' column in the header");
  };
  const size_t step_at = column("step"), loss_at = column("loss"), val_at = column("val_loss");

  report::ChartSeries train_loss, val_loss;
  train_loss.name = "train loss";
  // Matplotlib's first colour at 60% over white, one pixel wide: the noisy curve stays behind the other.
  train_loss.colour = report::blend(report::kBlue, report::kWhite, 0.6);
  train_loss.line_width = 1;
  val_loss.name = "validation loss";
  val_loss.colour = report::kOrange;
  val_loss.line_width = 2;
  val_loss.marker_radius = 3;
  for (int line_no = 2; std::getline(in, line); ++line_no) {
    if (line.empty()) continue;
    const std::vector<std::string> cells = split_csv_line(line);
    const std::string where = csv_path + " line " + std::to_string(line_no);
    check(cells.size() == header.size(), where + ": " + std::to_string(cells.size()) +
                                             " cells, the header has " + std::to_string(header.size()));
    const double step = number(cells[step_at], where);
    train_loss.x.push_back(step);
    train_loss.y.push_back(number(cells[loss_at], where));
    if (!cells[val_at].empty()) {
      val_loss.x.push_back(step);
      val_loss.y.push_back(number(cells[val_at], where));
    }
  }
  report::LineChart chart;
  chart.width = 880;  // 8 x 4.5 inches at 110 dpi, as the curves were drawn before
  chart.height = 495;
  chart.title = csv_path;
  chart.x.label = "step";
  chart.y.label = "loss (nats per scored token)";
  chart.y.log = true;
  chart.series.push_back(train_loss);
  if (!val_loss.x.empty()) chart.series.push_back(val_loss);
  return chart;
}

void write_training_plot(const std::string& csv_path, const std::string& png_path) {
  report::write_png(png_path, report::render_chart(training_chart(csv_path)));
}

}  // namespace canvas::train
