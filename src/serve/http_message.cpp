// canvas serve's HTTP messages: header and query look-ups, target decoding, routes, gzip of answers.
#include "serve/http_message.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>

namespace canvas::serve {

namespace {

bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

const std::string kNone;

int hex_value(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

}  // namespace

const std::string& Request::header(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (same_name(key, name)) return value;
  return kNone;
}

bool Request::has_header(std::string_view name) const {
  return std::any_of(headers.begin(), headers.end(), [&](const auto& h) { return same_name(h.first, name); });
}

const std::string& Request::param(std::string_view name) const {
  for (const auto& [key, value] : query)
    if (key == name) return value;
  return kNone;
}

bool parse_authority(std::string_view authority, std::string& host, int& port) {
  host.clear();
  port = 0;
  std::string_view rest;
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos || close == 1) return false;
    const std::string_view address = authority.substr(1, close - 1);
    if (!std::all_of(address.begin(), address.end(), [](char ch) {
          return std::isxdigit(static_cast<unsigned char>(ch)) || ch == ':' || ch == '.';
        }))
      return false;
    host = address;
    rest = authority.substr(close + 1);
  } else {
    const size_t colon = authority.find(':');
    host = authority.substr(0, colon);
    rest = colon == std::string_view::npos ? std::string_view() : authority.substr(colon);
    // RFC 3986's reg-name (unreserved, percent escapes, sub-delims): no '@', '/', ':' or space.
    if (host.empty() || !std::all_of(host.begin(), host.end(), [](char ch) {
          return std::isalnum(static_cast<unsigned char>(ch)) || std::string_view("-._~%!$&'()*+,;=").find(ch) !=
                                                                    std::string_view::npos;
        }))
      return false;
  }
  if (!rest.empty()) {
    const std::string_view digits = rest.substr(1);
    if (rest[0] != ':' || digits.empty() || digits.size() > 5 ||
        !std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
      return false;
    port = std::stoi(std::string(digits));
    if (port < 1 || port > 65535) return false;
  }
  std::transform(host.begin(), host.end(), host.begin(),
                 [](char ch) { return char(std::tolower(static_cast<unsigned char>(ch))); });
  return true;
}

bool split_absolute_target(std::string_view target, std::string& authority, std::string& origin_form) {
  const size_t scheme_end = target.find("://");
  if (scheme_end == std::string_view::npos) return false;
  const std::string_view scheme = target.substr(0, scheme_end);
  if (!same_name(scheme, "http") && !same_name(scheme, "https")) return false;
  const std::string_view rest = target.substr(scheme_end + 3);
  const size_t path = rest.find_first_of("/?#");
  authority = rest.substr(0, path);
  origin_form = path == std::string_view::npos ? std::string_view() : rest.substr(path);
  origin_form = origin_form.substr(0, origin_form.find('#'));  // a fragment is the client's, never sent on
  if (origin_form.empty() || origin_form[0] != '/') origin_form.insert(0, "/");
  return true;
}

std::string percent_decode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (ch == '%' && i + 2 < text.size() && hex_value(text[i + 1]) >= 0 && hex_value(text[i + 2]) >= 0) {
      out.push_back(char(hex_value(text[i + 1]) * 16 + hex_value(text[i + 2])));
      i += 2;
    } else {
      out.push_back(plus_is_space && ch == '+' ? ' ' : ch);
    }
  }
  return out;
}

void parse_target(const std::string& target, std::string& path,
                  std::vector<std::pair<std::string, std::string>>& query) {
  const size_t mark = target.find('?');
  path = percent_decode(std::string_view(target).substr(0, mark), false);
  query.clear();
  if (mark == std::string::npos) return;
  const std::string_view rest = std::string_view(target).substr(mark + 1);
  for (size_t at = 0; at <= rest.size();) {
    size_t end = rest.find('&', at);
    if (end == std::string_view::npos) end = rest.size();
    const std::string_view pair = rest.substr(at, end - at);
    if (!pair.empty()) {
      const size_t eq = pair.find('=');
      query.emplace_back(
          percent_decode(pair.substr(0, eq), true),
          eq == std::string_view::npos ? std::string() : percent_decode(pair.substr(eq + 1), true));
    }
    at = end + 1;
  }
}

bool Router::Route::takes(const std::string& method) const {
  const std::string padded = ", " + allow + ",";
  return padded.find(", " + method + ",") != std::string::npos;
}

void Router::get(const std::string& path, Handler handler) {
  routes_[path] = Route{std::move(handler), "GET, HEAD, OPTIONS"};
}

void Router::post(const std::string& path, Handler handler) {
  routes_[path] = Route{std::move(handler), "POST, OPTIONS"};
}

const Router::Route* Router::find(const std::string& path) const {
  const auto it = routes_.find(path);
  return it == routes_.end() ? nullptr : &it->second;
}

bool accepts_gzip(const Request& request) {
  // "gzip" (or "x-gzip", or "*") in the list, unless its weight is q=0.
  const std::string& list = request.header("Accept-Encoding");
  for (size_t at = 0; at < list.size();) {
    size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    std::string item = list.substr(at, end - at);
    item.erase(std::remove_if(item.begin(), item.end(), [](unsigned char ch) { return std::isspace(ch); }),
               item.end());
    std::transform(item.begin(), item.end(), item.begin(),
                   [](unsigned char ch) { return char(std::tolower(ch)); });
    const size_t semicolon = item.find(';');
    const std::string coding = item.substr(0, semicolon);
    const bool refused = semicolon != std::string::npos && item.compare(semicolon, 4, ";q=0") == 0 &&
                         item.find_first_of("123456789", semicolon + 4) == std::string::npos;
    if ((coding == "gzip" || coding == "x-gzip" || coding == "*") && !refused) return true;
    at = end + 1;
  }
  return false;
}

bool compressible(const std::string& content_type) {
  const std::string type = content_type.substr(0, content_type.find(';'));
  return (type.rfind("text/", 0) == 0 && type != "text/event-stream") || type == "application/json" ||
         type == "application/javascript" || type == "application/xml" || type == "image/svg+xml";
}

std::string gzip_compress(const std::string& data) {
  z_stream z{};
  // Level 6 (zlib's default): most of level 9's ratio on text at a fraction of its time.
  if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return std::string();
  std::string out(deflateBound(&z, uLong(data.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = uInt(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  const int status = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return status == Z_STREAM_END ? out : std::string();
}

}  // namespace canvas::serve
