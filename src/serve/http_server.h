// canvas serve's HTTP front: the OpenAI endpoints, /health, the web page, API keys, body limits,
// 503 with Retry-After on a full queue, SSE streaming and graceful shutdown. Connections, deadlines and
// framing are serve/http_connections.h; the handlers here run on its event loop, and a completion is handed
// to its model's engine once, its answer written as the engine's events arrive.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/worker_threads.h"
#include "serve/engine.h"
#include "serve/http_connections.h"
#include "serve/http_message.h"
#include "serve/metrics.h"
#include "serve/openai.h"
#include "serve/served_models.h"

namespace canvas::serve {

// Whether a host name or address is this machine's own: localhost, ::1, 127.x.x.x.
bool is_loopback_name(const std::string& host);

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;            // non-empty: the API endpoints need "Authorization: Bearer KEY"
  size_t body_limit = 1 << 20;    // bytes of a request body, as sent and decompressed
  int http_threads = 0;           // most threads answering /tokenize and /detokenize off the event loop; 0: 4
  size_t max_connections = 1024;  // open connections (cut to the process's file limit)
  // Host header names accepted beside the bound address ("*": any). The Host check is on when there is no
  // API key, or when this list is given.
  std::vector<std::string> allowed_hosts;
  // Origins whose browser pages may call the server (CORS; "*": any). Other cross-origin requests: 403.
  std::vector<std::string> cors_origins;
};

class HttpServer {
 public:
  explicit HttpServer(ServerOptions options);
  ~HttpServer();

  // Binds the port (false with a message in `error` when it cannot); the server answers /health with
  // "loading" until set_models is called.
  bool bind(std::string& error);
  int port() const { return port_; }
  size_t max_connections() const;
  // The models, loaded (at least one; the first is the default of completions): call once. Their engines
  // must outlive the server's answers (stop() first).
  void set_models(std::vector<ServedModel> models);
  // Serves until stop(); call from one thread.
  void serve();
  // Shutdown: at once, new requests get 503 + Retry-After, queued ones (never started) get 503 +
  // Retry-After, idle connections close and every answer closes its connection; running requests may
  // finish until finish_ms after the call, then they are cancelled (finish_reason "cancelled"); at
  // close_ms every connection is closed and serve() returns.
  void stop(int64_t finish_ms, int64_t close_ms);

 private:
  // Registers the endpoints below, one handler per path.
  void routes();
  void health(const Request& req, Response& res);
  void models(const Request& req, Response& res);
  void props(const Request& req, Response& res);
  void page(const Request& req, Response& res);  // the web page at "/"
  void tokenize(const Request& req, Response& res);
  void detokenize(const Request& req, Response& res);
  void infill(const Request& req, Response& res);
  void metrics(const Request& req, Response& res);  // Prometheus text
  // /v1/completions, /v1/chat/completions and /v1/responses: checks, hands the request to its engine,
  // answers late (streamed or not).
  void complete(const Request& req, Response& res, Endpoint endpoint);
  // /v1/embeddings: a 400 naming the model, which has no embedding head (canvas's models are generative).
  void embeddings(const Request& req, Response& res);
  // Every request on the event loop: the gate, then its route's handler (or a worker, for the handlers
  // that may take long).
  void handle(const Request& req, Response& res);
  // Every response before its head is written: metrics and CORS headers.
  void finish(const Request& req, Response& res);
  // The checks every request passes before its handler (Host, Origin, path and method, key, shutdown);
  // true when they answered it.
  bool gate(const Request& req, Response& res) const;
  bool authorized(const Request& req) const;
  bool host_allowed(const std::string& host) const;
  bool origin_allowed_by_cors(const std::string& origin) const;
  // The served models once set_models was called, else null (the server is loading).
  const std::vector<ServedModel>* served() const { return ready_.load() ? &models_ : nullptr; }
  // Queues a job on its engine (false: the engine's queue is full, or the server is shutting down; then
  // refusal() is the 503 to answer).
  bool submit(Engine& engine, const std::shared_ptr<Job>& job);
  // Encodes a completion's prompt, checks it (ApiError 400) and submits the job (ApiError 503: refusal()).
  void admit(Engine& engine, const std::shared_ptr<Job>& job, Endpoint endpoint);
  ApiError refusal(const Engine& engine) const;
  // Compiles a request's response_format schema on a worker (a pattern's automaton may take up to its work
  // budget), then queues the job; a schema that does not compile, or a full queue, is the job's answer.
  void compile_then_submit(Engine& engine, const std::shared_ptr<Job>& job,
                           std::shared_ptr<const nlohmann::ordered_json> schema);
  // Ends a job that never reached the engine with `why` as its answer (the Finished event wakes it).
  static void refuse(Job& job, std::exception_ptr why);
  void track(const std::shared_ptr<Job>& job);
  void untrack(const std::shared_ptr<Job>& job);

  ServerOptions options_;
  Router router_;
  std::set<std::string> slow_paths_;  // routes whose handlers run on workers_, not on the event loop
  std::unique_ptr<HttpConnections> connections_;
  std::set<std::string> bound_names_;         // Host names that mean this server
  bool check_host_ = false;
  std::vector<ServedModel> models_;  // written once, before ready_
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
  int port_ = 0;
  std::mutex jobs_mutex_;
  std::set<std::shared_ptr<Job>> jobs_;  // submitted and not yet answered, for shutdown
  ServerMetrics metrics_;
  std::unique_ptr<WorkerThreads> workers_;  // last: its destructor runs tasks that use the members above
};

// The web page served at "/" (built in: no CDN, no build step).
const char* web_page_html();

}  // namespace canvas::serve
