// The chat REPL's line editor, driven through a real terminal (a pseudo-terminal): cursor keys, End,
// history recall with Up, Ctrl-C dropping a half-typed line and Ctrl-D ending the chat; the lines the
// model got are read back with /save.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "test_util.h"

namespace canvas {
namespace {

class Terminal {
 public:
  // Runs argv on the slave side of a new pseudo-terminal as its stdin, stdout and stderr.
  explicit Terminal(const std::vector<std::string>& argv) {
    master_ = posix_openpt(O_RDWR | O_NOCTTY);
    if (master_ < 0 || grantpt(master_) != 0 || unlockpt(master_) != 0) return;
    const std::string slave = ptsname(master_);
    pid_ = fork();
    if (pid_ == 0) {
      setsid();
      const int fd = open(slave.c_str(), O_RDWR);
      dup2(fd, 0);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~Terminal() {
    if (pid_ > 0 && !waited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (master_ >= 0) close(master_);
  }
  bool ok() const { return master_ >= 0 && pid_ > 0; }
  void type(const std::string& keys) { ASSERT_EQ(write(master_, keys.data(), keys.size()), ssize_t(keys.size())); }
  // Reads until `what` appears after `from` (or 60 s pass); true when it did.
  bool wait_for(const std::string& what, size_t from = 0, int seconds = 60) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (screen_.find(what, from) == std::string::npos) {
      if (std::chrono::steady_clock::now() > end) return false;
      pollfd p{master_, POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      char buf[4096];
      const ssize_t n = read(master_, buf, sizeof buf);
      if (n <= 0) return false;
      screen_.append(buf, size_t(n));
    }
    return true;
  }
  int exit_code() {
    int status = 0;
    for (int i = 0; i < 600; ++i) {  // up to 60 s, draining output so the child never blocks
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        waited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (!wait_for("\x01never", screen_.size(), 0)) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return -1;
  }
  const std::string& screen() const { return screen_; }

 private:
  int master_ = -1;
  pid_t pid_ = -1;
  bool waited_ = false;
  std::string screen_;
};

TEST(CliChat, LineEditingAndHistoryOnATerminal) {
  test::TempDir dir;
  const std::string saved = dir.path("conversation.json");
  Terminal t({CANVAS_BINARY, "chat", "-m", test::source_path("models/text-dg-chat.gguf"), "--mode", "ar", "-n", "2",
              "-t", "1", "-s", "1"});
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(t.wait_for("> ")) << t.screen();
  // "abc", Left Left, "X", End, "Z", Enter: the model gets "aXbcZ".
  t.type("abc\x1b[D\x1b[DX\x1b[FZ\r");
  size_t at = t.screen().size();
  ASSERT_TRUE(t.wait_for("[ar: ", at)) << t.screen();
  ASSERT_TRUE(t.wait_for("> ", t.screen().find("[ar: ", at))) << t.screen();
  // Up recalls "aXbcZ"; Backspace, "!" and Enter send "aXbc!".
  t.type("\x1b[A\x7f!\r");
  at = t.screen().size();
  ASSERT_TRUE(t.wait_for("[ar: ", at)) << t.screen();
  ASSERT_TRUE(t.wait_for("> ", t.screen().find("[ar: ", at))) << t.screen();
  // A half-typed line dropped by Ctrl-C, then /save, then Ctrl-D on an empty line ends the chat.
  t.type("never sent\x03/save " + saved + "\r");
  ASSERT_TRUE(t.wait_for("[saved 4 messages")) << t.screen();
  ASSERT_TRUE(t.wait_for("> ", t.screen().find("[saved 4 messages"))) << t.screen();
  t.type("\x04");
  EXPECT_EQ(t.exit_code(), 0) << t.screen();
  const nlohmann::json messages = nlohmann::json::parse(test::read_text(saved));
  ASSERT_EQ(messages.size(), 4u) << messages;
  EXPECT_EQ(messages[0]["content"], "aXbcZ");
  EXPECT_EQ(messages[2]["content"], "aXbc!");
  EXPECT_EQ(t.screen().find("^[["), std::string::npos) << "escape sequences typed as text";
}

// Ctrl-C during a long diffusion reply ends that reply: the chat keeps only final text, the stats count the
// passes that ran, and /save works afterwards (the conversation stays valid UTF-8).
TEST(CliChat, CtrlCKeepsFinalTextAndSaveStillWorks) {
  test::TempDir dir;
  const std::string saved = dir.path("conversation.json");
  // --ignore-eos: the reply runs its 400 tokens (several canvases, seconds), so Ctrl-C finds it running.
  Terminal t({CANVAS_BINARY, "chat", "-m", test::source_path("models/text-dg-chat.gguf"), "--mode", "diffusion", "-n",
              "400", "--ignore-eos", "-s", "3", "-t", "1"});
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(t.wait_for("> ")) << t.screen();
  t.type("Tell me about Joseph.\r");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  t.type("\x03");
  ASSERT_TRUE(t.wait_for("[interrupted]")) << t.screen();
  const size_t stats = t.screen().find("[interrupted]");
  EXPECT_EQ(t.screen().find(" 0 passes", stats), std::string::npos) << t.screen();
  ASSERT_TRUE(t.wait_for("> ", stats)) << t.screen();
  t.type("/save " + saved + "\r");
  ASSERT_TRUE(t.wait_for("[saved 2 messages")) << t.screen();
  ASSERT_TRUE(t.wait_for("> ", t.screen().find("[saved 2 messages"))) << t.screen();
  t.type("\x04");
  EXPECT_EQ(t.exit_code(), 0) << t.screen();
  const nlohmann::json messages = nlohmann::json::parse(test::read_text(saved));
  ASSERT_EQ(messages.size(), 2u) << messages;
  EXPECT_EQ(messages[1]["role"], "assistant");
  EXPECT_TRUE(messages[1]["content"].is_string()) << messages;
}

}  // namespace
}  // namespace canvas
