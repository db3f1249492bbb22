// canvas serve with several models (ids, the "model" field, the defaults of chat and completions, the
// per-model cost model files), and what every stream chunk carries: the mode, and a draft's padding.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "serve/openai.h"
#include "serve/served_models.h"
#include "gguf_copy.h"
#include "serve_process.h"
#include "test_util.h"

using nlohmann::json;

namespace canvas {
namespace {

using test::post;
using test::ServerProcess;
using test::sse_events;

std::vector<serve::ServedModel> served(const std::vector<std::pair<std::string, bool>>& ids) {
  std::vector<serve::ServedModel> out;
  for (const auto& [id, chat] : ids) out.push_back({id, id + ".gguf", nullptr, chat});
  return out;
}

// The status and code of the ApiError pick_model throws ("" code and 0 when it picks a model).
std::pair<int, std::string> pick_error(const std::vector<serve::ServedModel>& models, const std::string& name,
                                       bool chat) {
  try {
    serve::pick_model(models, name, chat);
  } catch (const serve::ApiError& e) {
    return {e.status, e.code};
  }
  return {0, ""};
}

TEST(ServeModels, IdsAreFileStems) {
  EXPECT_EQ(serve::model_id_of("models/text-dg.gguf"), "text-dg");
  EXPECT_EQ(serve::model_id_of("/a/b/text-dg-chat.gguf"), "text-dg-chat");
  EXPECT_EQ(serve::model_id_of("ckpt/llada"), "llada");
  EXPECT_EQ(serve::model_id_of("ckpt/llada/"), "llada");
  EXPECT_EQ(serve::model_id_of("ckpt/llada/config.json"), "llada");
  EXPECT_TRUE(serve::is_chat_model_name("text-dg-chat"));
  EXPECT_TRUE(serve::is_chat_model_name("gemma-2b-it"));
  EXPECT_TRUE(serve::is_chat_model_name("Llama-3-8B-Instruct"));
  EXPECT_FALSE(serve::is_chat_model_name("text-dg"));
  EXPECT_FALSE(serve::is_chat_model_name("chat"));
  EXPECT_FALSE(serve::is_chat_model_name("edit"));
  EXPECT_THROW(serve::served_models_of({"x/a.gguf", "b.gguf", "y/a.gguf"}), Error);
  const std::vector<serve::ServedModel> two = serve::served_models_of({"x/a.gguf", "ckpt/b/config.json"});
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].id, "a");
  EXPECT_EQ(two[0].file_name, "a.gguf");
  EXPECT_EQ(two[1].id, "b");
  EXPECT_EQ(two[0].engine, nullptr);
}

TEST(ServeModels, RequestsPickTheirModel) {
  const auto two = served({{"base", false}, {"base-chat", true}});
  EXPECT_EQ(serve::pick_model(two, "", false).id, "base");      // completions: the first model
  EXPECT_EQ(serve::pick_model(two, "", true).id, "base-chat");  // chat: the first chat model
  EXPECT_EQ(serve::pick_model(two, "base-chat", false).id, "base-chat");
  EXPECT_EQ(serve::pick_model(two, "base.gguf", false).id, "base");  // the file name works too
  EXPECT_EQ(pick_error(two, "gpt-4o", false), std::make_pair(404, std::string("model_not_found")));
  // "default" is the request's default model (clients must send a name).
  EXPECT_EQ(serve::pick_model(two, "default", true).id, "base-chat");
  EXPECT_EQ(serve::pick_model(two, "default", false).id, "base");
  EXPECT_EQ(serve::pick_model(served({{"b", false}, {"default", false}}), "default", false).id, "default");
  EXPECT_EQ(pick_error(two, "base", true), std::make_pair(400, std::string("model_not_chat")));
  // Without a chat model, chat goes to the first model (its built-in format), named or not.
  const auto bases = served({{"a", false}, {"b", false}});
  EXPECT_EQ(serve::pick_model(bases, "", true).id, "a");
  EXPECT_EQ(serve::pick_model(bases, "b", true).id, "b");
  // One model answers whatever name a client sends (as before several models could be served).
  const auto one = served({{"only", false}});
  EXPECT_EQ(serve::pick_model(one, "gpt-4o", true).id, "only");
}

