// canvas serve as a process: GET /metrics (Prometheus text whose counters move exactly with the requests,
// behind the API key) and the request log line.

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <cctype>
#include <sstream>

#include "serve_process.h"
#include "test_util.h"

using nlohmann::json;

namespace {

using canvas::test::ServerProcess;
using canvas::test::post;

// Prometheus text: every line a comment (# HELP / # TYPE) or `name{labels} value`; the samples by their
// name and labels as written.
std::map<std::string, double> parse_metrics(const std::string& text) {
  std::map<std::string, double> samples;
  auto is_name = [](const std::string& n) {
    if (n.empty() || std::isdigit(static_cast<unsigned char>(n[0]))) return false;
    return std::all_of(n.begin(), n.end(), [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == ':'; });
  };
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      EXPECT_TRUE(is_name(line.substr(7, line.find(' ', 7) - 7))) << line;
      continue;
    }
    const size_t space = line.rfind(' ');
    EXPECT_NE(space, std::string::npos) << "not a sample line: '" << line << "'";
    if (space == std::string::npos) continue;
    const std::string key = line.substr(0, space), value = line.substr(space + 1);
    const size_t brace = key.find('{');
    EXPECT_TRUE(is_name(key.substr(0, brace))) << line;
    if (brace != std::string::npos) {
      EXPECT_EQ(key.back(), '}') << line;
      EXPECT_NE(key.find("=\""), std::string::npos) << line;
    }
    size_t used = 0;
    const double v = value == "+Inf" ? INFINITY : std::stod(value, &used);
    EXPECT_TRUE(value == "+Inf" || used == value.size()) << line;
    samples[key] = v;
  }
  return samples;
}

std::map<std::string, double> scrape(const ServerProcess& s, const httplib::Headers& headers = {}) {
  auto res = s.client().Get("/metrics", headers);
  EXPECT_TRUE(res);
  if (!res) return {};
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type").rfind("text/plain; version=0.0.4", 0), 0u);
  return parse_metrics(res->body);
}

// Histogram buckets are cumulative and end with +Inf = _count.
void expect_histogram(const std::map<std::string, double>& m, const std::string& name) {
  std::vector<std::pair<double, double>> ordered;  // (le, count) in numeric order
  for (const auto& [key, value] : m)
    if (key.rfind(name + "_bucket{le=\"", 0) == 0) {
      const std::string le = key.substr(name.size() + 12, key.size() - name.size() - 14);
      ordered.emplace_back(le == "+Inf" ? INFINITY : std::stod(le), value);
    }
  EXPECT_GT(ordered.size(), 3u) << name;
  std::sort(ordered.begin(), ordered.end());
  for (size_t i = 1; i < ordered.size(); ++i) EXPECT_GE(ordered[i].second, ordered[i - 1].second) << name;
  ASSERT_FALSE(ordered.empty());
  EXPECT_TRUE(std::isinf(ordered.back().first));
  EXPECT_EQ(ordered.back().second, m.at(name + "_count")) << name;
}

}  // namespace

TEST(ServeCli, MetricsCountRequestsTokensAndPasses) {
  ServerProcess server("--parallel 2");
  ASSERT_NE(server.port(), 0) << server.log();
  const auto before = scrape(server);
  for (const char* name : {"canvas_tokens_generated_total", "canvas_prompt_tokens_total", "canvas_forward_passes_total",
                           "canvas_queue_depth", "canvas_requests_running", "canvas_request_latency_seconds_count",
                           "canvas_queue_wait_seconds_count"})
    EXPECT_TRUE(before.count(name)) << name;
  EXPECT_EQ(before.at("canvas_tokens_generated_total"), 0);
  expect_histogram(before, "canvas_request_latency_seconds");

  int64_t completion = 0, prompt = 0, passes = 0;
  const std::vector<std::string> bodies = {
      R"({"prompt": "And God said", "max_tokens": 5, "mode": "ar"})",
      R"({"prompt": "Let there be", "max_tokens": 8, "mode": "diffusion", "block_length": 8})"};
  for (const std::string& body : bodies) {
    auto res = post(server, "/v1/completions", body);
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    const json j = json::parse(res->body);
    ASSERT_TRUE(j.contains("usage")) << j.dump();
    const json& usage = j.at("usage");
    completion += usage.at("completion_tokens").get<int64_t>();
    prompt += usage.at("prompt_tokens").get<int64_t>();
    passes += usage.at("forward_passes").get<int64_t>();
  }
  auto bad = post(server, "/v1/completions", R"({"prompt": "a", "max_tokens": 0})");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);

  const auto after = scrape(server);
  const std::string ok = R"(canvas_requests_total{endpoint="/v1/completions",status="2xx"})";
  const std::string client_error = R"(canvas_requests_total{endpoint="/v1/completions",status="4xx"})";
  EXPECT_EQ(after.at(ok), 2);
  EXPECT_EQ(after.at(client_error), 1);
  EXPECT_EQ(after.at(R"(canvas_requests_total{endpoint="/metrics",status="2xx"})"), 1);  // the scrape before
  EXPECT_EQ(after.at("canvas_tokens_generated_total"), double(completion));
  EXPECT_EQ(after.at("canvas_prompt_tokens_total"), double(prompt));
  EXPECT_EQ(after.at("canvas_forward_passes_total"), double(passes));
  EXPECT_EQ(after.at("canvas_request_latency_seconds_count"), 2);
  EXPECT_EQ(after.at("canvas_queue_wait_seconds_count"), 2);
  EXPECT_GT(after.at("canvas_request_latency_seconds_sum"), 0);
  EXPECT_EQ(after.at("canvas_queue_depth"), 0);
  expect_histogram(after, "canvas_request_latency_seconds");
  expect_histogram(after, "canvas_queue_wait_seconds");

  // One log line per request, with the model (its id: the file's stem) and the status.
  EXPECT_NE(server.log().find("canvas serve: request mode=ar model=text-masked prompt=12 tokens="),
            std::string::npos)
      << server.log();
  EXPECT_NE(server.log().find("status=ok"), std::string::npos);
}

TEST(ServeCli, MetricsNeedTheApiKey) {
  ServerProcess server("--api-key sesame");
  ASSERT_NE(server.port(), 0) << server.log();
  auto refused = server.client().Get("/metrics");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 401);
  const auto m = scrape(server, {{"Authorization", "Bearer sesame"}});
  EXPECT_EQ(m.at(R"(canvas_requests_total{endpoint="/metrics",status="4xx"})"), 1);
}
