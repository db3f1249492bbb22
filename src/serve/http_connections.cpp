// HTTP/1.1 connections of canvas serve: the event loop (epoll), request framing, deadlines and limits, and
// the writing of answers (whole, or late and streamed as their Wakeup says more is ready).
#include "serve/http_connections.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/timer.h"
#include "serve/openai.h"

namespace canvas::serve {

namespace {

constexpr size_t kTargetLimit = 8 << 10;     // the request target (414 beyond)
constexpr size_t kMaxHeaders = 100;          // header lines (431 beyond)
constexpr size_t kChunkLineLimit = 1024;     // a chunk-size line with its extensions
constexpr size_t kPendingLimit = 256 << 10;  // response bytes buffered for the event loop to send
constexpr int64_t kLingerMs = 2000;          // reading what a client still sends after an error response

int64_t clock_ms() {
  return int64_t(now_ms());
}

std::string lower(std::string s) {
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

bool is_token_char(char ch) {
  return std::isalnum(static_cast<unsigned char>(ch)) || std::strchr("!#$%&'*+-.^_`|~", ch) != nullptr;
}

bool is_token(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_token_char);
}

std::string trim_whitespace(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return s.substr(b, e - b);
}

// The address and port of a socket's end (peer or local) as text.
void address_of(const sockaddr_storage& addr, std::string& ip, int& port) {
  char text[INET6_ADDRSTRLEN] = "";
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
    port = ntohs(a->sin6_port);
  }
  ip = text;
}

// Sends what the socket takes now; false on a hard error (the peer is gone).
bool send_some(int fd, const char*& data, size_t& size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data += n;
      size -= size_t(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
  }
  return true;
}

std::string error_body(int status, const std::string& message) {
  return error_json(status, message).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

// ---- Framing ----

std::string FramedRequest::text() const {
  std::string out = method + " " + target + " " + version + "\r\n";
  for (const auto& [name, value] : headers) out += name + ": " + value + "\r\n";
  if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE")
    out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  out += "\r\n";
  out += body;
  return out;
}

RequestReader::Status RequestReader::fail(int status, std::string message) {
  state_ = State::Failed;
  failure_ = {status, std::move(message)};
  return Status::Failed;
}

RequestReader::Status RequestReader::parse_head(const std::string& head) {
  std::vector<std::string> lines;
  for (size_t at = 0; at < head.size();) {
    size_t end = head.find('\n', at);
    if (end == std::string::npos) end = head.size();
    std::string line = head.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    at = end + 1;
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.empty()) return fail(400, "empty request");
  const std::string& start = lines[0];
  const size_t sp1 = start.find(' '), sp2 = sp1 == std::string::npos ? sp1 : start.find(' ', sp1 + 1);
  if (sp2 == std::string::npos || start.find(' ', sp2 + 1) != std::string::npos)
    return fail(400, "malformed request line (expected 'METHOD TARGET HTTP/1.1')");
  FramedRequest& r = request_;
  r.method = start.substr(0, sp1);
  r.target = start.substr(sp1 + 1, sp2 - sp1 - 1);
  r.version = start.substr(sp2 + 1);
  if (!is_token(r.method)) return fail(400, "malformed request method");
  if (r.target.size() > kTargetLimit) return fail(414, "the request target is longer than 8 KiB");
  if (r.target.empty() || std::any_of(r.target.begin(), r.target.end(), [](char ch) {
        return static_cast<unsigned char>(ch) <= 0x20 || ch == 0x7f;
      }))
    return fail(400, "malformed request target");
  if (r.version != "HTTP/1.1" && r.version != "HTTP/1.0") {
    const bool http = r.version.size() == 8 && r.version.compare(0, 5, "HTTP/") == 0;
    return fail(http ? 505 : 400, http ? "only HTTP/1.0 and HTTP/1.1 are served" : "malformed HTTP version");
  }
  static const char* const kKnownMethods[] = {"GET",     "HEAD",    "POST",  "PUT",  "DELETE",
                                              "CONNECT", "OPTIONS", "TRACE", "PATCH"};
  if (std::none_of(std::begin(kKnownMethods), std::end(kKnownMethods),
                   [&](const char* m) { return r.method == m; }))
    return fail(501, "method " + r.method + " is not implemented");
  if (lines.size() - 1 > kMaxHeaders) return fail(431, "more than 100 header fields");
  bool chunked = false, has_length = false, has_encoding = false;
  int hosts = 0, transfer_encodings = 0;
  uint64_t length = 0;
  r.keep_alive = r.version == "HTTP/1.1";
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (line.empty() || line[0] == ' ' || line[0] == '\t')
      return fail(400, "obsolete line folding in the headers");
    const size_t colon = line.find(':');
    if (colon == std::string::npos || !is_token(line.substr(0, colon)))
      return fail(400, "malformed header line");
    const std::string name = line.substr(0, colon), key = lower(name);
    const std::string value = trim_whitespace(line.substr(colon + 1));
    if (value.find('\r') != std::string::npos || value.find('\0') != std::string::npos)
      return fail(400, "malformed value of header " + name);
    if (key == "content-length") {
      if (value.empty() || value.size() > 18 || !std::all_of(value.begin(), value.end(), ::isdigit))
        return fail(400, "malformed Content-Length");
      const uint64_t n = std::stoull(value);
      if (has_length && n != length) return fail(400, "conflicting Content-Length headers");
      has_length = true;
      length = n;
    } else if (key == "transfer-encoding") {
      ++transfer_encodings;
      if (lower(value) != "chunked")
        return fail(501,
                    "Transfer-Encoding '" + value + "' is not supported (send Content-Length, or chunked)");
      chunked = true;
    } else if (key == "content-encoding") {
      if (has_encoding) return fail(415, "more than one Content-Encoding");
      has_encoding = true;
      const std::string e = lower(value);
      if (e == "gzip" || e == "x-gzip")
        r.content_encoding = "gzip";
      else if (e == "deflate")
        r.content_encoding = "deflate";
      else if (e != "identity")
        return fail(415, "Content-Encoding '" + value + "' is not supported (gzip, deflate or identity)");
    } else if (key == "expect") {
      if (lower(value) != "100-continue") return fail(417, "only 'Expect: 100-continue' is supported");
      expect_continue_ = true;
    } else {
      if (key == "host") {
        ++hosts;
        // RFC 9112 3.2: a Host that names no host is refused as a missing one is.
        if (trim_whitespace(value).empty()) return fail(400, "an empty Host header");
        std::string host;
        int port = 0;
        if (!parse_authority(value, host, port))
          return fail(400, "malformed Host header '" + value + "' (expected HOST or HOST:PORT, PORT in 1..65535)");
      }
      if (key == "connection") {
        for (size_t at = 0; at <= value.size();) {
          size_t comma = value.find(',', at);
          if (comma == std::string::npos) comma = value.size();
          const std::string option = lower(trim_whitespace(value.substr(at, comma - at)));
          if (option == "close") r.keep_alive = false;
          if (option == "keep-alive" && r.version == "HTTP/1.0") r.keep_alive = true;
          at = comma + 1;
        }
      }
      r.headers.emplace_back(name, value);
    }
  }
  if (hosts > 1) return fail(400, "more than one Host header");
  if (hosts == 0 && r.version == "HTTP/1.1") return fail(400, "an HTTP/1.1 request needs a Host header");
  // An absolute-form target (as proxies send it): RFC 9112 3.2.2 has its authority stand for the Host
  // header, so that the server's Host check judges the name the client used.
  std::string authority, origin_form, host;
  int port = 0;
  if (split_absolute_target(r.target, authority, origin_form)) {
    if (!parse_authority(authority, host, port))
      return fail(400, "malformed authority '" + authority + "' in the request target (expected HOST or HOST:PORT, "
                       "PORT in 1..65535)");
    r.target = origin_form;
    bool replaced = false;
    for (auto& [name, value] : r.headers)
      if (lower(name) == "host") value = authority, replaced = true;
    if (!replaced) r.headers.emplace_back("Host", authority);
  }
  if (transfer_encodings > 1) return fail(400, "more than one Transfer-Encoding header");
  if (chunked && (has_length || r.version == "HTTP/1.0"))
    return fail(400, "Transfer-Encoding with Content-Length, or in HTTP/1.0");
  if (chunked) {
    state_ = State::ChunkSize;
  } else if (length > limits_.body_limit) {
    return fail(413, "the request body (" + std::to_string(length) +
                         " bytes) is larger than the server's limit of " +
                         std::to_string(limits_.body_limit) + " bytes");
  } else if (length > 0) {
    remaining_ = length;
    state_ = State::Body;
  } else {
    state_ = State::Ready;
  }
  return Status::NeedMore;
}

RequestReader::Status RequestReader::advance(std::string& in) {
  for (;;) {
    switch (state_) {
      case State::Start: {
        // Empty lines before a request are ignored (RFC 9112, 2.2).
        size_t skip = 0;
        while (skip < in.size() && (in[skip] == '\r' || in[skip] == '\n')) ++skip;
        in.erase(0, skip);
        if (in.empty()) return Status::NeedMore;
        request_ = FramedRequest();
        expect_continue_ = false;
        scanned_ = 0;
        state_ = State::Head;
        break;
      }
      case State::Head: {
        size_t end = std::string::npos;
        size_t p = in.find('\n', scanned_);
        for (; p != std::string::npos; p = in.find('\n', p + 1)) {
          if (p + 1 >= in.size() || (in[p + 1] == '\r' && p + 2 >= in.size())) break;  // not known yet
          if (in[p + 1] == '\n')
            end = p + 2;
          else if (in[p + 1] == '\r' && in[p + 2] == '\n')
            end = p + 3;
          if (end != std::string::npos) break;
        }
        // Too large: 414 when the request line alone is over the target limit, else 431 (the same answer
        // whether the head has ended yet or not).
        auto too_large = [&] {
          const size_t line_end = in.find('\n');
          return (line_end == std::string::npos ? in.size() : line_end) > kTargetLimit
                     ? fail(414, "the request line is longer than 8 KiB")
                     : fail(431, "the request head is larger than " + std::to_string(limits_.head_limit) + " bytes");
        };
        if (end == std::string::npos) {
          scanned_ = p == std::string::npos ? in.size() : p;
          return in.size() > limits_.head_limit ? too_large() : Status::NeedMore;
        }
        if (end > limits_.head_limit) return too_large();
        const std::string head = in.substr(0, end);
        in.erase(0, end);
        if (parse_head(head) == Status::Failed) return Status::Failed;
        break;
      }
      case State::Body:
      case State::ChunkData: {
        const size_t take = size_t(std::min<uint64_t>(remaining_, in.size()));
        request_.body.append(in, 0, take);
        in.erase(0, take);
        remaining_ -= take;
        if (remaining_ > 0) return Status::NeedMore;
        state_ = state_ == State::Body ? State::Ready : State::ChunkEnd;
        break;
      }
      case State::ChunkSize: {
        const size_t p = in.find('\n');
        if (p == std::string::npos ? in.size() > kChunkLineLimit : p > kChunkLineLimit)
          return fail(400, "malformed chunked body (a chunk-size line over 1 KiB)");
        if (p == std::string::npos) return Status::NeedMore;
        std::string line = in.substr(0, p);
        in.erase(0, p + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        const std::string digits = trim_whitespace(line.substr(0, line.find(';')));
        if (digits.empty() || digits.size() > 15 || !std::all_of(digits.begin(), digits.end(), ::isxdigit))
          return fail(400, "malformed chunked body (a chunk size)");
        remaining_ = std::stoull(digits, nullptr, 16);
        if (remaining_ == 0) {
          trailer_bytes_ = 0;
          state_ = State::Trailers;
        } else if (request_.body.size() + remaining_ > limits_.body_limit) {
          return fail(413, "the request body is larger than the server's limit of " +
                               std::to_string(limits_.body_limit) + " bytes");
        } else {
          state_ = State::ChunkData;
        }
        break;
      }
      case State::ChunkEnd: {
        if (in.empty() || (in[0] == '\r' && in.size() < 2)) return Status::NeedMore;
        const size_t n = in[0] == '\n' ? 1 : (in[0] == '\r' && in[1] == '\n') ? 2 : 0;
        if (n == 0) return fail(400, "malformed chunked body (no line end after a chunk)");
        in.erase(0, n);
        state_ = State::ChunkSize;
        break;
      }
      case State::Trailers: {
        const size_t p = in.find('\n');
        if (p == std::string::npos) {
          if (trailer_bytes_ + in.size() > limits_.head_limit)
            return fail(431, "the trailer fields are too large");
          return Status::NeedMore;
        }
        trailer_bytes_ += p + 1;
        const bool empty = p == 0 || (p == 1 && in[0] == '\r');
        in.erase(0, p + 1);
        if (trailer_bytes_ > limits_.head_limit) return fail(431, "the trailer fields are too large");
        if (empty) state_ = State::Ready;  // trailer fields are read and ignored
        break;
      }
      case State::Ready:
        return Status::Ready;
      case State::Failed:
        return Status::Failed;
    }
  }
}

FramedRequest RequestReader::take() {
  FramedRequest r = std::move(request_);
  request_ = FramedRequest();
  state_ = State::Start;
  return r;
}

bool decode_body(FramedRequest& request, size_t limit, HttpFailure& failure) {
  if (request.content_encoding.empty()) return true;
  z_stream z{};
  // gzip: the gzip wrapper; deflate: the zlib wrapper (or gzip, detected).
  if (inflateInit2(&z, request.content_encoding == "gzip" ? 15 + 16 : 15 + 32) != Z_OK) {
    failure = {500, "cannot start decompressing the request body"};
    return false;
  }
  std::string out;
  z.next_in = reinterpret_cast<Bytef*>(request.body.data());
  z.avail_in = uInt(request.body.size());
  char buffer[64 << 10];
  int status = Z_OK;
  while (status != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(buffer);
    z.avail_out = sizeof buffer;
    status = inflate(&z, Z_NO_FLUSH);
    if (status != Z_OK && status != Z_STREAM_END) break;
    const size_t got = sizeof buffer - z.avail_out;
    if (out.size() + got > limit) {
      inflateEnd(&z);
      failure = {413, "the request body decompresses to more than the server's limit of " +
                          std::to_string(limit) + " bytes"};
      return false;
    }
    out.append(buffer, got);
  }
  const bool whole = status == Z_STREAM_END && z.avail_in == 0;
  inflateEnd(&z);
  if (!whole) {
    failure = {400, "the request body is not valid " + request.content_encoding + " data (or is cut short)"};
    return false;
  }
  request.body = std::move(out);
  request.content_encoding.clear();
  return true;
}

const char* http_reason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 415:
      return "Unsupported Media Type";
    case 417:
      return "Expectation Failed";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Error";
  }
}

