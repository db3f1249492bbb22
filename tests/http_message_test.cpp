// canvas serve's own HTTP messages (serve/http_message.h) in-process: targets, header look-ups, routes and
// gzip; and, against the server as a process, the answers' encoding.
#include "serve/http_message.h"

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "serve/http_connections.h"
#include "serve_process.h"

using canvas::test::ServerProcess;
using nlohmann::json;

namespace canvas::serve {
namespace {

// Decompressed by the server's own request-body decoder.
std::string gunzip(const std::string& data) {
  FramedRequest r;
  r.content_encoding = "gzip";
  r.body = data;
  HttpFailure failure;
  return decode_body(r, 1 << 20, failure) ? r.body : "(not gzip: " + failure.message + ")";
}

TEST(HttpMessage, TargetsHeadersAndQueries) {
  Request r;
  parse_target("/props?model=text%2Ddg&x=a+b&flag&empty=&model=second", r.path, r.query);
  EXPECT_EQ(r.path, "/props");
  EXPECT_EQ(r.param("model"), "text-dg");  // the first of two
  EXPECT_EQ(r.param("x"), "a b");
  EXPECT_EQ(r.param("flag"), "");
  EXPECT_EQ(r.param("missing"), "");
  EXPECT_EQ(r.query.size(), 5u);
  parse_target("/v1/chat%2Fcompletions", r.path, r.query);
  EXPECT_EQ(r.path, "/v1/chat/completions");
  EXPECT_TRUE(r.query.empty());
  EXPECT_EQ(percent_decode("100%", false), "100%");  // a malformed escape stays as sent
  EXPECT_EQ(percent_decode("%zz+%41", false), "%zz+A");
  r.headers = {
      {"content-TYPE", "application/json"}, {"Authorization", "Bearer a"}, {"authorization", "Bearer b"}};
  EXPECT_EQ(r.header("Content-Type"), "application/json");
  EXPECT_EQ(r.header("AUTHORIZATION"), "Bearer a");
  EXPECT_TRUE(r.has_header("authorization"));
  EXPECT_FALSE(r.has_header("Origin"));
  EXPECT_EQ(r.header("Origin"), "");
}

TEST(HttpMessage, RoutesAndTheirMethods) {
  Router router;
  int called = 0;
  router.get("/health", [&](const Request&, Response&) { ++called; });
  router.post("/v1/completions", [&](const Request&, Response&) { ++called; });
  const Router::Route* health = router.find("/health");
  ASSERT_NE(health, nullptr);
  EXPECT_EQ(health->allow, "GET, HEAD, OPTIONS");
  EXPECT_TRUE(health->takes("GET"));
  EXPECT_TRUE(health->takes("HEAD"));
  EXPECT_FALSE(health->takes("POST"));
  EXPECT_FALSE(health->takes("GE"));
  const Router::Route* completions = router.find("/v1/completions");
  ASSERT_NE(completions, nullptr);
  EXPECT_TRUE(completions->takes("POST"));
  EXPECT_FALSE(completions->takes("PUT"));
  EXPECT_EQ(router.find("/v1/completions/"), nullptr);
  EXPECT_EQ(router.find("/nothing"), nullptr);
  Request req;
  Response res;
  completions->handler(req, res);
  EXPECT_EQ(called, 1);
}

TEST(HttpMessage, GzipOfAnswers) {
  Request r;
  EXPECT_FALSE(accepts_gzip(r));
  for (const char* yes : {"gzip", "gzip, deflate", "deflate, br, GZIP;q=0.5", "*", "br,x-gzip"}) {
    r.headers = {{"Accept-Encoding", yes}};
    EXPECT_TRUE(accepts_gzip(r)) << yes;
  }
  for (const char* no : {"identity", "br", "gzip;q=0", "deflate, gzip; q=0.000", "gzipped"}) {
    r.headers = {{"Accept-Encoding", no}};
    EXPECT_FALSE(accepts_gzip(r)) << no;
  }
  EXPECT_TRUE(compressible("application/json"));
  EXPECT_TRUE(compressible("text/html; charset=utf-8"));
  EXPECT_TRUE(compressible("text/plain; version=0.0.4; charset=utf-8"));
  EXPECT_FALSE(compressible("text/event-stream"));
  EXPECT_FALSE(compressible("image/png"));
  const std::string text = std::string(5000, 'a') + "{\"b\": 1}";
  const std::string packed = gzip_compress(text);
  EXPECT_LT(packed.size(), text.size() / 10);
  EXPECT_EQ(gunzip(packed), text);
}

// The same answer whatever the client takes: gzipped for a client that sends Accept-Encoding: gzip (what
// python's HTTP clients and browsers send), as it is otherwise; streams are never compressed.
TEST(ServeHttpCli, AnswersAreGzippedForClientsThatTakeIt) {
  ServerProcess server("--parallel 1");
  ASSERT_NE(server.port(), 0) << server.log();
  httplib::Client plain("127.0.0.1", server.port());
  plain.set_decompress(false);
  auto identity = plain.Get("/v1/models", {{"Accept-Encoding", "identity"}});
  ASSERT_TRUE(identity);
  EXPECT_EQ(identity->status, 200);
  EXPECT_FALSE(identity->has_header("Content-Encoding"));
  auto gzipped = plain.Get("/v1/models", {{"Accept-Encoding", "gzip, deflate"}});
  ASSERT_TRUE(gzipped);
  EXPECT_EQ(gzipped->status, 200);
  EXPECT_EQ(gzipped->get_header_value("Content-Encoding"), "gzip");
  EXPECT_EQ(gunzip(gzipped->body), identity->body);
  EXPECT_EQ(json::parse(identity->body)["object"], "list");
  auto stream =
      plain.Post("/v1/completions", {{"Accept-Encoding", "gzip"}},
                 R"({"prompt": "And", "max_tokens": 4, "mode": "ar", "stream": true})", "application/json");
  ASSERT_TRUE(stream);
  EXPECT_EQ(stream->status, 200);
  EXPECT_FALSE(stream->has_header("Content-Encoding"));
  EXPECT_EQ(canvas::test::sse_events(stream->body).back(), "[DONE]");
}

}  // namespace
}  // namespace canvas::serve
