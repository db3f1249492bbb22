// canvas serve's HTTP front: the OpenAI endpoints, /health, the web page, API keys, body limits,
// 503 with Retry-After on a full queue, SSE streaming and graceful shutdown (cpp-httplib).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "serve/engine.h"

namespace httplib {
class Server;
}

namespace canvas::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;            // non-empty: /v1/* needs "Authorization: Bearer KEY"
  std::string model_name = "canvas";
  size_t body_limit = 1 << 20;    // bytes of a request body
  int http_threads = 0;           // 0: parallel + queue + 8 (every waiting request holds a connection)
};

class HttpServer {
 public:
  explicit HttpServer(ServerOptions options);
  ~HttpServer();

  // Binds the port (false with a message in `error` when it cannot); the server answers /health with
  // "loading" until set_engine is called.
  bool bind(std::string& error);
  int port() const { return port_; }
  void set_engine(Engine* engine);
  // Serves until stop(); call from one thread.
  void serve();
  // Stops taking requests (new ones get 503), lets in-flight ones finish for up to grace_ms, cancels
  // the rest, then stops the listener (serve() returns).
  void stop(int64_t grace_ms);

 private:
  struct Tracked;
  void routes();
  std::shared_ptr<Job> start_job(const struct ApiRequest& request, int64_t& prompt_tokens);

  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  std::atomic<Engine*> engine_{nullptr};
  std::atomic<bool> draining_{false};
  int port_ = 0;
  std::mutex jobs_mutex_;
  std::set<std::shared_ptr<Job>> jobs_;  // in flight, for shutdown
};

// The web page served at "/" (built in: no CDN, no build step).
const char* web_page_html();

}  // namespace canvas::serve