std::string http_response(int status, const std::string& body, bool close,
                          const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + http_reason(status) + "\r\n";
  out += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  for (const auto& [name, value] : headers) out += name + ": " + value + "\r\n";
  if (close) out += "Connection: close\r\n";
  return out + "\r\n" + body;
}

namespace {

// The status line and headers of `response`; `length` < 0: the body is sent chunked. A connection kept open
// says for how long and for how many more requests (as the Keep-Alive header does).
std::string response_head(const Response& response, int64_t length, bool close,
                          const ConnectionLimits& limits, const char* content_encoding) {
  std::string out =
      "HTTP/1.1 " + std::to_string(response.status) + " " + http_reason(response.status) + "\r\n";
  if (!response.content_type.empty()) out += "Content-Type: " + response.content_type + "\r\n";
  for (const auto& [name, value] : response.headers) out += name + ": " + value + "\r\n";
  if (content_encoding)
    out += std::string("Content-Encoding: ") + content_encoding + "\r\nVary: Accept-Encoding\r\n";
  out += length < 0 ? std::string("Transfer-Encoding: chunked\r\n")
                    : "Content-Length: " + std::to_string(length) + "\r\n";
  if (close)
    out += "Connection: close\r\n";
  else
    out += "Keep-Alive: timeout=" + std::to_string(limits.idle_timeout_ms / 1000) +
           ", max=" + std::to_string(limits.requests_per_connection) + "\r\n";
  return out + "\r\n";
}

// A whole response as bytes: its body gzipped when the client takes gzip and the type is text; no body for
// HEAD (the head is GET's, Content-Length included).
std::string response_bytes(const Request& request, const Response& response, bool close,
                           const ConnectionLimits& limits) {
  const bool head_only = request.method == "HEAD";
  if (response.body.size() >= 64 && compressible(response.content_type) && accepts_gzip(request)) {
    std::string packed = gzip_compress(response.body);
    if (!packed.empty()) {
      std::string out = response_head(response, int64_t(packed.size()), close, limits, "gzip");
      return head_only ? out : out + packed;
    }
  }
  std::string out = response_head(response, int64_t(response.body.size()), close, limits, nullptr);
  return head_only ? out : out + response.body;
}

void append_chunk(std::string& out, const std::string& chunk) {
  char size[24];
  std::snprintf(size, sizeof size, "%zx\r\n", chunk.size());
  out += size;
  out += chunk;
  out += "\r\n";
}

}  // namespace

