// canvas serve's HTTP/1.1 connections: one event loop accepts them and reads every request whole under
// deadlines (idle, head, body), frames it (Content-Length or chunked; gzip / deflate bodies decompressed
// under the same limit), hands it to the server's handler on the loop itself, and writes the answer: at once,
// or, for a late answer (a generation), as its Wakeup says more is ready, chunk by chunk for a stream.
// Pipelined requests are answered in order; the number of connections is bounded. No connection holds a
// thread: slow or idle clients cost a socket, and a request waiting for its generation costs nothing.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "serve/http_message.h"

namespace canvas::serve {

// The limits and deadlines of docs/serving.md ("Connections").
struct ConnectionLimits {
  size_t max_connections = 1024;     // at the limit a new connection replaces the one waiting longest
  size_t head_limit = 16 << 10;      // request line + headers (431 beyond; 414 for a target over 8 KiB)
  size_t body_limit = 1 << 20;       // a body as sent and once decompressed (413 beyond)
  int64_t idle_timeout_ms = 5000;    // open with no byte of a request (new or kept alive): closed
  int64_t head_timeout_ms = 5000;    // the head must be complete this long after its first byte (408)
  int64_t body_timeout_ms = 15000;   // the body must be complete this long after the head (408)
  int64_t write_timeout_ms = 10000;  // a response that makes no progress this long: the connection closes
  size_t requests_per_connection = 1000;
};

// One request, framed: the body de-chunked and decompressed; method, target and version as sent.
struct FramedRequest {
  std::string method, target, version;
  std::vector<std::pair<std::string, std::string>> headers;  // without the framing headers
  std::string content_encoding;  // "", "gzip" or "deflate" (the body is still encoded)
  std::string body;
  bool keep_alive = true;  // by version and the Connection header

  // The request in one canonical form (what the framing tests and the fuzzer compare): the head with an
  // exact Content-Length and none of Transfer-Encoding, Content-Encoding and Expect, then the body.
  std::string text() const;
};

// An HTTP error for the client: status, and a message for the JSON body.
struct HttpFailure {
  int status = 0;
  std::string message;
};

// Reads requests out of a connection's bytes one at a time, incrementally (no byte is parsed twice).
class RequestReader {
 public:
  enum class Status { NeedMore, Ready, Failed };
  explicit RequestReader(const ConnectionLimits& limits) : limits_(limits) {}

  // Consumes from the front of `in` what belongs to the current request; bytes after it stay in `in`.
  Status advance(std::string& in);
  bool started() const { return state_ != State::Start; }  // a byte of the request has arrived
  bool in_body() const {
    return state_ == State::Body || state_ == State::ChunkSize || state_ == State::ChunkData ||
           state_ == State::ChunkEnd || state_ == State::Trailers;
  }
  // The head asked for "Expect: 100-continue" and the body has not begun (the caller answers it once).
  bool wants_continue() const { return expect_continue_ && in_body(); }
  const HttpFailure& failure() const { return failure_; }
  const std::string& method() const { return request_.method; }  // once the head is read
  // After Ready: the request; the reader starts over.
  FramedRequest take();

 private:
  enum class State { Start, Head, Body, ChunkSize, ChunkData, ChunkEnd, Trailers, Ready, Failed };
  Status fail(int status, std::string message);
  Status parse_head(const std::string& head);

  const ConnectionLimits& limits_;
  State state_ = State::Start;
  size_t scanned_ = 0;      // bytes of `in` already searched for the end of the head / a line
  uint64_t remaining_ = 0;  // of the body or the current chunk
  size_t trailer_bytes_ = 0;
  bool expect_continue_ = false;
  FramedRequest request_;
  HttpFailure failure_;
};

// Decompresses a gzip / deflate body in place, stopping as soon as it would exceed `limit` bytes
// (413) or is not valid (400). An empty encoding leaves the body as it is.
bool decode_body(FramedRequest& request, size_t limit, HttpFailure& failure);

// A complete response as bytes: status line, Content-Type application/json, Content-Length, `headers`,
// "Connection: close" when close, and the body.
std::string http_response(int status, const std::string& body, bool close,
                          const std::vector<std::pair<std::string, std::string>>& headers = {});
const char* http_reason(int status);

// Answers a request on the event loop: fills the response, or sets response.late. It must not wait.
using RequestHandler = std::function<void(const Request&, Response&)>;
// Runs on every response before its head is written (a late answer's once it is known): metrics, CORS.
using ResponseFinisher = std::function<void(const Request&, Response&)>;

class HttpConnections {
 public:
  HttpConnections(ConnectionLimits limits, RequestHandler handler, ResponseFinisher finish);
  ~HttpConnections();
  HttpConnections(const HttpConnections&) = delete;
  HttpConnections& operator=(const HttpConnections&) = delete;

  // Listens on host:port (port 0: any free one); false with a message in `error` when it cannot.
  // max_connections is cut to what the process's file limit leaves (the soft limit is raised to the
  // hard one first).
  bool bind(const std::string& host, int port, std::string& error);
  int port() const { return port_; }
  const ConnectionLimits& limits() const { return limits_; }

  // The event loop; returns once close() has closed every connection.
  void run();
  // From now on every response closes its connection, and idle connections are closed.
  void drain();
  bool draining() const { return draining_; }
  // Closes the listener and every connection; late answers still awaited are abandoned. Returns at once
  // (run() does the work).
  void close();

  size_t open_connections() const { return open_.load(); }  // for /health and the tests
  // Connections whose late answer has not ended yet.
  size_t busy_connections() const { return busy_.load(); }

 private:
  friend class Wakeup;
  void accept_all();
  void on_readable(Connection& c);
  void on_writable(Connection& c);
  void advance(Connection& c);   // frames what is buffered: answers, fails, or waits for bytes
  void dispatch(Connection& c);  // a complete request: the handler, then the answer or its late answer
  void take_late(Connection& c);
  void pump(Connection& c);      // asks the late answer for what is ready and queues its bytes
  void end_late(Connection& c);  // the late answer is done (or abandoned): the connection lets go of it
  bool flush(Connection& c);     // sends what is queued; true when the connection reads its next request now
  void enqueue(const std::shared_ptr<Wakeup>& wakeup);  // any thread: a late answer has more
  void take_ready();                                    // the late answers notified since the last round
  void check_deadlines();
  bool evict_one();  // closes the connection waiting longest that is not being answered
  void close_connection(Connection& c);
  void watch(Connection& c, uint32_t events);
  void wake();

  ConnectionLimits limits_;
  RequestHandler handler_;
  ResponseFinisher finish_;
  int listen_fd_ = -1, epoll_fd_ = -1, wake_fd_ = -1;
  int port_ = 0;
  std::unordered_map<int, std::unique_ptr<Connection>> connections_;  // by socket; event loop only
  std::vector<std::unique_ptr<Connection>> graveyard_;  // closed this round (an event may still name one)
  std::mutex ready_mutex_;
  std::vector<std::shared_ptr<Wakeup>> ready_;
  std::atomic<bool> draining_{false}, closing_{false};
  bool drained_ = false;  // the event loop has closed the idle connections
  int64_t accept_paused_until_ = 0;
  uint64_t next_wait_order_ = 0;  // Connection::wait_order of the next wait to begin
  int64_t next_deadline_check_ = 0;
  std::atomic<size_t> open_{0}, busy_{0};
};

}  // namespace canvas::serve