// -m values: a file or a checkpoint directory is one model; a folder of GGUFs stands for its models by
// name, tokenizer-only files listed apart; a folder with nothing to serve is an error.
TEST(ServeModels, ExpandModelPathsListsADirectorysModels) {
  test::TempDir dir;
  std::filesystem::create_directories(dir.path("models"));
  for (const char* name : {"text-masked.gguf", "text-ar.gguf", "tokenizer-kjv.gguf"})
    std::filesystem::create_symlink(test::source_path(std::string("models/") + name),
                                    dir.path(std::string("models/") + name));
  std::ofstream(dir.path("models/notes.txt")) << "not a model";
  std::filesystem::create_directories(dir.path("ckpt"));
  std::ofstream(dir.path("ckpt/config.json")) << "{}";
  const serve::ModelFiles files = serve::expand_model_paths({"a.gguf", dir.path("models"), dir.path("ckpt")});
  EXPECT_EQ(files.paths, (std::vector<std::string>{"a.gguf", dir.path("models/text-ar.gguf"),
                                                   dir.path("models/text-masked.gguf"), dir.path("ckpt")}));
  ASSERT_EQ(files.skipped.size(), 1u);
  EXPECT_EQ(files.skipped[0].path, dir.path("models/tokenizer-kjv.gguf"));
  EXPECT_EQ(files.skipped[0].reason, "holds no model (no general.architecture)");
  std::filesystem::create_directories(dir.path("empty"));
  EXPECT_THROW(serve::expand_model_paths({dir.path("empty")}), Error);
}

