// serve::shut_down: the server stops, its thread is joined and the engines are stopped, well before the
// exit deadline (the watchdog does not fire).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "serve/shutdown.h"
#include "test_util.h"

namespace canvas {

TEST(ServeShutdown, StopsTheServerThenTheEnginesWithinTheDeadlines) {
  serve::ServerOptions options;
  options.port = 0;
  serve::HttpServer server(options);
  std::string error;
  ASSERT_TRUE(server.bind(error)) << error;
  std::thread http([&] { server.serve(); });
  bool engines_stopped = false;
  std::string said;
  serve::ShutdownDeadlines deadlines;
  deadlines.finish_ms = 100;
  deadlines.close_ms = 200;
  deadlines.exit_ms = 20000;  // far: reaching it would end the test binary
  const auto t0 = std::chrono::steady_clock::now();
  serve::shut_down(server, http, [&] { engines_stopped = true; }, deadlines,
                   [&](const std::string& line) { said += line; });
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(engines_stopped);
  EXPECT_FALSE(http.joinable());
  EXPECT_TRUE(said.empty()) << said;
  EXPECT_LT(ms, 5000);
}

// Issue 61 F: SIGTERM while serve loads (here: tokenizing a 24 MB --draft-datastore corpus, about two
// seconds of work that do not stop part-way) was held until loading ended, and `ready` was printed first.
// Now the process ends at once, exit 0, saying so, and never prints ready. The signal is sent once the
// server says it is tokenizing, so it lands inside the load however fast or loaded the machine is.
TEST(ServeShutdownCli, SigtermWhileLoadingEndsAtOnceAndNeverSaysReady) {
  test::TempDir dir;
  const std::string corpus = dir.path("corpus.txt"), log = dir.path("serve.log");
  {
    std::ofstream out(corpus);
    for (int i = 0; out.tellp() < (24 << 20); ++i)
      out << "In the beginning " << i << " God created the heaven and the earth; and the earth was without form.\n";
  }
  const std::string cmd = "XDG_CACHE_HOME=" + dir.path("cache") + " exec " + std::string(CANVAS_BINARY) +
                          " serve --port 0 -m " + test::source_path("models/text-ar.gguf") + " --draft-datastore " +
                          corpus + " 2>" + log;
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_GT(pid, 0);
  for (int i = 0; i < 2000 && test::read_text(log).find("tokenizing") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_NE(test::read_text(log).find("tokenizing"), std::string::npos) << test::read_text(log);
  const auto start = std::chrono::steady_clock::now();
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string said = test::read_text(log);
  EXPECT_LT(seconds, 1.5 * test::kTimeScale) << said;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << ": " << said;
  EXPECT_NE(said.find("SIGTERM while loading: stopped"), std::string::npos) << said;
  EXPECT_EQ(said.find("ready"), std::string::npos) << said;
}

}  // namespace canvas
