// canvas serve's HTTP messages: the request a handler reads (method, path, query, headers, body, peer), the
// response it fills (status, headers, body) or leaves to a LateAnswer that the event loop asks for more each
// time the answer's Wakeup is notified, and the router from a path to its handler and methods.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace canvas::serve {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method;
  std::string path;                                        // percent-decoded, without the query
  std::vector<std::pair<std::string, std::string>> query;  // decoded ('+' is a space)
  HeaderList headers;  // as sent, without the framing headers (Content-Length, Transfer-Encoding, ...)
  std::string body;    // de-chunked and decompressed
  std::string peer_ip;
  int peer_port = 0;

  // The first header of this name (case-insensitive); "" when there is none.
  const std::string& header(std::string_view name) const;
  bool has_header(std::string_view name) const;
  // The first query parameter of this name; "" when there is none.
  const std::string& param(std::string_view name) const;
};

// A request target split into its decoded path and query parameters.
void parse_target(const std::string& target, std::string& path,
                  std::vector<std::pair<std::string, std::string>>& query);
// A Host header's value or a URI's authority ("host", "host:port", "[v6]:port") split into its host name
// (lower case, an IPv6 address without its brackets) and port (0 when none is given). False when it is not
// that shape: no user info, a host of URI characters only, and a port of digits in 1..65535 with nothing
// after it ("localhost:abc" and "127.0.0.1:1@evil.com" are not authorities).
bool parse_authority(std::string_view authority, std::string& host, int& port);
// An absolute-form request target (RFC 9112 3.2.2: "http://HOST:PORT/path?query") split into its authority
// and the origin-form target ("/path?query"; "/" when the path is empty). False for any other target.
bool split_absolute_target(std::string_view target, std::string& authority, std::string& origin_form);
// %XX escapes decoded (and '+' as a space when plus_is_space); a malformed escape stays as it is.
std::string percent_decode(std::string_view text, bool plus_is_space);

class LateAnswer;

struct Response {
  int status = 200;
  HeaderList headers;
  std::string content_type;
  std::string body;
  // A late answer's body follows in pieces (sent chunked, in the order its pump produces them).
  bool stream = false;
  // Set by a handler whose answer is not known when it returns (a generation, work on another thread).
  std::shared_ptr<LateAnswer> late;

  void set_header(std::string name, std::string value) {
    headers.emplace_back(std::move(name), std::move(value));
  }
  void set_content(std::string content, std::string type) {
    body = std::move(content);
    content_type = std::move(type);
  }
};

class HttpConnections;
struct Connection;

// How a late answer tells its connection that there is more to write: notify() may be called from any
// thread any number of times; the calls before the event loop has looked count once, and calls after the
// connection has ended do nothing.
class Wakeup : public std::enable_shared_from_this<Wakeup> {
 public:
  void notify();

 private:
  friend class HttpConnections;
  std::mutex mutex_;
  HttpConnections* loop_ = nullptr;   // while a connection waits for the answer
  bool queued_ = false;               // in the loop's list of answers to ask, not yet asked
  Connection* connection_ = nullptr;  // the event loop's own (read and written only there)
};

// An answer that arrives after its handler returned. The event loop asks it for what is ready when the
// connection takes it over and after each notification of `wakeup`; nothing holds a thread while it waits.
class LateAnswer {
 public:
  enum class Progress { Waiting, Done };
  virtual ~LateAnswer() = default;
  // On the event loop: once the answer is known, sets `response` (a status other than 0, headers, content
  // type, and the whole body unless `stream`); a stream appends its next bytes to `chunk`. Done: nothing more
  // follows (a response that does not stream is done when its status is set).
  virtual Progress pump(Response& response, std::string& chunk) = 0;
  // The connection ended before Done (the client went away, a write failed, the server closed it).
  virtual void abandon() {}

  const std::shared_ptr<Wakeup> wakeup = std::make_shared<Wakeup>();
};

// Paths to handlers and the methods each path takes. GET routes answer HEAD too; every route answers
// OPTIONS with its Allow list (the server's gate does, before handlers run).
class Router {
 public:
  using Handler = std::function<void(const Request&, Response&)>;
  struct Route {
    Handler handler;
    std::string allow;  // "GET, HEAD, OPTIONS" or "POST, OPTIONS": the Allow header of 405 and OPTIONS
    bool takes(const std::string& method) const;
  };
  void get(const std::string& path, Handler handler);
  void post(const std::string& path, Handler handler);
  const Route* find(const std::string& path) const;  // null: no such path (404)

 private:
  std::map<std::string, Route> routes_;
};

// gzip: whether the client's Accept-Encoding takes it, whether a content type is worth compressing (text
// and JSON, not event streams), and the compressed bytes.
bool accepts_gzip(const Request& request);
bool compressible(const std::string& content_type);
std::string gzip_compress(const std::string& data);

}  // namespace canvas::serve
