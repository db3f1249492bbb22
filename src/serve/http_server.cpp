// HTTP endpoints of canvas serve over cpp-httplib.
#include "serve/http_server.h"

#include <httplib.h>

#include <sys/socket.h>

#include <chrono>
#include <ctime>
#include <thread>

#include "core/error.h"
#include "decode/verify.h"
#include "io/json.h"
#include "serve/openai.h"

namespace canvas::serve {

using nlohmann::json;

namespace {

// JSON text; invalid UTF-8 (a byte-level model can emit any byte) becomes U+FFFD instead of an exception.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = "",
                const std::string& code = "") {
  res.status = status;
  res.set_content(dump(error_json(status, message, param, code)), "application/json");
}

std::atomic<int64_t> next_id{1};

}  // namespace

HttpServer::HttpServer(ServerOptions options) : options_(std::move(options)), http_(new httplib::Server) {}

HttpServer::~HttpServer() = default;

void HttpServer::set_engine(Engine* engine) { engine_.store(engine); }

bool HttpServer::bind(std::string& error) {
  Engine* engine = engine_.load();
  const int threads = options_.http_threads > 0 ? options_.http_threads : 72;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  (void)engine;
  http_->set_payload_max_length(options_.body_limit);
  // Generous socket timeouts: on a loaded machine a client may be slow to send its request, and a
  // connection waits idle between requests.
  http_->set_keep_alive_timeout(30);
  http_->set_read_timeout(30, 0);
  http_->set_write_timeout(30, 0);
  routes();
  // cpp-httplib's listen backlog is compiled in as 5: a burst of clients connecting at once (a load
  // balancer, 64 closed-loop clients) overflows it while the accept thread waits for a core, and the
  // kernel then drops handshakes, which clients see as resets. The listening socket is captured while
  // binding and given a deeper backlog.
  int listen_fd = -1;
  http_->set_socket_options([&listen_fd](int sock) {
    httplib::default_socket_options(sock);
    if (listen_fd < 0) listen_fd = sock;
  });
  auto deepen_backlog = [&] {
    if (listen_fd >= 0) ::listen(listen_fd, 1024);
    http_->set_socket_options(httplib::default_socket_options);
  };
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
    deepen_backlog();
    if (port_ <= 0) {
      error = "cannot bind " + options_.host + " to any port";
      return false;
    }
    return true;
  }
  const bool bound = http_->bind_to_port(options_.host, options_.port);
  deepen_backlog();
  if (!bound) {
    error = "cannot bind " + options_.host + ":" + std::to_string(options_.port) + " (in use, or not an address here)";
    return false;
  }
  port_ = options_.port;
  return true;
}

void HttpServer::serve() { http_->listen_after_bind(); }

