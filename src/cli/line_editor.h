// A small line editor for the chat REPL on a terminal: the cursor keys, Home/End, Backspace/Delete,
// history (Up/Down), Ctrl-A/E/B/F (start, end, back, forward), Ctrl-K/U/W (kill to the end, to the start,
// the word before), Ctrl-L (redraw), Ctrl-C (drops the line being typed), Ctrl-D (end of input on an empty
// line, else delete). The cursor moves by UTF-8 code points. When input or output is not a terminal, a
// plain getline.
#pragma once
#include <string>
#include <vector>

namespace canvas::cli {

class LineEditor {
 public:
  // Keys are read from in_fd; the prompt and the line are drawn on out_fd.
  LineEditor(int in_fd, int out_fd);
  // Reads one line after showing `prompt`; false at the end of input.
  bool read(const std::string& prompt, std::string& line);
  // Up/Down recall these, newest last (an entry equal to the newest is not added twice).
  void add_history(const std::string& line);
  bool interactive() const { return interactive_; }

 private:
  bool read_raw(const std::string& prompt, std::string& line);
  void redraw(const std::string& prompt, const std::string& line, size_t cursor) const;

  int in_, out_;
  bool interactive_;
  std::vector<std::string> history_;
};

}  // namespace canvas::cli
