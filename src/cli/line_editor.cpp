// LineEditor: raw-mode key handling and redraw for the chat prompt.
#include "cli/line_editor.h"

#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <iostream>

namespace canvas::cli {

namespace {

// The terminal in raw mode (no echo, no line buffering, Ctrl-C and Ctrl-D as bytes) for the object's
// lifetime; output processing stays on, so "\n" still starts a line.
class RawMode {
 public:
  explicit RawMode(int fd) : fd_(fd) {
    ok_ = tcgetattr(fd_, &saved_) == 0;
    if (!ok_) return;
    termios raw = saved_;
    raw.c_lflag &= ~tcflag_t(ECHO | ICANON | ISIG | IEXTEN);
    raw.c_iflag &= ~tcflag_t(IXON | ICRNL | INLCR | ISTRIP);
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    // TCSANOW, not TCSAFLUSH: keys typed while a reply was being written are kept, not thrown away.
    ok_ = tcsetattr(fd_, TCSANOW, &raw) == 0;
  }
  ~RawMode() {
    if (ok_) tcsetattr(fd_, TCSANOW, &saved_);
  }
  bool ok() const { return ok_; }

 private:
  int fd_;
  bool ok_ = false;
  termios saved_{};
};

bool continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// Byte offset of the code point before / after `at`.
size_t previous_point(const std::string& s, size_t at) {
  if (at == 0) return 0;
  --at;
  while (at > 0 && continuation_byte(s[at])) --at;
  return at;
}
size_t next_point(const std::string& s, size_t at) {
  if (at >= s.size()) return s.size();
  ++at;
  while (at < s.size() && continuation_byte(s[at])) ++at;
  return at;
}
size_t points(const std::string& s, size_t from, size_t to) {
  size_t n = 0;
  for (size_t i = from; i < to; ++i) n += !continuation_byte(s[i]);
  return n;
}

void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += size_t(n);
  }
}

// One byte from fd; false at the end of input or on an error.
bool read_byte(int fd, char& c) {
  while (true) {
    const ssize_t n = ::read(fd, &c, 1);
    if (n == 1) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

}  // namespace

LineEditor::LineEditor(int in_fd, int out_fd)
    : in_(in_fd), out_(out_fd), interactive_(isatty(in_fd) && isatty(out_fd)) {}

void LineEditor::add_history(const std::string& line) {
  if (line.empty() || (!history_.empty() && history_.back() == line)) return;
  history_.push_back(line);
}

bool LineEditor::read(const std::string& prompt, std::string& line) {
  line.clear();
  if (interactive_) {
    RawMode raw(in_);
    if (raw.ok()) return read_raw(prompt, line);
  }
  if (isatty(in_)) write_all(out_, prompt);  // a terminal whose output goes elsewhere still gets the prompt
  if (!std::getline(std::cin, line)) return false;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return true;
}

void LineEditor::redraw(const std::string& prompt, const std::string& line, size_t cursor) const {
  std::string frame = "\r" + prompt + line + "\x1b[K";
  const size_t after = points(line, cursor, line.size());
  if (after > 0) frame += "\x1b[" + std::to_string(after) + "D";
  write_all(out_, frame);
}

bool LineEditor::read_raw(const std::string& prompt, std::string& line) {
  size_t cursor = 0;                   // byte offset in line
  size_t recalled = history_.size();   // history entry shown (size: the line being typed)
  std::string typed;                   // the line being typed, kept while history is browsed
  int pending = 0;                     // bytes still to come of a multi-byte character
  redraw(prompt, line, cursor);
  auto show = [&](const std::string& text) {
    line = text;
    cursor = line.size();
    redraw(prompt, line, cursor);
  };
  char c;
  while (read_byte(in_, c)) {
    switch (c) {
      case '\r':
      case '\n':
        write_all(out_, "\r\n");
        return true;
      case 3:  // Ctrl-C: drop the line, a fresh prompt
        write_all(out_, "^C\r\n");
        typed.clear();
        recalled = history_.size();
        show("");
        continue;
      case 4:  // Ctrl-D: end of input on an empty line, else delete under the cursor
        if (line.empty()) {
          write_all(out_, "\r\n");
          return false;
        }
        line.erase(cursor, next_point(line, cursor) - cursor);
        break;
      case 127:
      case 8: {  // Backspace
        const size_t from = previous_point(line, cursor);
        line.erase(from, cursor - from);
        cursor = from;
        break;
      }
      case 1: cursor = 0; break;                                // Ctrl-A
      case 5: cursor = line.size(); break;                      // Ctrl-E
      case 2: cursor = previous_point(line, cursor); break;     // Ctrl-B
      case 6: cursor = next_point(line, cursor); break;         // Ctrl-F
      case 11: line.erase(cursor); break;                       // Ctrl-K
      case 21: line.erase(0, cursor); cursor = 0; break;        // Ctrl-U
      case 12: write_all(out_, "\x1b[H\x1b[2J"); break;         // Ctrl-L
      case 23: {                                                // Ctrl-W: the word before the cursor
        size_t from = cursor;
        while (from > 0 && line[from - 1] == ' ') --from;
        while (from > 0 && line[from - 1] != ' ') --from;
        line.erase(from, cursor - from);
        cursor = from;
        break;
      }
      case 27: {  // an escape sequence: ESC [ X, ESC [ n ~, ESC O X
        char a, b;
        if (!read_byte(in_, a) || !read_byte(in_, b)) return false;
        if (a != '[' && a != 'O') break;
        char key = b;
        if (b >= '0' && b <= '9') {  // ESC [ n ~
          char tilde;
          if (!read_byte(in_, tilde)) return false;
          key = tilde == '~' ? b : 0;
        }
        switch (key) {
          case 'A':  // Up: older history
          case 'B':  // Down: newer, then the line being typed
            if (key == 'A' && recalled > 0) {
              if (recalled == history_.size()) typed = line;
              show(history_[--recalled]);
            } else if (key == 'B' && recalled < history_.size()) {
              ++recalled;
              show(recalled == history_.size() ? typed : history_[recalled]);
            }
            continue;
          case 'C': cursor = next_point(line, cursor); break;
          case 'D': cursor = previous_point(line, cursor); break;
          case 'H': case '1': case '7': cursor = 0; break;
          case 'F': case '4': case '8': cursor = line.size(); break;
          case '3': line.erase(cursor, next_point(line, cursor) - cursor); break;  // Delete
          default: break;
        }
        break;
      }
      default: {
        const unsigned char u = static_cast<unsigned char>(c);
        if (u < 32) break;  // other control keys: ignored
        line.insert(cursor, 1, c);
        ++cursor;
        // A multi-byte character is drawn once its last byte has arrived.
        if (u >= 0xC0) pending = u >= 0xF0 ? 3 : u >= 0xE0 ? 2 : 1;
        else if (continuation_byte(c) && pending > 0) --pending;
        if (pending > 0) continue;
        break;
      }
    }
    redraw(prompt, line, cursor);
  }
  write_all(out_, "\r\n");
  return !line.empty();  // input ended: a line typed so far still counts
}

}  // namespace canvas::cli