// ---- Connections ----

struct Connection {
  // Reading a request; Answering: waiting for a late answer or streaming it; Flushing: the rest of an
  // answer goes out, then the connection reads on or closes; Lingering: closed for sending, reading what
  // the client still sends before the close.
  enum class Phase { Reading, Answering, Flushing, Lingering };
  enum class Stage { Idle, Head, Body };
  explicit Connection(const ConnectionLimits& limits) : reader(limits) {}

  int fd = -1;
  std::string peer_ip;
  int peer_port = 0;
  Phase phase = Phase::Reading;
  Stage stage = Stage::Idle;
  std::string in;  // received, not yet framed
  RequestReader reader;
  std::string out;  // response bytes the socket has not taken yet, from out_at
  size_t out_at = 0;
  // The order in which the current waits began (accepted, or the last response ended): a counter, not a
  // clock, since a burst of connections is accepted within one millisecond.
  uint64_t wait_order = 0;
  int64_t deadline = 0;  // of the current phase / stage (Answering: of the write, while bytes wait)
  size_t requests = 0;
  uint32_t watched = 0;  // epoll events registered (0: not registered)
  bool continue_sent = false, close_after = false, closed = false;
  // The request being answered, and its answer while it is late.
  Request request;
  Response response;  // a late answer's head: status 0 until it is known
  std::shared_ptr<LateAnswer> late;
  bool head_sent = false;      // of the late answer (a stream)
  bool pump_deferred = false;  // the late answer has more, asked for once the queued bytes are out