// Entries named *.gguf that cannot be served (an empty file, a dangling link, a folder, a FIFO) are each
// passed over with the reason, never the end of the whole serve while other models are fine, and a FIFO
// is never opened (it would block). With no model left, the error lists them.
TEST(ServeModels, BadDirectoryEntriesArePassedOverEachWithItsReason) {
  test::TempDir dir;
  const std::string models = dir.path("models");
  std::filesystem::create_directories(models + "/folder.gguf");
  std::ofstream(models + "/empty.gguf").flush();
  std::filesystem::create_symlink(dir.path("nowhere.gguf"), models + "/dangling.gguf");
  ASSERT_EQ(mkfifo((models + "/fifo.gguf").c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  try {
    serve::expand_model_paths({models});
    ADD_FAILURE() << "a directory without a model was served";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("holds no *.gguf model"), std::string::npos) << what;
    EXPECT_NE(what.find(models + "/empty.gguf: not a readable GGUF"), std::string::npos) << what;
  }
  std::filesystem::create_symlink(test::source_path("models/text-ar.gguf"), models + "/text-ar.gguf");
  const serve::ModelFiles files = serve::expand_model_paths({models});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(files.paths, std::vector<std::string>{models + "/text-ar.gguf"});
  ASSERT_EQ(files.skipped.size(), 4u);
  const std::vector<std::pair<std::string, std::string>> want = {
      {"dangling.gguf", "a link to nothing"},
      {"empty.gguf", "not a readable GGUF"},
      {"fifo.gguf", "not a regular file (a FIFO, socket or device)"},
      {"folder.gguf", "a directory, not a file"}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(files.skipped[i].path, models + "/" + want[i].first);
    EXPECT_EQ(files.skipped[i].reason.rfind(want[i].second, 0), 0u) << files.skipped[i].reason;
  }
  // The serve command says so for each, and serves the good model.
  ServerProcess server("-m " + models + " --parallel 1", "");
  EXPECT_NE(server.port(), 0) << server.log();
  EXPECT_NE(server.log().find("warning: " + models + "/fifo.gguf: not a regular file"), std::string::npos)
      << server.log();
}

// Issue 61 G: a *.gguf of a -m DIR that reads as a GGUF but fails to load (an unknown architecture, an
// eos id past its vocabulary) stopped the whole server. Each is passed over with a warning naming it, the
// others are served; with none left, serve refuses to start; a model named by -m itself is still an error.
TEST(ServeModelsCli, ModelsOfADirectoryThatFailToLoadArePassedOver) {
  test::TempDir dir;
  const std::string models = dir.path("models");
  std::filesystem::create_directories(models);
  test::gguf_with_keys(dir, "models/mamba.gguf", test::source_path("models/text-ar.gguf"),
                       {{"general.architecture", GgufValue::string("mamba")}});
  test::gguf_with_keys(dir, "models/bad-eos.gguf", test::source_path("models/text-ar.gguf"),
                       {{"tokenizer.ggml.eos_token_id", GgufValue::u32(1000000000)}});
  const auto none = test::run_canvas("serve --port 0 -m " + models);
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.output.find("no model could be loaded"), std::string::npos) << none.output;
  const auto named = test::run_canvas("serve --port 0 -m " + models + "/mamba.gguf");
  EXPECT_NE(named.exit_code, 0);
  EXPECT_EQ(named.output.find("not served"), std::string::npos) << named.output;
  std::filesystem::create_symlink(test::source_path("models/text-ar.gguf"), models + "/text-ar.gguf");
  ServerProcess server("-m " + models + " --parallel 1", "");
  ASSERT_NE(server.port(), 0) << server.log();
  auto list = server.client().Get("/v1/models");
  ASSERT_TRUE(list);
  ASSERT_EQ(list->status, 200);
  std::vector<std::string> ids;
  const json body = json::parse(list->body);
  for (const json& m : body["data"]) ids.push_back(m["id"]);
  EXPECT_EQ(ids, std::vector<std::string>{"text-ar"}) << list->body;
  for (const char* bad : {"mamba.gguf: ", "bad-eos.gguf: "})
    EXPECT_NE(server.log().find("warning: " + models + "/" + bad), std::string::npos) << server.log();
}

// A served model's engine gets the model's own tokenizer, chat format and cost-model file; a default mode
// the model cannot decode is refused.
TEST(ServeModels, StartServedModelGivesTheEngineTheModelsOwnParts) {
  test::TempDir dir;
  ThreadPool pool(1);
  const std::string path = test::source_path("models/text-ar.gguf");
  serve::ServeSetup setup;
  setup.engine.parallel = 1;
  setup.cost_model_file = dir.path("costs.json");
  setup.models = 2;
  serve::ServedModel served{"text-ar-chat", "text-ar-chat.gguf", nullptr, false};
  auto m = serve::start_served_model(TextModel::from(Model::load(path), path), path, served, setup, &pool);
  ASSERT_NE(served.engine, nullptr);
  EXPECT_EQ(served.engine, m->engine.get());
  EXPECT_TRUE(served.chat);  // by its name
  EXPECT_EQ(m->engine->options().tokenizer, &m->text.tokenizer);
  EXPECT_EQ(m->engine->options().chat, &m->text.chat);
  EXPECT_EQ(m->engine->options().cost_model_file, dir.path("costs.text-ar-chat.json"));
  m->engine->shutdown(true);

  setup.engine.default_mode = serve::DecodeMode::Diffusion;
  setup.cost_model_file.clear();
  serve::ServedModel plain{"text-ar", "text-ar.gguf", nullptr, false};
  try {
    serve::start_served_model(TextModel::from(Model::load(path), path), path, plain, setup, &pool);
    ADD_FAILURE() << "an AR model was served with --mode diffusion";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot decode by diffusion"), std::string::npos) << e.what();
  }
}

