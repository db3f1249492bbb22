// serve::shut_down: the server stops, its thread is joined and the engines are stopped, well before the
// exit deadline (the watchdog does not fire).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "serve/shutdown.h"

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

}  // namespace canvas