  size_t pending() const { return out.size() - out_at; }
};

void Wakeup::notify() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!loop_ || queued_) return;
  queued_ = true;
  loop_->enqueue(shared_from_this());
}

HttpConnections::HttpConnections(ConnectionLimits limits, RequestHandler handler, ResponseFinisher finish)
    : limits_(limits), handler_(std::move(handler)), finish_(std::move(finish)) {}

HttpConnections::~HttpConnections() {
  for (auto& [fd, c] : connections_) {
    if (c->late) end_late(*c);
    ::close(fd);
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

namespace {
char listen_tag, wake_tag;  // epoll data of the listener and the wake-up eventfd
}  // namespace

bool HttpConnections::bind(const std::string& host, int port, std::string& error) {
  // Every connection holds a descriptor: use the hard limit, and keep 64 for the model and the rest.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
    if (files.rlim_cur < files.rlim_max) {
      files.rlim_cur = files.rlim_max;
      setrlimit(RLIMIT_NOFILE, &files);
      getrlimit(RLIMIT_NOFILE, &files);
    }
    if (files.rlim_cur != RLIM_INFINITY)
      limits_.max_connections = std::max<size_t>(
          1,
          std::min<size_t>(limits_.max_connections, files.rlim_cur > 96 ? size_t(files.rlim_cur) - 64 : 32));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int e = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); e != 0) {
    error = "cannot resolve '" + host + "': " + gai_strerror(e);
    return false;
  }
  std::string reason = "no address";
  for (addrinfo* a = found; a && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      listen_fd_ = fd;
    } else {
      reason = std::strerror(errno);
      ::close(fd);
    }
  }
  freeaddrinfo(found);
  if (listen_fd_ < 0) {
    error = "cannot listen on " + host + ":" + service + " (" + reason + ")";
    return false;
  }
  sockaddr_storage addr{};
  socklen_t length = sizeof addr;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &length);
  std::string ip;
  address_of(addr, ip, port_);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    error = std::string("cannot start the event loop: ") + std::strerror(errno);
    return false;
  }
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.ptr = &listen_tag;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &e);
  e.data.ptr = &wake_tag;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &e);
  return true;
}

