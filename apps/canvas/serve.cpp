// canvas serve: the OpenAI-compatible HTTP server (option parsing, model loading, signals).
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "core/cpu.h"
#include "core/error.h"
#include "decode/text_model.h"
#include "device.h"
#include "model/model.h"
#include "serve/engine.h"
#include "serve/http_server.h"
#include "serve/shutdown.h"
#include "shipped_models.h"

namespace canvas::cli {

namespace {

const Command kServe{
    "serve",
    "canvas serve [-m MODEL]... [--host 127.0.0.1] [--port 8080] [--parallel N] [--queue N]\n"
    "                    [--mode auto|diffusion|ar|verify] [--api-key KEY] [--allowed-hosts NAMES]\n"
    "                    [--cors ORIGIN] [--max-connections N] [--draft-datastore FILE]",
    R"(Serves models over HTTP with OpenAI's API: POST /v1/completions, POST /v1/chat/completions (messages
in the model's chat format, as canvas chat renders them), GET /v1/models, GET /health (200 when ready, 503 while
loading or stopping), and a web page at / that draws the canvas live as it is denoised. The decoding
steps of all running requests share one batched forward pass; requests join and leave between steps.
Several models: -m once per model, or -m DIR for every *.gguf in DIR (a directory holding config.json is
one safetensors model); without -m, models/text-dg.gguf and models/text-dg-chat.gguf. A model's id is its
file's stem (text-dg); a request's "model" picks one (unknown: 404 model_not_found; with one model any
name is accepted). Without "model", chat goes to the first chat model (a chat template of its own, or an
id ending in -chat, -it or -instruct), completions to the first model; chat naming a model that is not a
chat model while one is served is a 400. Each model has its own engine (--parallel, --queue, --mode,
--check-weights, --device, --cpu-moe, --cost-model and --draft-datastore apply to each); the compute threads
are shared.
Requests take OpenAI's fields (max_tokens, temperature, top_p, seed, stop, n = 1, stream,
stream_options.include_usage) and canvas's knobs (steps, block_length, threshold, entropy_bound,
cache, mode, canvas_draft). docs/serving.md has the details and measurements.)",
    {
        {"-m,--model", "MODEL",
         "GGUF file, safetensors directory, or a directory of *.gguf files; repeat it to\n"
         "serve several (default: models/text-dg.gguf and models/text-dg-chat.gguf)",
         true},
        {"--host", "HOST", "address to listen on (default 127.0.0.1: this machine only)"},
        {"--port", "N", "TCP port (default 8080; 0: any free port, printed at start)"},
        {"--device", "NAME", kDeviceHelp},
        {"--cpu-moe", "", kCpuMoeHelp},
        {"--n-cpu-moe", "N", kNCpuMoeHelp},
        {"--check-weights", "", kCheckWeightsHelp},
        {"--parallel", "N",
         "requests decoded at once, their steps batched (default: 4, or 2 x the cores if more)"},
        {"--queue", "N", "requests waiting for a slot beyond those; more get 503 + Retry-After (default 64)"},
        {"--mode", "MODE",
         "auto (default for models with both modes: diffusion or AR per request, by a cost\n"
         "model measured at start and the current load) | diffusion | ar | verify (the\n"
         "decoder drafts, AR verifies: AR's text). A request's\n"
         "\"mode\" field overrides it."},
        {"--cost-model", "FILE",
         "keep auto's cost model in FILE: read when it was measured for this model file,\n"
         "thread count, SIMD level and device; measured (medians of 9 passes) and written\n"
         "otherwise, so that auto routes a request the same way after a restart. With\n"
         "several models, one file each: the model's id before FILE's extension\n"
         "(costs.json -> costs.text-dg.json)"},
        {"--draft-datastore", "FILE",
         "verify: datastore drafts from the text in FILE for every request (as generate's\n"
         "--draft-datastore: tokenized by each model's tokenizer, the ids cached)"},
        {"--api-key", "KEY", "require \"Authorization: Bearer KEY\" on /v1/* (401 otherwise)"},
        {"--allowed-hosts", "NAMES",
         "comma-separated Host names accepted beside the bound address (\"*\": any); without\n"
         "--api-key other Host headers get 403 (DNS rebinding)",
         true},
        {"--cors", "ORIGIN",
         "let browser pages of ORIGIN (e.g. http://localhost:3000; \"*\": any; comma-separated)\n"
         "call the server; other cross-origin requests get 403 (default: none)",
         true},
        {"--max-connections", "N",
         "open connections (default 1024, cut to the file limit); at the limit a new one\n"
         "replaces the connection waiting longest"},
    },
    "SIGTERM or SIGINT: new and queued requests get 503 + Retry-After, running ones may finish for 4 s,\n"
    "then are cancelled (finish_reason \"cancelled\"); the process exits 0 within 5 s.\n"
    "docs/serving.md: connection limits and deadlines, threads, the Host / Origin rules."};

