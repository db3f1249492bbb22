// Model ids and the choice of a request's model in canvas serve.
#include "serve/served_models.h"

#include <algorithm>
#include <cctype>
#include <ctime>
#include <filesystem>

#include "core/error.h"
#include "io/gguf.h"
#include "decode/cost_model.h"
#include "decode/datastore.h"
#include "decode/default_sampling.h"
#include "serve/openai.h"

namespace canvas::serve {

namespace fs = std::filesystem;

std::string model_id_of(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "ckpt/"
  if (p.filename() == "config.json") p = p.parent_path();
  if (p.filename() == "." || p.filename().empty()) p = fs::absolute(p).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  return p.extension() == ".gguf" ? p.stem().string() : p.filename().string();
}

bool is_chat_model_name(const std::string& id) {
  std::string lower = id;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  for (const std::string suffix : {"-chat", "-it", "-instruct"})
    if (lower.size() > suffix.size() &&
        lower.compare(lower.size() - suffix.size(), suffix.size(), suffix) == 0)
      return true;
  return false;
}

ModelFiles expand_model_paths(const std::vector<std::string>& values) {
  namespace fs = std::filesystem;
  ModelFiles files;
  for (const std::string& value : values) {
    std::error_code ec;
    if (!fs::is_directory(value, ec) || fs::exists(fs::path(value) / "config.json", ec)) {
      files.paths.push_back(value);
      files.listed.push_back(false);
      continue;
    }
    std::vector<std::string> found;
    std::vector<ModelFiles::Skipped> skipped;
    for (const fs::directory_entry& entry : fs::directory_iterator(value, ec)) {
      if (entry.path().extension() != ".gguf") continue;
      const std::string path = entry.path().string();
      // One bad entry is passed over with its reason, never the end of the whole serve; a FIFO or a device is
      // not opened (it could block).
      std::error_code status_ec;
      const fs::file_status status = fs::status(entry.path(), status_ec);
      std::string reason;
      if (!fs::exists(status))
        reason = entry.is_symlink(status_ec) ? "a link to nothing" : "cannot be read";
      else if (fs::is_directory(status))
        reason = "a directory, not a file";
      else if (!fs::is_regular_file(status))
        reason = "not a regular file (a FIFO, socket or device)";
      else {
        try {
          if (GgufFile::open(path)->get_string("general.architecture", "").empty())
            reason = "holds no model (no general.architecture)";
        } catch (const std::exception& e) {
          reason = std::string("not a readable GGUF: ") + e.what();
        }
      }
      if (reason.empty())
        found.push_back(path);
      else
        skipped.push_back({path, reason});
    }
    check(!ec, "-m " + value + ": cannot list the directory: " + ec.message());
    std::sort(skipped.begin(), skipped.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
    std::string passed_over;
    for (const ModelFiles::Skipped& s : skipped) passed_over += "; " + s.path + ": " + s.reason;
    check(!found.empty(), "-m " + value + ": the directory holds no *.gguf model and no config.json" + passed_over);
    std::sort(found.begin(), found.end());
    files.paths.insert(files.paths.end(), found.begin(), found.end());
    files.listed.insert(files.listed.end(), found.size(), true);
    files.skipped.insert(files.skipped.end(), skipped.begin(), skipped.end());
  }
  return files;
}

std::unique_ptr<ServedText> start_served_model(TextModel text, const std::string& path, ServedModel& served,
                                               const ServeSetup& setup, ThreadPool* pool) {
  auto m = std::make_unique<ServedText>(ServedText{std::move(text), nullptr});
  EngineOptions options = setup.engine;
  options.tokenizer = &m->text.tokenizer;
  options.chat = &m->text.chat;
  options.defaults = m->text.defaults;
  options.sampling = default_sampling(m->text.model, path).params;
  if (!setup.cost_model_file.empty()) {
    options.cost_model_file = cost_model_file_for(setup.cost_model_file, served.id, setup.models);
    options.cost_model_key = cost_model_key(path, setup.cores, setup.device);
  }
  if (!setup.datastore_file.empty())
    options.datastore = load_datastore_reporting(setup.datastore_file, m->text.tokenizer, "canvas serve", false);
  m->engine = std::make_unique<Engine>(m->text.model, pool, options);
  const std::string arch = m->text.model.config.arch;
  check(m->engine->has_diffusion() || options.default_mode != DecodeMode::Diffusion,
        "--mode diffusion: model " + served.id + " ('" + arch + "') cannot decode by diffusion");
  check(m->engine->has_ar() || options.default_mode != DecodeMode::Ar,
        "--mode ar: model " + served.id + " ('" + arch + "') cannot decode autoregressively");
  served.engine = m->engine.get();
  served.chat = m->text.chat.model_has_template || is_chat_model_name(served.id);
  served.created = int64_t(std::time(nullptr));
  return m;
}

std::vector<ServedModel> served_models_of(const std::vector<std::string>& paths) {
  std::vector<ServedModel> models;
  for (const std::string& path : paths) {
    ServedModel m;
    m.id = model_id_of(path);
    m.file_name = std::filesystem::path(path).filename().string();
    models.push_back(m);
  }
  for (size_t i = 0; i < models.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      check(models[i].id != models[j].id,
            "two models have the id '" + models[i].id + "' (" + paths[j] + " and " + paths[i] +
                "): requests pick a model by its file's stem, so serve files with different names");
  return models;
}

namespace {

std::string id_list(const std::vector<ServedModel>& models, bool chat_only) {
  std::string out;
  for (const ServedModel& m : models)
    if (!chat_only || m.chat) out += (out.empty() ? "" : ", ") + m.id;
  return out;
}

}  // namespace

const ServedModel& pick_model(const std::vector<ServedModel>& models, const std::string& name, bool chat) {
  check(!models.empty(), "pick_model: no models");
  const auto chat_model =
      std::find_if(models.begin(), models.end(), [](const ServedModel& m) { return m.chat; });
  const auto named = std::find_if(models.begin(), models.end(),
                                  [&](const ServedModel& m) { return m.id == name || m.file_name == name; });
  // No name, or "default" (unless a model is called that): the request's default model.
  if (name.empty() || (name == "default" && named == models.end()))
    return chat && chat_model != models.end() ? *chat_model : models.front();
  if (named == models.end()) {
    if (models.size() == 1) return models.front();
    throw ApiError(404,
                   "the model '" + name + "' does not exist; this server serves " + id_list(models, false) +
                       " (GET /v1/models)",
                   "model", "model_not_found");
  }
  if (chat && !named->chat && chat_model != models.end())
    throw ApiError(
        400,
        "the model '" + named->id +
            "' has no chat template (it is not a chat model); send its prompts to /v1/completions, "
            "or chat with " +
            id_list(models, true),
        "model", "model_not_chat");
  return *named;
}

}  // namespace canvas::serve