void HttpConnections::wake() {
  const uint64_t one = 1;
  if (::write(wake_fd_, &one, sizeof one) < 0) {
    // The counter is only a wake-up: a full one already wakes the loop.
  }
}

void HttpConnections::drain() {
  draining_ = true;
  wake();
}

void HttpConnections::close() {
  closing_ = true;
  wake();
}

void HttpConnections::watch(Connection& c, uint32_t events) {
  if (c.watched == events) return;
  epoll_event e{};
  e.events = events;
  e.data.ptr = &c;
  if (events == 0)
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, &e);
  else
    epoll_ctl(epoll_fd_, c.watched == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c.fd, &e);
  c.watched = events;
}

void HttpConnections::close_connection(Connection& c) {
  if (c.late) {  // the client went away, a write failed, or the server closes: the answer is abandoned
    std::shared_ptr<LateAnswer> late = c.late;
    end_late(c);
    late->abandon();
  }
  watch(c, 0);
  ::close(c.fd);
  c.closed = true;
  --open_;
  // Freed at the end of this round of events: one may still name it.
  auto it = connections_.find(c.fd);
  graveyard_.push_back(std::move(it->second));
  connections_.erase(it);
}

bool HttpConnections::evict_one() {
  // Closing ones first, then those waiting for a request, then those still sending an answer; the one that
  // has waited longest among them.
  auto rank = [](const Connection& c) {
    return c.phase == Connection::Phase::Lingering ? 0 : c.phase == Connection::Phase::Reading ? 1 : 2;
  };
  Connection* victim = nullptr;
  for (auto& [fd, c] : connections_) {
    if (c->phase == Connection::Phase::Answering) continue;
    if (!victim || rank(*c) < rank(*victim) || (rank(*c) == rank(*victim) && c->wait_order < victim->wait_order))
      victim = c.get();
  }
  if (!victim) return false;
  close_connection(*victim);
  return true;
}

