// Model ids and the choice of a request's model in canvas serve.
#include "serve/served_models.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "core/error.h"
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

void check_unique_ids(const std::vector<ServedModel>& models, const std::vector<std::string>& paths) {
  for (size_t i = 0; i < models.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      check(models[i].id != models[j].id,
            "two models have the id '" + models[i].id + "' (" + paths[j] + " and " + paths[i] +
                "): requests pick a model by its file's stem, so serve files with different names");
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
  if (name.empty()) return chat && chat_model != models.end() ? *chat_model : models.front();
  const auto named = std::find_if(models.begin(), models.end(),
                                  [&](const ServedModel& m) { return m.id == name || m.file_name == name; });
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