// --draft-datastore: each served model's engine gets the corpus tokenized by its own tokenizer.
TEST(ServeModels, DraftDatastoreIsTokenizedForEachModel) {
  test::TempDir dir;
  ThreadPool pool(1);
  const std::string path = test::source_path("models/text-ar.gguf"), corpus = dir.path("corpus.txt");
  std::ofstream(corpus) << "In the beginning God created the heaven and the earth.\n";
  serve::ServeSetup setup;
  setup.engine.parallel = 1;
  setup.datastore_file = corpus;
  serve::ServedModel served{"text-ar", "text-ar.gguf", nullptr, false};
  const TextModel text = TextModel::from(Model::load(path), path);
  const std::vector<int32_t> ids = text.tokenizer.encode("In the beginning God created the heaven and the earth.\n",
                                                         false, false);
  auto m = serve::start_served_model(TextModel::from(Model::load(path), path), path, served, setup, &pool);
  ASSERT_NE(m->engine->options().datastore, nullptr);
  EXPECT_EQ(m->engine->options().datastore->ids(), ids);
  m->engine->shutdown(true);
  setup.datastore_file = dir.path("missing.txt");
  serve::ServedModel again{"text-ar", "text-ar.gguf", nullptr, false};
  EXPECT_THROW(serve::start_served_model(TextModel::from(Model::load(path), path), path, again, setup, &pool), Error);
}

// The model a log line names for each request, in order.
std::vector<std::string> logged_models(const std::string& log) {
  std::vector<std::string> out;
  for (size_t at = 0; (at = log.find(" model=", at)) != std::string::npos; at += 7)
    out.push_back(log.substr(at + 7, log.find(' ', at + 7) - at - 7));
  return out;
}