void HttpConnections::accept_all() {
  for (int accepted = 0; accepted < 512; ++accepted) {
    sockaddr_storage addr{};
    socklen_t length = sizeof addr;
    const int fd =
        accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: stop accepting for a moment instead of spinning on the listener.
        epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
        accept_paused_until_ = clock_ms() + 100;
      }
      return;
    }
    if (connections_.size() >= limits_.max_connections && !evict_one()) {
      // Every connection is being answered: this one is told so and closed.
      const std::string busy = http_response(503, error_body(503, "too many connections; retry later"), true,
                                             {{"Retry-After", "1"}});
      const char* data = busy.data();
      size_t size = busy.size();
      send_some(fd, data, size);
      ::close(fd);
      continue;
    }
    const int yes = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);  // stream chunks go out as they are written
    auto owned = std::make_unique<Connection>(limits_);
    Connection& c = *owned;
    c.fd = fd;
    address_of(addr, c.peer_ip, c.peer_port);
    c.wait_order = next_wait_order_++;
    c.deadline = clock_ms() + limits_.idle_timeout_ms;
    connections_.emplace(fd, std::move(owned));
    ++open_;
    watch(c, EPOLLIN | EPOLLRDHUP);
  }
}

void HttpConnections::advance(Connection& c) {
  // A loop, not recursion: a buffer of pipelined requests answered at once is worked through here.
  while (!c.closed && c.phase == Connection::Phase::Reading) {
    const RequestReader::Status status = c.reader.advance(c.in);
    const Connection::Stage stage = !c.reader.started()  ? Connection::Stage::Idle
                                    : c.reader.in_body() ? Connection::Stage::Body
                                                         : Connection::Stage::Head;
    if (stage != c.stage && status == RequestReader::Status::NeedMore) {
      c.stage = stage;
      c.deadline = clock_ms() + (stage == Connection::Stage::Head   ? limits_.head_timeout_ms
                                 : stage == Connection::Stage::Body ? limits_.body_timeout_ms
                                                                    : limits_.idle_timeout_ms);
    }
    if (status == RequestReader::Status::Ready) {
      dispatch(c);
      if (c.phase == Connection::Phase::Flushing) flush(c);  // back to Reading once all is sent
      continue;
    }
    if (status == RequestReader::Status::Failed) {
      const HttpFailure& f = c.reader.failure();
      c.out = http_response(f.status, error_body(f.status, f.message), true);
      c.out_at = 0;
      c.close_after = true;
      c.phase = Connection::Phase::Flushing;
      c.deadline = clock_ms() + limits_.write_timeout_ms;
      flush(c);
      return;
    }
    if (c.reader.wants_continue() && !c.continue_sent) {
      // The client waits for this before it sends the body (curl does for bodies over 1 KiB).
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      const char* data = kContinue.data();
      size_t size = kContinue.size();
      send_some(c.fd, data, size);
      c.continue_sent = true;
    }
    return;
  }
}

void HttpConnections::dispatch(Connection& c) {
  FramedRequest framed = c.reader.take();
  c.close_after = !framed.keep_alive || c.requests + 1 >= limits_.requests_per_connection || draining_;
  ++c.requests;
  c.out.clear();
  c.out_at = 0;
  c.deadline = clock_ms() + limits_.write_timeout_ms;
  HttpFailure failure;
  if (!decode_body(framed, limits_.body_limit, failure)) {
    c.out = http_response(failure.status, error_body(failure.status, failure.message), true);
    c.close_after = true;
    c.phase = Connection::Phase::Flushing;
    return;
  }
  Request& r = c.request;
  r = Request();
  r.method = std::move(framed.method);
  parse_target(framed.target, r.path, r.query);
  r.headers = std::move(framed.headers);
  r.body = std::move(framed.body);
  r.peer_ip = c.peer_ip;
  r.peer_port = c.peer_port;
  c.response = Response();
  try {
    handler_(c.request, c.response);
  } catch (const std::exception& e) {
    c.response = Response();
    c.response.status = 500;
    c.response.set_content(error_body(500, e.what()), "application/json");
  }
  if (c.response.late) return take_late(c);
  if (finish_) finish_(c.request, c.response);
  c.close_after = c.close_after || draining_;
  c.out = response_bytes(c.request, c.response, c.close_after, limits_);
  c.phase = Connection::Phase::Flushing;
}