// The models of -m (expand_model_paths: a directory stands for its GGUF models); without -m, the shipped
// base and chat models.
serve::ModelFiles model_paths(const Args& args) {
  if (!args.has("model")) {
    serve::ModelFiles files;
    files.paths = {shipped_model_path(kDefaultTextModel, "canvas serve"),
                   shipped_model_path(kDefaultChatModel, "canvas serve")};
    files.listed = {false, false};
    return files;
  }
  serve::ModelFiles files = serve::expand_model_paths(args.get_all("model"));
  for (const serve::ModelFiles::Skipped& s : files.skipped)
    std::fprintf(stderr, "canvas serve: warning: %s: %s; not served\n", s.path.c_str(), s.reason.c_str());
  return files;
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  if (print_help_if_asked(kServe, argc, argv)) return 0;
  Args args(kServe, argc, argv, 2);
  args.check_no_positional();
  const serve::ModelFiles listed_files = model_paths(args);
  const std::vector<std::string>& model_files = listed_files.paths;
  std::vector<serve::ServedModel> served_models = serve::served_models_of(model_files);
  const int64_t port = args.get_int("port", 8080);
  check(port >= 0 && port <= 65535, "--port must be between 0 and 65535");
  serve::ServeSetup setup;
  setup.cores = usable_cpus();
  setup.models = model_files.size();
  const DeviceChoice device = device_choice(args);
  setup.device = device_label(device);  // the cost models' key
  serve::EngineOptions& engine_options = setup.engine;
  engine_options.parallel = args.get_int("parallel", std::max<int64_t>(4, 2 * setup.cores));
  engine_options.queue = args.get_int("queue", 64);
  check(engine_options.parallel >= 1 && engine_options.parallel <= 1024,
        "--parallel must be between 1 and 1024");
  check(engine_options.queue >= 0 && engine_options.queue <= 100000, "--queue must be between 0 and 100000");
  engine_options.default_mode = serve::parse_decode_mode(args.get("mode", "auto"));
  setup.cost_model_file = args.get("cost-model", "");
  check(!args.has("cost-model") || !setup.cost_model_file.empty(), "--cost-model needs a file name");
  setup.datastore_file = args.get("draft-datastore", "");
  check(!args.has("draft-datastore") || !setup.datastore_file.empty(), "--draft-datastore needs a file name");
  check(!args.has("api-key") || !args.get("api-key", "").empty(), "--api-key must not be empty");

  const auto say = [](const std::string& line) { std::fprintf(stderr, "canvas serve: %s\n", line.c_str()); };
  // Signals go to one thread that waits for them (blocked here before any other thread starts).
  serve::SignalWaiter& signal_waiter = serve::SignalWaiter::start(say);
  signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a signal

  serve::ServerOptions options;
  options.host = args.get("host", "127.0.0.1");
  options.port = int(port);
  options.api_key = args.get("api-key", "");
  const int64_t max_connections = args.get_int("max-connections", 1024);
  check(max_connections >= 1 && max_connections <= 1000000,
        "--max-connections must be between 1 and 1000000");
  options.max_connections = size_t(max_connections);
  options.allowed_hosts = split_lists(args.get_all("allowed-hosts"));
  options.cors_origins = split_lists(args.get_all("cors"));
  for (const std::string& origin : options.cors_origins)
    check(origin == "*" || origin.find("://") != std::string::npos,
          "--cors takes origins such as http://localhost:3000 (scheme://host[:port]) or *, not '" + origin +
              "'");
  serve::HttpServer server(options);
  std::string error;
  check(server.bind(error), error);
  std::thread http([&] { server.serve(); });
  std::string loading;
  for (const std::string& path : model_files) loading += (loading.empty() ? "" : ", ") + path;
  std::fprintf(stderr, "canvas serve: listening on http://%s:%d/ (loading %s; at most %zu connections)\n",
               options.host.c_str(), server.port(), loading.c_str(), server.max_connections());
  if (options.api_key.empty() && !serve::is_loopback_name(options.host))
    std::fprintf(stderr,
                 "canvas serve: warning: no --api-key, and %s is reachable beyond this machine: anyone who "
                 "can reach it can use the model\n",
                 options.host.c_str());

  // One pool of compute threads for every model's passes (callers on several threads take turns).
  auto pool = std::make_unique<ThreadPool>(0);
  std::atomic<bool> stopping{false};  // set at SIGTERM / SIGINT (outlives the models that read it)
  std::vector<std::unique_ptr<serve::ServedText>> loaded_models;
  auto stop_engines = [&] {
    for (auto& m : loaded_models)
      if (m->engine) m->engine->shutdown(true);
    loaded_models.clear();
  };
  try {
    std::vector<bool> served_ok(model_files.size(), false);
    for (size_t i = 0; i < model_files.size(); ++i) {
      const std::string& path = model_files[i];
      serve::ServedModel& served = served_models[i];
      std::unique_ptr<serve::ServedText> m;
      try {
        Model loaded = Model::load(path);
        if (args.has("check-weights")) check_all_weights(loaded, path);
        use_device(loaded, device);
        TextModel text = TextModel::from(std::move(loaded), path);
        text.chat.cancel = &stopping;  // a chat template render in flight stops at SIGTERM
        m = serve::start_served_model(std::move(text), path, served, setup, pool.get());
      } catch (const std::exception& e) {
        if (!listed_files.listed[i]) throw;  // a model named by -m itself is an error; one of a -m DIR is passed over
        const std::string why = e.what();  // load errors name the file; others get it put first
        std::fprintf(stderr, "canvas serve: warning: %s; not served\n",
                     (why.find(path) == std::string::npos ? path + ": " + why : why).c_str());
        continue;
      }
      served_ok[i] = true;
      const ModelConfig& c = m->text.model.config;
      const serve::Engine& engine = *m->engine;
      const std::string& cost_file = engine.options().cost_model_file;
      std::fprintf(
          stderr,
          "canvas serve: loaded %s (%s%s), --parallel %lld, --queue %lld, --mode %s; cost model: %s\n",
          served.id.c_str(), c.arch.c_str(), served.chat ? ", chat" : "", (long long)engine_options.parallel,
          (long long)engine_options.queue, serve::decode_mode_name(engine_options.default_mode),
          engine.cost_model().describe().c_str());
      if (!cost_file.empty())
        std::fprintf(stderr, "canvas serve: cost model of %s %s %s\n", served.id.c_str(),
                     engine.cost_model_stored()    ? "read from"
                     : engine.cost_model_written() ? "measured and written to"
                                                   : "measured (the file is left as it was:",
                     (cost_file + (engine.cost_model_stored() || engine.cost_model_written() ? "" : ")")).c_str());
      loaded_models.push_back(std::move(m));
    }
    check(!loaded_models.empty(), "no model could be loaded (each was passed over: see the warnings above)");
    for (size_t i = served_ok.size(); i-- > 0;)
      if (!served_ok[i]) served_models.erase(served_models.begin() + std::ptrdiff_t(i));
    std::string ids;
    for (const serve::ServedModel& m : served_models) ids += (ids.empty() ? "" : ", ") + m.id;
    if (std::none_of(served_models.begin(), served_models.end(),
                     [](const serve::ServedModel& m) { return m.chat; }))
      std::fprintf(
          stderr,
          "canvas serve: warning: no chat model (none has a chat template of its own or a -chat, -it or "
          "-instruct name): /v1/chat/completions renders messages in the built-in %s format\n",
          loaded_models.front()->text.chat.name.c_str());
    server.set_models(served_models);
    const std::string received = signal_waiter.ready_then_wait([&] { say("ready: " + ids); });
    stopping = true;
    const serve::ShutdownDeadlines deadlines;
    std::fprintf(stderr, "canvas serve: %s: finishing running requests (cancelled after %.0f s)\n",
                 received.c_str(), deadlines.finish_ms / 1000.0);
    serve::shut_down(server, http, stop_engines, deadlines, say);
  } catch (...) {
    server.stop(0, 0);
    http.join();
    stop_engines();
    throw;
  }
  std::fprintf(stderr, "canvas serve: stopped\n");
  return 0;
}

}  // namespace canvas::cli
