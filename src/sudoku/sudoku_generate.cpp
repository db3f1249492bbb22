// Puzzle sets from canvas's generator or from Debian's qqwing, read as it writes them.
#include "sudoku/sudoku_generate.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/rng.h"

namespace canvas {
namespace {

// `qqwing --generate N --difficulty D --one-line --solution --stats`, its standard output read line by
// line as it comes (stderr discarded). The process is our child, not a shell's, so that stopping early
// can end it at once instead of waiting for the rest of its batch.
class QqwingProcess {
 public:
  QqwingProcess(int64_t count, const std::string& difficulty) {
    const std::vector<std::string> args{"qqwing",   "--generate", std::to_string(count), "--difficulty",
                                        difficulty, "--one-line", "--solution",          "--stats"};
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    int fds[2];
    check(pipe(fds) == 0, "cannot run qqwing (install Debian's qqwing package)");
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      const int null = open("/dev/null", O_WRONLY);
      if (null >= 0) dup2(null, STDERR_FILENO);
      close(fds[0]);
      close(fds[1]);
      execvp("qqwing", argv.data());
      _exit(127);  // as a shell reports a command it cannot find
    }
    close(fds[1]);
    if (pid_ < 0) {
      close(fds[0]);
      throw Error("cannot run qqwing (install Debian's qqwing package)");
    }
    fd_ = fds[0];
  }
  ~QqwingProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      wait();
    }
    if (fd_ >= 0) close(fd_);
  }
  QqwingProcess(const QqwingProcess&) = delete;
  QqwingProcess& operator=(const QqwingProcess&) = delete;

  enum class Read { Line, End, Stopped };
  // The next line without its end; End at the end of the output, Stopped as soon as `stop` says so.
  Read next_line(std::string& line, const std::function<bool()>& stop) {
    for (;;) {
      if (const size_t eol = buffer_.find('\n'); eol != std::string::npos) {
        line = buffer_.substr(0, eol);
        buffer_.erase(0, eol + 1);
        while (!line.empty() && line.back() == '\r') line.pop_back();
        return Read::Line;
      }
      if (stop && stop()) return Read::Stopped;
      if (eof_) {
        if (buffer_.empty()) return Read::End;
        line.swap(buffer_);
        buffer_.clear();
        return Read::Line;
      }
      pollfd p{fd_, POLLIN, 0};
      const int ready = poll(&p, 1, 100);  // wakes to look at `stop` even while qqwing is silent
      if (ready < 0 && errno != EINTR)
        throw Error(std::string("reading qqwing's output: ") + std::strerror(errno));
      if (ready <= 0) continue;
      char chunk[4096];
      const ssize_t got = read(fd_, chunk, sizeof chunk);
      if (got < 0 && errno != EINTR)
        throw Error(std::string("reading qqwing's output: ") + std::strerror(errno));
      if (got == 0) eof_ = true;
      if (got > 0) buffer_.append(chunk, size_t(got));
    }
  }

  // Waits for qqwing to exit; its wait status.
  int wait() {
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string buffer_;
  bool eof_ = false;
};

int64_t generate_with_canvas(const SudokuGenerateOptions& o, std::set<std::string>& exclude,
                             const std::function<void(const SudokuExample&)>& emit,
                             const std::function<bool()>& stop) {
  check(o.min_clues >= 17 && o.min_clues <= 80, "--min-clues must be in 17..80");
  Rng rng(o.seed);
  int64_t written = 0;
  while (written < o.count && !(stop && stop())) {
    SudokuExample e;
    e.solution = random_solution(rng);
    e.puzzle = make_puzzle(e.solution, o.min_clues, rng);
    if (exclude.count(format_sudoku(e.puzzle))) continue;
    e.difficulty = "generated";
    emit(e);
    ++written;
  }
  return written;
}

int64_t generate_with_qqwing(const SudokuGenerateOptions& o, std::set<std::string>& exclude,
                             const std::function<void(const SudokuExample&)>& emit,
                             const std::function<bool()>& stop) {
  static const std::set<std::string> kDifficulties{"simple", "easy", "intermediate", "expert", "any"};
  check(kDifficulties.count(o.difficulty) > 0,
        "--difficulty must be simple, easy, intermediate, expert or any");
  int64_t written = 0;
  while (written < o.count) {
    QqwingProcess qqwing(std::min<int64_t>(o.count - written, 500), o.difficulty);
    // With --stats qqwing prints puzzle, solution and a block of statistics including "Difficulty: X".
    std::string line, puzzle, solution, rating = o.difficulty;
    bool any = false;
    for (QqwingProcess::Read r; (r = qqwing.next_line(line, stop)) != QqwingProcess::Read::End;) {
      if (r == QqwingProcess::Read::Stopped) return written;  // the destructor ends qqwing
      any = true;
      if (line.size() == 81 && line.find_first_not_of(".0123456789") == std::string::npos) {
        (puzzle.empty() ? puzzle : solution) = line;
      } else if (line.rfind("Difficulty: ", 0) == 0) {
        rating = line.substr(12);
        std::transform(rating.begin(), rating.end(), rating.begin(), ::tolower);
        if (!puzzle.empty() && !solution.empty()) {
          SudokuExample e{parse_sudoku(puzzle), parse_sudoku(solution), rating};
          const std::string key = format_sudoku(e.puzzle);
          if (!exclude.count(key) && written < o.count && solves(e.puzzle, e.solution)) {
            emit(e);
            exclude.insert(key);
            ++written;
          }
          puzzle.clear();
          solution.clear();
        }
      }
    }
    const int status = qqwing.wait();
    if (stop && stop()) return written;  // e.g. Ctrl-C reached qqwing too
    check(WIFEXITED(status) && WEXITSTATUS(status) == 0 && any,
          "qqwing failed (is Debian's qqwing package installed?)");
  }
  return written;
}

}  // namespace

int64_t generate_sudoku(const SudokuGenerateOptions& options,
                        const std::function<void(const SudokuExample&)>& emit,
                        const std::function<bool()>& stop) {
  check(options.count > 0, "-n must be positive");
  std::set<std::string> exclude = options.exclude;
  if (options.source == "canvas") return generate_with_canvas(options, exclude, emit, stop);
  check(options.source == "qqwing", "--source must be qqwing or canvas");
  return generate_with_qqwing(options, exclude, emit, stop);
}

std::set<std::string> read_sudoku_puzzle_set(const std::string& path) {
  std::set<std::string> out;
  for (const SudokuExample& e : read_sudoku_file(path)) out.insert(format_sudoku(e.puzzle));
  return out;
}

}  // namespace canvas