TEST(ServeModelsCli, TwoModelsAreListedAndPickedByName) {
  ServerProcess server("-m " + test::source_path("models/text-ar.gguf") + " --parallel 1 --check-weights");
  ASSERT_NE(server.port(), 0) << server.log();
  // --check-weights scans each model's weights.
  const std::string log = server.log();
  size_t scans = 0;
  for (size_t at = 0; (at = log.find("--check-weights: ", at)) != std::string::npos; ++at) ++scans;
  EXPECT_EQ(scans, 2u) << log;
  EXPECT_NE(log.find("warning: no chat model"), std::string::npos) << log;  // chat falls back to a format
  auto models = server.client().Get("/v1/models");
  ASSERT_TRUE(models && models->status == 200);
  const json list = json::parse(models->body);
  EXPECT_EQ(list["object"], "list");
  ASSERT_EQ(list["data"].size(), 2u) << models->body;
  EXPECT_EQ(list["data"][0]["id"], "text-masked");
  EXPECT_EQ(list["data"][1]["id"], "text-ar");
  for (const json& m : list["data"]) {
    EXPECT_EQ(m["object"], "model");
    EXPECT_TRUE(m["created"].is_number_integer());
    EXPECT_EQ(m["owned_by"], "canvas");
    EXPECT_EQ(m["canvas"]["chat"], false);
  }
  EXPECT_EQ(list["data"][0]["canvas"]["modes"], json::array({"diffusion", "ar"}));

  // Each model answers under its id; without "model", completions go to the first.
  const std::string body = R"("prompt": "And God said", "max_tokens": 12, "mode": "ar", "seed": 1})";
  const json masked = test::post_json(server, "/v1/completions", R"({"model": "text-masked", )" + body);
  const json ar = test::post_json(server, "/v1/completions", R"({"model": "text-ar", )" + body);
  const json unnamed = test::post_json(server, "/v1/completions", "{" + body);
  EXPECT_EQ(masked["model"], "text-masked");
  EXPECT_EQ(ar["model"], "text-ar");
  EXPECT_EQ(unnamed["model"], "text-masked");
  EXPECT_EQ(unnamed["choices"][0]["text"], masked["choices"][0]["text"]);
  EXPECT_EQ(logged_models(server.log()), (std::vector<std::string>{"text-masked", "text-ar", "text-masked"}))
      << server.log();
  // The same prompt through the other model's weights: the text agrees with that model's own generate.
  const auto generated = test::run_canvas(
      "generate -m " + test::source_path("models/text-ar.gguf") + " -p 'And God said' -n 12 --mode ar --json",
      false);
  ASSERT_EQ(generated.exit_code, 0) << generated.output;
  EXPECT_EQ(ar["choices"][0]["text"], test::json_of(generated.output)["text"]);

  // An unknown model: 404 in OpenAI's shape.
  auto unknown =
      post(server, "/v1/chat/completions",
           R"({"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404) << unknown->body;
  const json error = json::parse(unknown->body)["error"];
  EXPECT_EQ(error["code"], "model_not_found");
  EXPECT_EQ(error["type"], "invalid_request_error");
  EXPECT_EQ(error["param"], "model");
  EXPECT_NE(error["message"].get<std::string>().find("text-masked, text-ar"), std::string::npos) << error;

  // The helpers take the model too; /health counts over both and lists each.
  auto props = server.client().Get("/props?model=text-ar");
  ASSERT_TRUE(props && props->status == 200);
  EXPECT_EQ(json::parse(props->body)["model"], "text-ar");
  EXPECT_EQ(json::parse(props->body)["models"], json::array({"text-masked", "text-ar"}));
  auto no_props = server.client().Get("/props?model=nope");
  ASSERT_TRUE(no_props);
  EXPECT_EQ(no_props->status, 404);
  const json tokens = test::post_json(server, "/tokenize", R"({"content": "And", "model": "text-ar"})");
  EXPECT_FALSE(tokens["tokens"].empty());
  auto health = server.client().Get("/health");
  ASSERT_TRUE(health && health->status == 200);
  const json h = json::parse(health->body);
  ASSERT_EQ(h["models"].size(), 2u);
  EXPECT_EQ(h["models"][1]["model"], "text-ar");
  EXPECT_EQ(h["models"][0]["parallel"], 1);  // --parallel applies to each model
  EXPECT_EQ(h["models"][1]["parallel"], 1);
  EXPECT_EQ(h["batched_passes"].get<int64_t>(), h["models"][0]["batched_passes"].get<int64_t>() +
                                                    h["models"][1]["batched_passes"].get<int64_t>());
  EXPECT_GT(h["models"][1]["batched_passes"].get<int64_t>(), 0);

  // /metrics: the totals, and each model's own series.
  auto metrics = server.client().Get("/metrics");
  ASSERT_TRUE(metrics && metrics->status == 200);
  auto tokens_of = [](const json& answer) { return answer["usage"]["completion_tokens"].get<int64_t>(); };
  const std::string masked_tokens = std::to_string(tokens_of(masked) + tokens_of(unnamed));
  const std::string all_tokens = std::to_string(tokens_of(masked) + tokens_of(unnamed) + tokens_of(ar));
  for (const std::string& line :
       {std::string("canvas_model_generations_total{model=\"text-masked\"} 2\n"),
        std::string("canvas_model_generations_total{model=\"text-ar\"} 1\n"),
        "canvas_model_tokens_generated_total{model=\"text-masked\"} " + masked_tokens + "\n",
        "canvas_model_tokens_generated_total{model=\"text-ar\"} " + std::to_string(tokens_of(ar)) + "\n",
        std::string("canvas_model_requests_running{model=\"text-ar\"} 0\n"),
        "canvas_tokens_generated_total " + all_tokens + "\n"})
    EXPECT_NE(metrics->body.find(line), std::string::npos) << line << " in\n" << metrics->body;
}

// A server of one model answers any "model" (clients written for other servers send their own names):
// the answer repeats the name, the log line names the model that ran.
TEST(ServeModelsCli, OneModelAnswersAnyName) {
  ServerProcess server("--parallel 1");
  ASSERT_NE(server.port(), 0) << server.log();
  const json j = test::post_json(server, "/v1/chat/completions",
                                 R"({"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}],
                                     "max_tokens": 4, "mode": "ar"})");
  EXPECT_EQ(j["model"], "gpt-4o");
  EXPECT_EQ(logged_models(server.log()), std::vector<std::string>{"text-masked"}) << server.log();
}

