// A `canvas serve` child process for tests: started on a free port of 127.0.0.1, ready once /health says ok.
#pragma once
// Debian's libcpp-httplib is built with OpenSSL support, which adds members to httplib::Client and
// httplib::Request: code that makes a Client must declare them too, or the library's constructor writes
// past the object (a smashed stack). Tests include httplib.h through this header.
#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_OPENSSL_SUPPORT
#endif
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>

#include "test_util.h"

namespace canvas::test {

// A `canvas serve` child process; killed (SIGKILL) on destruction unless it already exited. `model` is a
// path under the source tree given as -m; "" gives no -m (the server's default models).
class ServerProcess {
 public:
  // `shell` runs before the server in its shell (a limit: "ulimit -v 4194304;").
  explicit ServerProcess(const std::string& extra_args, const std::string& model = "models/text-masked.gguf",
                         const std::string& shell = "") {
    log_ = std::filesystem::temp_directory_path() / ("canvas-serve-" + std::to_string(getpid()) + "-" +
                                                     std::to_string(counter_++) + ".log");
    const std::string cmd = shell + "exec " + std::string(CANVAS_BINARY) + " serve" +
                            (model.empty() ? "" : " -m " + canvas::test::source_path(model)) + " --port 0 " +
                            extra_args + " 2>" + log_.string();
    pid_ = fork();
    if (pid_ == 0) {
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    // The port is printed at start; ready when /health says ok.
    const std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)/");
    for (int i = 0; i < 600 && port_ == 0; ++i) {
      std::smatch m;
      const std::string text = canvas::test::read_text(log_.string());
      if (std::regex_search(text, m, listening)) port_ = std::stoi(m[1]);
      else std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    for (int i = 0; i < 600 && port_ != 0; ++i) {
      auto res = client().Get("/health");
      if (res && res->status == 200) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~ServerProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::filesystem::remove(log_);
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }
  // Sends SIGTERM and waits (up to 30 s) for the exit status; -1 if it did not exit.
  int terminate() {
    kill(pid_, SIGTERM);
    for (int i = 0; i < 600; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }
  std::string log() const { return canvas::test::read_text(log_.string()); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path log_;
  pid_t pid_ = -1;
  int port_ = 0;
  bool exited_ = false;
};

// POST of a JSON body to the server.
inline httplib::Result post(const ServerProcess& s, const std::string& path, const std::string& body,
                            const httplib::Headers& headers = {}) {
  return s.client().Post(path.c_str(), headers, body, "application/json");
}

// The JSON answer of a POST that must succeed (a test failure otherwise).
inline nlohmann::json post_json(const ServerProcess& s, const std::string& path, const std::string& body) {
  auto res = post(s, path, body);
  EXPECT_TRUE(res);
  if (!res) return nlohmann::json();
  EXPECT_EQ(res->status, 200) << res->body;
  return nlohmann::json::parse(res->body);
}

// The data: payloads of an SSE body.
inline std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> events;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    events.push_back(body.substr(at + 6, end - at - 6));
    at = end;
  }
  return events;
}

}  // namespace canvas::test