void HttpConnections::take_late(Connection& c) {
  c.late = std::move(c.response.late);
  c.response = Response();
  c.response.status = 0;
  c.head_sent = false;
  c.pump_deferred = false;
  c.phase = Connection::Phase::Answering;
  ++busy_;
  Wakeup& w = *c.late->wakeup;
  {
    std::lock_guard<std::mutex> lock(w.mutex_);
    w.loop_ = this;
  }
  w.connection_ = &c;
  watch(c, EPOLLRDHUP);  // a client that goes away is seen at once; pipelined bytes wait in the socket
  // Asked in the next round rather than here, so that answers ready at once never nest advance() calls.
  w.notify();
}

void HttpConnections::end_late(Connection& c) {
  Wakeup& w = *c.late->wakeup;
  {
    std::lock_guard<std::mutex> lock(w.mutex_);
    w.loop_ = nullptr;
  }
  w.connection_ = nullptr;
  c.late.reset();
  c.response = Response();
  --busy_;
  c.phase = Connection::Phase::Flushing;
}

void HttpConnections::pump(Connection& c) {
  std::string chunk;
  LateAnswer::Progress progress = LateAnswer::Progress::Waiting;
  try {
    progress = c.late->pump(c.response, chunk);
  } catch (const std::exception& e) {
    progress = LateAnswer::Progress::Done;
    if (!c.head_sent) {
      c.response = Response();
      c.response.status = 500;
      c.response.set_content(error_body(500, e.what()), "application/json");
    }
  }
  if (c.pending() == 0) c.deadline = clock_ms() + limits_.write_timeout_ms;
  if (!c.head_sent) {
    if (c.response.status == 0) {
      if (progress == LateAnswer::Progress::Waiting) return;
      c.response.status = 500;  // done without an answer
      c.response.set_content(error_body(500, "the answer was lost"), "application/json");
    }
    if (finish_) finish_(c.request, c.response);
    c.close_after = c.close_after || draining_;
    if (!c.response.stream) {
      c.out += response_bytes(c.request, c.response, c.close_after, limits_);
      end_late(c);
      if (flush(c)) advance(c);
      return;
    }
    c.out += response_head(c.response, -1, c.close_after, limits_, nullptr);
    c.head_sent = true;
  }
  if (!chunk.empty()) append_chunk(c.out, chunk);
  if (progress == LateAnswer::Progress::Done) {
    c.out += "0\r\n\r\n";
    end_late(c);
    if (flush(c)) advance(c);
    return;
  }
  flush(c);
}

bool HttpConnections::flush(Connection& c) {
  if (c.pending() > 0) {
    const char* data = c.out.data() + c.out_at;
    size_t size = c.pending();
    if (!send_some(c.fd, data, size)) {
      close_connection(c);
      return false;
    }
    if (size < c.pending()) c.deadline = clock_ms() + limits_.write_timeout_ms;  // progress
    c.out_at = c.out.size() - size;
    if (c.pending() > 0) {
      if (c.out_at * 2 >= c.out.size()) {
        c.out.erase(0, c.out_at);
        c.out_at = 0;
      }
      watch(c, c.phase == Connection::Phase::Answering ? EPOLLOUT | EPOLLRDHUP : EPOLLOUT);
      return false;
    }
  }
  c.out.clear();
  c.out_at = 0;
  if (c.phase == Connection::Phase::Answering) {
    watch(c, EPOLLRDHUP);
    if (c.pump_deferred) {  // the answer had more while the buffer was full
      c.pump_deferred = false;
      c.late->wakeup->notify();
    }
    return false;
  }
  if (c.close_after || draining_) {
    // Closing at once could reset the connection before the client has read the answer while it is still
    // sending (a body over the limit): shut the sending side and read what comes for a moment.
    ::shutdown(c.fd, SHUT_WR);
    c.phase = Connection::Phase::Lingering;
    c.deadline = clock_ms() + kLingerMs;
    watch(c, EPOLLIN | EPOLLRDHUP);
    return false;
  }
  c.phase = Connection::Phase::Reading;
  c.stage = Connection::Stage::Idle;
  c.wait_order = next_wait_order_++;
  c.deadline = clock_ms() + limits_.idle_timeout_ms;
  c.continue_sent = false;
  watch(c, EPOLLIN | EPOLLRDHUP);
  return true;
}

void HttpConnections::on_writable(Connection& c) {
  if (flush(c)) advance(c);  // a pipelined request may be here already
}