// Without -m: the shipped base and chat models; chat goes to the chat model, completions to the base, and
// chat naming the base model is refused (it has no chat template) rather than answered badly.
TEST(ServeModelsCli, DefaultServesTheBaseAndChatModels) {
  ServerProcess server("--parallel 1 --mode ar", "");
  ASSERT_NE(server.port(), 0) << server.log();
  auto models = server.client().Get("/v1/models");
  ASSERT_TRUE(models && models->status == 200);
  const json list = json::parse(models->body);
  ASSERT_EQ(list["data"].size(), 2u) << models->body;
  EXPECT_EQ(list["data"][0]["id"], "text-dg");
  EXPECT_EQ(list["data"][0]["canvas"]["chat"], false);
  EXPECT_EQ(list["data"][1]["id"], "text-dg-chat");
  EXPECT_EQ(list["data"][1]["canvas"]["chat"], true);
  EXPECT_EQ(server.log().find("warning: no chat model"), std::string::npos) << server.log();

  const json chat = test::post_json(server, "/v1/chat/completions",
                                    R"({"messages": [{"role": "user", "content": "Who made the light?"}],
                                        "max_tokens": 8})");
  EXPECT_EQ(chat["model"], "text-dg-chat");
  EXPECT_EQ(chat["canvas"]["mode"], "ar");
  const json completion =
      test::post_json(server, "/v1/completions", R"({"prompt": "And God said", "max_tokens": 8})");
  EXPECT_EQ(completion["model"], "text-dg");
  EXPECT_EQ(completion["canvas"]["mode"], "ar");  // --mode applies to each model
  EXPECT_EQ(logged_models(server.log()), (std::vector<std::string>{"text-dg-chat", "text-dg"}))
      << server.log();

  auto refused =
      post(server, "/v1/chat/completions",
           R"({"model": "text-dg", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400) << refused->body;
  const json error = json::parse(refused->body)["error"];
  EXPECT_EQ(error["code"], "model_not_chat");
  EXPECT_NE(error["message"].get<std::string>().find("text-dg-chat"), std::string::npos) << error;
}

// -m DIR serves the directory's *.gguf models by name; two files with one stem are refused at start.
TEST(ServeModelsCli, DirectoryOfModelsAndDuplicateIds) {
  test::TempDir dir;
  std::filesystem::create_directories(dir.path("models"));
  std::filesystem::create_symlink(test::source_path("models/text-masked.gguf"),
                                  dir.path("models/text-masked.gguf"));
  std::filesystem::create_symlink(test::source_path("models/text-ar.gguf"), dir.path("models/text-ar.gguf"));
  // A tokenizer-only GGUF is no model: passed over.
  std::filesystem::create_symlink(test::source_path("models/tokenizer-kjv.gguf"),
                                  dir.path("models/tokenizer-kjv.gguf"));
  const auto listed = [&] {
    ServerProcess server("-m " + dir.path("models") + " --parallel 1", "");
    EXPECT_NE(server.port(), 0) << server.log();
    auto models = server.client().Get("/v1/models");
    std::vector<std::string> ids;
    if (models && models->status == 200) {
      const json list = json::parse(models->body);
      for (const json& m : list["data"]) ids.push_back(m["id"]);
    }
    return ids;
  }();
  EXPECT_EQ(listed, (std::vector<std::string>{"text-ar", "text-masked"}));

  std::filesystem::create_directories(dir.path("other"));
  std::filesystem::create_symlink(test::source_path("models/text-ar.gguf"),
                                  dir.path("other/text-masked.gguf"));
  const auto duplicate = test::run_canvas("serve --port 0 -m " + dir.path("models") + " -m " +
                                          dir.path("other/text-masked.gguf"));
  EXPECT_NE(duplicate.exit_code, 0);
  EXPECT_NE(duplicate.output.find("two models have the id 'text-masked'"), std::string::npos)
      << duplicate.output;

  std::filesystem::create_directories(dir.path("empty"));
  const auto empty = test::run_canvas("serve --port 0 -m " + dir.path("empty"));
  EXPECT_NE(empty.exit_code, 0);
  EXPECT_NE(empty.output.find("holds no *.gguf model"), std::string::npos) << empty.output;
}

