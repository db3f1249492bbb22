// Progress of a long job on stderr: count, rate and ETA, redrawn in place on a terminal and printed
// as a line per tenth of the job when stderr is a file or pipe; always a final line.
#pragma once
#include <cstdint>
#include <string>

namespace canvas::cli {

class Progress {
 public:
  // label: what is counted ("puzzles", "windows", "tensors"); total 0 = unknown (no ETA).
  Progress(std::string label, int64_t total);
  ~Progress();              // ends the line if finish() was not called
  void add(int64_t n = 1);  // n more done; redraws at most a few times per second
  void finish();            // the final line (always printed): count, rate, elapsed

 private:
  void print(bool final);
  std::string label_;
  int64_t total_, done_ = 0;
  double start_ms_, last_ms_ = -1e18;
  int64_t last_tenth_ = -1;
  bool tty_, finished_ = false;
};

}  // namespace canvas::cli