void HttpConnections::on_readable(Connection& c) {
  char buffer[64 << 10];
  size_t budget = 256 << 10;  // per round, so that one fast sender does not hold the loop
  while (budget > 0) {
    const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
    if (n > 0) {
      budget -= std::min(budget, size_t(n));
      if (c.phase == Connection::Phase::Lingering) continue;  // discarded
      c.in.append(buffer, size_t(n));
      advance(c);
      if (c.closed || c.phase != Connection::Phase::Reading) return;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    // The peer closed (or reset): nothing complete is buffered, or it would have been answered.
    return close_connection(c);
  }
}

void HttpConnections::enqueue(const std::shared_ptr<Wakeup>& wakeup) {
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(ready_mutex_);
    first = ready_.empty();
    ready_.push_back(wakeup);
  }
  if (first) wake();  // later ones are taken in the same round
}

void HttpConnections::take_ready() {
  std::vector<std::shared_ptr<Wakeup>> ready;
  {
    std::lock_guard<std::mutex> lock(ready_mutex_);
    ready.swap(ready_);
  }
  for (const std::shared_ptr<Wakeup>& w : ready) {
    {
      std::lock_guard<std::mutex> lock(w->mutex_);
      w->queued_ = false;  // a notification from now on is another round's
    }
    Connection* c = w->connection_;
    if (!c || c->closed || !c->late) continue;  // the connection has ended since
    if (c->pending() > kPendingLimit) {
      c->pump_deferred = true;  // the client reads slowly: a stream skips to what is current then
      continue;
    }
    pump(*c);
  }
}

void HttpConnections::check_deadlines() {
  const int64_t now = clock_ms();
  if (accept_paused_until_ > 0 && now >= accept_paused_until_ && !closing_) {
    accept_paused_until_ = 0;
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.ptr = &listen_tag;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &e);
  }
  std::vector<Connection*> due;
  for (auto& [fd, c] : connections_) {
    // An answer being awaited has no deadline; one whose bytes the client does not take has the write's.
    if (c->phase == Connection::Phase::Answering && c->pending() == 0) continue;
    if (now >= c->deadline) due.push_back(c.get());
  }
  for (Connection* c : due) {
    if (c->phase == Connection::Phase::Reading && c->stage != Connection::Stage::Idle) {
      c->out = http_response(
          408,
          error_body(408, c->stage == Connection::Stage::Head ? "the request head did not arrive in time"
                                                              : "the request body did not arrive in time"),
          true);
      c->out_at = 0;
      c->close_after = true;
      c->phase = Connection::Phase::Flushing;
      c->deadline = now + limits_.write_timeout_ms;
      flush(*c);
    } else {
      close_connection(*c);  // idle, a write that made no progress, or the end of lingering
    }
  }
}

void HttpConnections::run() {
  epoll_event events[256];
  for (;;) {
    if (closing_) {
      if (listen_fd_ >= 0) {
        epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
        ::close(listen_fd_);
        listen_fd_ = -1;
      }
      std::vector<Connection*> all;
      for (auto& [fd, c] : connections_) all.push_back(c.get());
      for (Connection* c : all) close_connection(*c);
      graveyard_.clear();
      return;
    }
    if (draining_ && !drained_) {
      drained_ = true;
      std::vector<Connection*> idle;
      for (auto& [fd, c] : connections_)
        if (c->phase == Connection::Phase::Reading && c->stage == Connection::Stage::Idle)
          idle.push_back(c.get());
      for (Connection* c : idle) close_connection(*c);
    }
    const int n = epoll_wait(epoll_fd_, events, 256, 100);
    for (int i = 0; i < n; ++i) {
      void* tag = events[i].data.ptr;
      if (tag == &listen_tag) {
        if (!closing_) accept_all();
        continue;
      }
      if (tag == &wake_tag) {
        uint64_t count = 0;
        if (::read(wake_fd_, &count, sizeof count) < 0) {
          // Nothing to read: another round already took the wake-up.
        }
        take_ready();
        continue;
      }
      Connection& c = *static_cast<Connection*>(tag);
      if (c.closed) continue;
      const uint32_t what = events[i].events;
      switch (c.phase) {
        case Connection::Phase::Answering:
          if (what & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
            close_connection(c);  // the client went away: its generation is cancelled
          else if (what & EPOLLOUT)
            flush(c);
          break;
        case Connection::Phase::Flushing:
          if (what & (EPOLLERR | EPOLLHUP))
            close_connection(c);
          else
            on_writable(c);
          break;
        case Connection::Phase::Reading:
        case Connection::Phase::Lingering:
          on_readable(c);
          break;
      }
    }
    if (clock_ms() >= next_deadline_check_) {
      check_deadlines();
      next_deadline_check_ = clock_ms() + 50;
    }
    graveyard_.clear();
  }
}

}  // namespace canvas::serve