void HttpServer::stop(int64_t grace_ms) {
  draining_ = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  auto in_flight = [&] {
    std::lock_guard<std::mutex> lock(jobs_mutex_);
    return jobs_.size();
  };
  while (in_flight() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  {
    std::lock_guard<std::mutex> lock(jobs_mutex_);
    for (const auto& job : jobs_) job->cancel = true;
  }
  const auto cancel_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (in_flight() > 0 && std::chrono::steady_clock::now() < cancel_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  http_->stop();
}

void HttpServer::routes() {
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const bool api = req.path.rfind("/v1/", 0) == 0 || req.path == "/tokenize" || req.path == "/detokenize" ||
                     req.path == "/props" || req.path == "/infill";
    if (api && !options_.api_key.empty()) {
      const std::string expected = "Bearer " + options_.api_key;
      if (req.get_header_value("Authorization") != expected) {
        send_error(res, 401, "missing or wrong API key (send 'Authorization: Bearer KEY')", "", "invalid_api_key");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (draining_ && req.method == "POST") {
      res.set_header("Retry-After", "1");
      send_error(res, 503, "the server is shutting down");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http_->set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    if (res.status == 413) {
      send_error(res, 413, "the request body is larger than the server's limit");
    } else if (res.status == 404) {
      send_error(res, 404, "no such endpoint: " + req.method + " " + req.path);
    } else {
      send_error(res, res.status, "HTTP error " + std::to_string(res.status));
    }
    return httplib::Server::HandlerResponse::Handled;
  }));
  http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      send_error(res, 500, e.what());
    } catch (...) {
      send_error(res, 500, "internal error");
    }
  });

  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    Engine* engine = engine_.load();
    if (!engine || draining_) {
      res.status = 503;
      res.set_content(dump(json{{"status", engine ? "stopping" : "loading"}}), "application/json");
      return;
    }
    const StepBatcher& b = engine->batcher();
    json j = {{"status", "ok"},
              {"model", options_.model_name},
              {"running", engine->running()},
              {"queued", engine->queued()},
              {"parallel", engine->options().parallel},
              {"queue", engine->options().queue},
              {"batches", b.batches()},
              {"batched_passes", b.passes()},
              {"largest_batch", b.largest_batch()},
              {"modes", json::array()},
              {"cost_model", engine->cost_model().describe()}};
    if (engine->has_diffusion()) j["modes"].push_back("diffusion");
    if (engine->has_ar()) j["modes"].push_back("ar");
    res.set_content(dump(j), "application/json");
  });
  http_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    json model = {{"id", options_.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "canvas"}};
    res.set_content(dump(json{{"object", "list"}, {"data", json::array({model})}}), "application/json");
  });
  // llama-server's helpers: /tokenize, /detokenize, /props.
  auto body_json = [](const httplib::Request& req, json& out) {
    try {
      out = parse_json(req.body, "the request body");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return out.is_object() ? std::string() : std::string("the request body must be a JSON object");
  };
  http_->Post("/tokenize", [this, body_json](const httplib::Request& req, httplib::Response& res) {
    Engine* engine = engine_.load();
    if (!engine || !engine->generator().tokenizer()) return send_error(res, 503, "the model is still loading");
    json j;
    if (const std::string e = body_json(req, j); !e.empty()) return send_error(res, 400, e);
    if (!j.contains("content") || !j["content"].is_string()) return send_error(res, 400, "'content' must be a string", "content");
    const bool special = j.value("add_special", false);
    const std::vector<int32_t> ids = engine->generator().tokenizer()->encode(j["content"].get<std::string>(), special);
    res.set_content(dump(json{{"tokens", ids}}), "application/json");
  });
  http_->Post("/detokenize", [this, body_json](const httplib::Request& req, httplib::Response& res) {
    Engine* engine = engine_.load();
    if (!engine || !engine->generator().tokenizer()) return send_error(res, 503, "the model is still loading");
    json j;
    if (const std::string e = body_json(req, j); !e.empty()) return send_error(res, 400, e);
    if (!j.contains("tokens") || !j["tokens"].is_array()) return send_error(res, 400, "'tokens' must be an array", "tokens");
    std::vector<int32_t> ids;
    for (const json& t : j["tokens"]) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= engine->model().config.vocab)
        return send_error(res, 400, "'tokens' must hold ids of the vocabulary", "tokens");
      ids.push_back(t.get<int32_t>());
    }
    res.set_content(dump(json{{"content", engine->generator().tokenizer()->decode(ids)}}), "application/json");
  });
  http_->Get("/props", [this](const httplib::Request&, httplib::Response& res) {
    Engine* engine = engine_.load();
    if (!engine) return send_error(res, 503, "the model is still loading");
    const ModelConfig& c = engine->model().config;
    json modes = json::array();
    if (engine->has_diffusion()) modes.push_back("diffusion");
    if (engine->has_ar()) modes.push_back("ar");
    if (supports_verify(c)) modes.push_back("verify");
    json props = {{"model", options_.model_name},
                  {"architecture", c.arch},
                  {"n_ctx", c.context_length},
                  {"n_vocab", c.vocab},
                  {"modes", modes},
                  {"default_mode", decode_mode_name(engine->options().default_mode)},
                  {"total_slots", engine->options().parallel},
                  {"chat_template", engine->options().chat ? engine->options().chat->jinja : std::string()},
                  {"chat_format", engine->options().chat ? engine->options().chat->name : std::string()}};
    res.set_content(dump(props), "application/json");
  });

  http_->Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(web_page_html(), "text/html; charset=utf-8");
  });

  auto handle = [this](const httplib::Request& req, httplib::Response& res, bool chat) {
    Engine* engine = engine_.load();
    if (!engine) {
      res.set_header("Retry-After", "1");
      return send_error(res, 503, "the model is still loading");
    }
    ApiRequest r;
    try {
      r = parse_api_request(req.body, chat);
    } catch (const ApiError& e) {
      return send_error(res, e.status, e.what(), e.param, e.code);
    }
    const Model& model = engine->model();
    const ModelConfig& c = model.config;
    const Generator& generator = engine->generator();
    GenerationSettings& s = r.settings;
    if (chat) s.messages = r.messages;
    else s.text = r.prompt;
    // Infilling (suffix) and structured output (response_format) take the prompt as text; the generator
    // checks them when it plans the canvas.
    const bool fills = Generator::fills_holes(s);
    std::vector<int32_t> prompt;
    int64_t P = 0;
    if (!fills) {
      try {
        prompt = generator.prompt_of(s);
      } catch (const std::exception& e) {
        return send_error(res, 400, std::string("cannot tokenize the prompt: ") + e.what(), chat ? "messages" : "prompt");
      }
      P = int64_t(prompt.size());
      if (P == 0) return send_error(res, 400, "the prompt encodes to no tokens", chat ? "messages" : "prompt");
      const int64_t ctx = c.context_length > 0 ? c.context_length : (int64_t(1) << 30);
      if (P >= ctx)
        return send_error(res, 400, "the prompt (" + std::to_string(P) + " tokens) does not fit the model's context length " +
                                        std::to_string(ctx) + " with room for one new token",
                          chat ? "messages" : "prompt", "context_length_exceeded");
      if (P + s.max_new_tokens > ctx)
        return send_error(res, 400, "the prompt (" + std::to_string(P) + " tokens) + max_tokens (" +
                                        std::to_string(s.max_new_tokens) + ") exceed the model's context length " +
                                        std::to_string(ctx),
                          "max_tokens", "context_length_exceeded");
      if (s.mode == DecodeMode::Diffusion && !engine->has_diffusion())
        return send_error(res, 400, "this model cannot decode by diffusion (no mask token); use 'mode': 'ar'", "mode");
      if (s.mode == DecodeMode::Ar && !engine->has_ar())
        return send_error(res, 400, "this model cannot decode autoregressively; use 'mode': 'diffusion'", "mode");
      try {
        // The request as it would run in the mode it asks for (auto: each mode the router may pick).
        GenerationSettings probe = s;
        if (s.mode == DecodeMode::Auto) {
          if (engine->has_diffusion()) {
            probe.mode = DecodeMode::Diffusion;
            generator.check(probe, P);
          }
          if (engine->has_ar()) {
            probe.mode = DecodeMode::Ar;
            generator.check(probe, P);
          }
        } else {
          generator.check(probe, P);
        }
      } catch (const Error& e) {
        const std::string message = e.what();
        const bool context = message.find("context length") != std::string::npos;
        return send_error(res, 400, message, context ? "max_tokens" : "", context ? "context_length_exceeded" : "");
      }
    }
    auto job = std::make_shared<Job>();
    job->prompt = std::move(prompt);
    job->settings = s;
    if (!engine->submit(job)) {
      res.set_header("Retry-After", "1");
      return send_error(res, 503, "the server is busy: " + std::to_string(engine->queued()) +
                                      " requests are waiting (--queue " + std::to_string(engine->options().queue) +
                                      "); retry later", "", "server_busy");
    }
    {
      std::lock_guard<std::mutex> lock(jobs_mutex_);
      jobs_.insert(job);
    }
    auto untrack = [this, job] {
      job->cancel = true;  // no effect once finished; stops a generation whose client is gone
      std::lock_guard<std::mutex> lock(jobs_mutex_);
      jobs_.erase(job);
    };
    const std::string id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
    const int64_t created = int64_t(std::time(nullptr));
    const std::string model_name = r.model.empty() ? options_.model_name : r.model;

    if (!r.stream) {
      {
        std::unique_lock<std::mutex> lock(job->mutex);
        job->changed.wait(lock, [&] { return job->finished; });
      }
      untrack();
      if (!job->error.empty())
        return fills ? send_error(res, 400, job->error, chat ? "response_format" : "suffix")
                     : send_error(res, 500, "generation failed: " + job->error);
      json choice = {{"index", 0}, {"finish_reason", job->finish_reason}};
      if (chat) {
        choice["message"] = {{"role", "assistant"}, {"content", job->text}};
      } else {
        choice["text"] = job->text;
        choice["logprobs"] = nullptr;
      }
      json body = {{"id", id},
                   {"object", chat ? "chat.completion" : "text_completion"},
                   {"created", created},
                   {"model", model_name},
                   {"choices", json::array({choice})},
                   {"usage", usage_json(fills ? int64_t(job->prompt.size()) : P, *job)},
                   {"canvas", {{"mode", decode_mode_name(job->mode_used)}, {"queue_ms", job->queued_ms},
                               {"decode_ms", job->decode_ms}, {"tokens", job->tokens},
                               {"finish", job->ended}, {"seed", job->settings.sampling.seed}}}};
      res.set_content(dump(body), "application/json");
      return;
    }

    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");  // nginx: pass events through as they come
    res.set_chunked_content_provider(
        "text/event-stream",
        [job, engine, chat, id, created, model_name, P, draft = r.canvas_draft,
         usage = r.include_usage](size_t, httplib::DataSink& sink) {
          std::string sent;
          int64_t seen = -1;
          bool first = true;
          auto send = [&](const json& j) {
            const std::string line = "data: " + dump(j) + "\n\n";
            return sink.write(line.data(), line.size());
          };
          auto chunk = [&](const std::string& delta, const json& finish) {
            json choice = {{"index", 0}, {"finish_reason", finish}};
            if (chat) {
              choice["delta"] = json::object();
              if (first) choice["delta"]["role"] = "assistant";
              if (!delta.empty() || !first) choice["delta"]["content"] = delta;
              if (first && delta.empty()) choice["delta"]["content"] = "";
            } else {
              choice["text"] = delta;
              choice["logprobs"] = nullptr;
            }
            first = false;
            return json{{"id", id},
                        {"object", chat ? "chat.completion.chunk" : "text_completion"},
                        {"created", created},
                        {"model", model_name},
                        {"choices", json::array({choice})}};
          };
          for (;;) {
            std::vector<int32_t> canvas;
            bool finished = false, uniform = false;
            std::string error, final_text, finish_reason;
            int64_t passes = 0, steps = 0;
            DecodeMode mode = DecodeMode::Diffusion;
            {
              std::unique_lock<std::mutex> lock(job->mutex);
              const bool changed =
                  job->changed.wait_for(lock, std::chrono::milliseconds(500), [&] { return job->version != seen; });
              if (!changed) {
                lock.unlock();
                // Nothing new (queued): a comment line finds out whether the client is still there.
                if (!sink.write(": waiting\n\n", 11)) {
                  job->cancel = true;
                  return false;
                }
                continue;
              }
              seen = job->version;
              canvas = job->canvas;
              finished = job->finished;
              uniform = job->uniform_state;
              error = job->error;
              final_text = finished ? job->text : job->committed_text;
              finish_reason = job->finish_reason;
              passes = job->passes;
              steps = job->steps;
              mode = job->mode_used;
            }
            if (finished && !error.empty()) {
              send(error_json(500, "generation failed: " + error));
              sink.write("data: [DONE]\n\n", 14);
              sink.done();
              return true;
            }
            const std::string& text = final_text;
            std::string delta;
            if (text.size() > sent.size() && text.compare(0, sent.size(), sent) == 0) {
              delta = text.substr(sent.size());
              sent = text;
            }
            if (!delta.empty() || draft || first) {
              json j = chunk(delta, nullptr);
              if (draft) {
                json pieces = json::array();
                const int32_t mask = engine->model().config.mask_token;
                for (int32_t t : canvas) {
                  if (mask >= 0 && t == mask) {
                    pieces.push_back(nullptr);
                  } else {
                    pieces.push_back(engine->generator().tokenizer() ? engine->generator().tokenizer()->decode({t})
                                                                     : std::string());
                  }
                }
                j["canvas"] = {{"mode", decode_mode_name(mode)}, {"step", steps}, {"passes", passes},
                               {"tokens", pieces}, {"noise", uniform && !finished}};
              }
              if (!send(j)) {
                job->cancel = true;
                return false;
              }
            }
            if (finished) {
              json last = chunk("", finish_reason);
              if (chat) last["choices"][0]["delta"] = json::object();
              if (!send(last)) return false;
              if (usage) {
                json u = {{"id", id},
                          {"object", chat ? "chat.completion.chunk" : "text_completion"},
                          {"created", created},
                          {"model", model_name},
                          {"choices", json::array()}};
                {
                  std::lock_guard<std::mutex> lock(job->mutex);
                  u["usage"] = usage_json(P, *job);
                }
                if (!send(u)) return false;
              }
              sink.write("data: [DONE]\n\n", 14);
              sink.done();
              return true;
            }
          }
        },
        [untrack](bool) { untrack(); });
  };
  // llama-server's /infill: input_prefix, input_suffix, n_predict (and the sampling fields of
  // /v1/completions); answers {"content": the filled text, ...}.
  http_->Post("/infill", [this, body_json](const httplib::Request& req, httplib::Response& res) {
    Engine* engine = engine_.load();
    if (!engine) return send_error(res, 503, "the model is still loading");
    json j;
    if (const std::string e = body_json(req, j); !e.empty()) return send_error(res, 400, e);
    json completion = json::object();
    for (const auto& [key, value] : j.items()) {
      if (key == "input_prefix") completion["prompt"] = value;
      else if (key == "input_suffix") completion["suffix"] = value;
      else if (key == "n_predict") completion["max_tokens"] = value;
      else if (key == "prompt" || key == "input_extra" || key == "stream") {
        if (!(value.is_null() || value == "" || value == false || (value.is_array() && value.empty())))
          return send_error(res, 400, "'" + key + "' is not supported by /infill here", key);
      } else {
        completion[key] = value;
      }
    }
    if (!completion.contains("prompt")) completion["prompt"] = "";
    if (!completion.contains("suffix")) completion["suffix"] = "";
    ApiRequest r;
    try {
      r = parse_api_request(completion.dump(), false);
    } catch (const ApiError& e) {
      return send_error(res, e.status, e.what(), e.param, e.code);
    }
    GenerationSettings& s = r.settings;
    s.text = r.prompt;
    auto job = std::make_shared<Job>();
    job->settings = s;
    if (!engine->submit(job)) {
      res.set_header("Retry-After", "1");
      return send_error(res, 503, "the server is busy; retry later", "", "server_busy");
    }
    {
      std::unique_lock<std::mutex> lock(job->mutex);
      job->changed.wait(lock, [&] { return job->finished; });
    }
    if (!job->error.empty()) return send_error(res, 400, job->error);
    std::string content;
    for (const std::string& f : job->fills) content += f;
    res.set_content(dump(json{{"content", content},
                              {"tokens_predicted", job->completion_tokens},
                              {"stop", true},
                              {"canvas", {{"mode", decode_mode_name(job->mode_used)}, {"decode_ms", job->decode_ms},
                                          {"seed", job->settings.sampling.seed}}}}),
                    "application/json");
  });
  http_->Post("/v1/completions",
              [handle](const httplib::Request& req, httplib::Response& res) { handle(req, res, false); });
  http_->Post("/v1/chat/completions",
              [handle](const httplib::Request& req, httplib::Response& res) { handle(req, res, true); });
}

}  // namespace canvas::serve