// --cost-model FILE with several models: one file per model, the id before the extension, each read back
// after a restart.
TEST(ServeModelsCli, CostModelFilePerModel) {
  test::TempDir dir;
  const std::string file = dir.path("costs.json");
  const std::string args =
      "-m " + test::source_path("models/text-ar.gguf") + " --parallel 1 --cost-model " + file;
  {
    ServerProcess server(args);
    ASSERT_NE(server.port(), 0) << server.log();
    for (const char* id : {"text-masked", "text-ar"})
      EXPECT_NE(server.log().find(std::string("cost model of ") + id + " measured and written to " +
                                  dir.path(std::string("costs.") + id + ".json")),
                std::string::npos)
          << server.log();
  }
  EXPECT_FALSE(std::filesystem::exists(file));
  EXPECT_NE(json::parse(test::read_text(dir.path("costs.text-ar.json")))["key"].get<std::string>().find(
                "text-ar.gguf"),
            std::string::npos);
  ServerProcess again(args);
  ASSERT_NE(again.port(), 0) << again.log();
  for (const char* id : {"text-masked", "text-ar"})
    EXPECT_NE(again.log().find(std::string("cost model of ") + id + " read from"), std::string::npos)
        << again.log();
}

// Every chunk of a stream (deltas, the last one, the usage one) names the mode, as canvas.mode of the
// non-streamed answer does.
TEST(ServeModelsCli, EveryStreamChunkCarriesTheMode) {
  ServerProcess server("--parallel 1");
  ASSERT_NE(server.port(), 0) << server.log();
  for (const char* mode : {"ar", "diffusion"})
    for (const bool chat : {false, true}) {
      const std::string input =
          chat ? R"("messages": [{"role": "user", "content": "Hi"}])" : R"("prompt": "And God said")";
      auto res = post(server, chat ? "/v1/chat/completions" : "/v1/completions",
                      "{" + input + R"(, "max_tokens": 8, "stream": true, "mode": ")" + mode +
                          R"(", "stream_options": {"include_usage": true}})");
      ASSERT_TRUE(res && res->status == 200);
      const auto events = sse_events(res->body);
      ASSERT_GE(events.size(), 4u) << res->body;  // a delta or more, the last, the usage, [DONE]
      EXPECT_EQ(events.back(), "[DONE]");
      for (size_t i = 0; i + 1 < events.size(); ++i) {
        const json e = json::parse(events[i]);
        ASSERT_TRUE(e.contains("canvas")) << events[i];
        EXPECT_EQ(e["canvas"]["mode"], mode) << events[i];
        EXPECT_FALSE(e["canvas"].contains("tokens")) << "no draft without canvas_draft: " << events[i];
      }
    }
}

