// Progress lines for long CLI jobs.
#include "cli/progress.h"

#include <unistd.h>

#include <cstdio>

#include "core/timer.h"

namespace canvas::cli {

Progress::Progress(std::string label, int64_t total)
    : label_(std::move(label)), total_(total), start_ms_(now_ms()), tty_(isatty(STDERR_FILENO)) {}

Progress::~Progress() {
  if (!finished_ && done_ > 0 && tty_) std::fputc('\n', stderr);
}

void Progress::add(int64_t n) {
  done_ += n;
  const double now = now_ms();
  if (tty_) {
    if (now - last_ms_ < 250 && done_ != total_) return;
  } else {
    // Files and pipes get a line per tenth of the job; with no total, only the final line (a log of
    // stdin-driven work, e.g. sudoku solve, keeps its lines in step with the input).
    if (total_ <= 0) return;
    const int64_t tenth = done_ * 10 / total_;
    if (tenth == last_tenth_ || done_ == total_) return;
    last_tenth_ = tenth;
  }
  last_ms_ = now;
  print(false);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  print(true);
}

void Progress::print(bool final) {
  const double seconds = (now_ms() - start_ms_) / 1000.0;
  const double rate = seconds > 0 ? double(done_) / seconds : 0.0;
  char line[256];
  if (final) {
    std::snprintf(line, sizeof line, "[%lld %s in %.1f s, %.2f %s/s]", (long long)done_, label_.c_str(),
                  seconds, rate, label_.c_str());
  } else if (total_ > 0) {
    const double eta = rate > 0 ? double(total_ - done_) / rate : 0.0;
    std::snprintf(line, sizeof line, "[%lld/%lld %s, %.2f %s/s, ETA %.0f s]", (long long)done_,
                  (long long)total_, label_.c_str(), rate, label_.c_str(), eta);
  } else {
    std::snprintf(line, sizeof line, "[%lld %s, %.2f %s/s]", (long long)done_, label_.c_str(), rate,
                  label_.c_str());
  }
  if (tty_) {
    std::fprintf(stderr, "\r\x1b[K%s%s", line, final ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s\n", line);
  }
  std::fflush(stderr);
}

}  // namespace canvas::cli