// With canvas_draft, each draft's "pad" lists the positions holding an id that ends the text (end of turn,
// EOS, padding): in the last draft they start where the text's tokens end. Noise drafts have none.
TEST(ServeModelsCli, DraftsMarkTheirPadding) {
  ServerProcess server("--parallel 1", "models/text-dg-chat.gguf");
  ASSERT_NE(server.port(), 0) << server.log();
  {
    const char* mode = "diffusion";  // the chat model's diffusion answers end within the canvas
    const std::string body = std::string(R"({"messages": [{"role": "user", "content": "Who made the light?"}],
                                              "max_tokens": 32, "seed": 7, "mode": ")") +
                             mode + "\"";
    const json whole = test::post_json(server, "/v1/chat/completions", body + "}");
    ASSERT_EQ(whole["canvas"]["finish"], "eos") << "the answer ends itself within 32 tokens: " << whole;
    const size_t text_tokens = whole["canvas"]["tokens"].size();
    auto res = post(server, "/v1/chat/completions", body + R"(, "stream": true, "canvas_draft": true})");
    ASSERT_TRUE(res && res->status == 200);
    json last;
    int noise_drafts = 0;
    for (const std::string& event : sse_events(res->body)) {
      if (event == "[DONE]") continue;
      const json e = json::parse(event);
      if (!e["canvas"].contains("tokens")) continue;
      const json& draft = e["canvas"];
      ASSERT_TRUE(draft["pad"].is_array()) << event;
      if (draft["noise"].get<bool>()) {
        ++noise_drafts;
        EXPECT_TRUE(draft["pad"].empty()) << event;
        continue;
      }
      for (const json& i : draft["pad"]) {
        ASSERT_LT(i.get<size_t>(), draft["tokens"].size());
        EXPECT_FALSE(draft["tokens"][i.get<size_t>()].is_null())
            << "a masked position is not padding: " << event;
      }
      last = draft;
    }
    ASSERT_FALSE(last.is_null()) << res->body;
    ASSERT_FALSE(last["pad"].empty()) << last;
    EXPECT_EQ(last["pad"][0].get<size_t>(), text_tokens) << last;
    // Past the first end, the canvas is padding the text does not include (no text tokens after it).
    std::string committed;
    for (size_t i = 0; i < text_tokens; ++i) committed += last["tokens"][i].get<std::string>();
    EXPECT_EQ(committed, whole["choices"][0]["message"]["content"]) << last;
    EXPECT_GT(noise_drafts, 0);
  }
}

// Verify mode's drafts: each streamed canvas is the kept tokens, then (from canvas.drafts on) the drafts
// being checked; the kept part only grows and is the text's own tokens; the last canvas has no drafts.
TEST(ServeModelsCli, VerifyDraftsSayWhereTheKeptTokensEnd) {
  ServerProcess server("--parallel 1", "models/text-dg.gguf");
  ASSERT_NE(server.port(), 0) << server.log();
  for (const bool overlap : {false, true}) {
    const std::string body = std::string(R"({"prompt": "And God said", "max_tokens": 24, "temperature": 0,
                                              "mode": "verify", "stream": true, "canvas_draft": true, "overlap": )") +
                             (overlap ? "true}" : "false}");
    auto res = post(server, "/v1/completions", body);
    ASSERT_TRUE(res && res->status == 200);
    std::vector<json> canvases;
    for (const std::string& event : sse_events(res->body)) {
      if (event == "[DONE]") continue;
      const json e = json::parse(event);
      if (e["canvas"].contains("tokens")) canvases.push_back(e["canvas"]);
    }
    // The stream sends the newest canvas at each wake-up of the connection, so a loaded machine merges steps:
    // at least one canvas with drafts and the finished one.
    ASSERT_GE(canvases.size(), 2u) << res->body;
    const json& last = canvases.back();
    EXPECT_FALSE(last.contains("drafts")) << "the finished canvas has no drafts: " << last;
    ASSERT_EQ(last["tokens"].size(), 24u) << last;
    int64_t kept = 0, with_drafts = 0;
    for (const json& c : canvases) {
      if (!c.contains("drafts")) continue;
      ++with_drafts;
      const int64_t from = c["drafts"].get<int64_t>();
      EXPECT_GE(from, kept) << c;
      EXPECT_GT(int64_t(c["tokens"].size()), from) << "drafts follow the kept tokens: " << c;
      for (int64_t i = 0; i < from; ++i) EXPECT_EQ(c["tokens"][size_t(i)], last["tokens"][size_t(i)]) << c;
      kept = from;
    }
    EXPECT_GE(with_drafts, 1) << res->body;
  }
}

}  // namespace
}  // namespace canvas
