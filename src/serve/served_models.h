// The models one canvas serve answers with: their ids, which one a request's "model" field picks, and
// where chat and completions go when it names none.
#pragma once
#include <string>
#include <vector>

#include <memory>

#include "core/thread_pool.h"
#include "decode/text_model.h"
#include "serve/engine.h"

namespace canvas::serve {

// One served model: its id, the engine that decodes it, and whether it is a chat model.
struct ServedModel {
  std::string id;         // the file's stem ("text-dg"); requests name it in "model"
  std::string file_name;  // the file's name ("text-dg.gguf"), accepted in "model" as well
  Engine* engine = nullptr;
  // A chat model: a chat template of its own, or an instruction-tuned name (is_chat_model_name). Chat
  // requests that name no model go to the first one.
  bool chat = false;
  int64_t created = 0;  // when it was loaded (Unix seconds): /v1/models' "created"
};

// A model's id: the stem of its file ("models/text-dg.gguf" -> "text-dg"), or the name of a safetensors
// checkpoint's directory ("ckpt/" and "ckpt/config.json" -> "ckpt").
std::string model_id_of(const std::string& path);

// True for the names instruction-tuned releases carry: the id ends in "-chat", "-it" or "-instruct" (any
// case), as text-dg-chat, gemma-2b-it and Llama-3-8B-Instruct do. canvas's shipped chat model has no
// tokenizer.chat_template (it speaks the built-in Gemma 4 format), so its name is what marks it.
bool is_chat_model_name(const std::string& id);

// The model files of `canvas serve -m` values: each value is one model, except a directory without
// config.json, which stands for the *.gguf files in it (sorted by name) that hold a model. A GGUF without
// general.architecture (a tokenizer-only file such as models/tokenizer-kjv.gguf) is passed over and listed
// in `skipped`, as is any other *.gguf entry that cannot be served (a dangling link, a directory, a FIFO or
// device, which is never opened, a file that is not a readable GGUF), each with the reason. Throws Error
// for a directory that cannot be listed or holds no model.
struct ModelFiles {
  struct Skipped {
    std::string path, reason;
    bool operator==(const Skipped&) const = default;
  };
  std::vector<std::string> paths;
  std::vector<bool> listed;  // per path: found in a -m DIR (a model that then fails to load is passed over)
  std::vector<Skipped> skipped;
};
ModelFiles expand_model_paths(const std::vector<std::string>& values);

// A served model's text model (weights, tokenizer, chat format, sampler defaults) and the engine that decodes
// it; kept at one address, since the engine refers to the model.
struct ServedText {
  TextModel text;
  std::unique_ptr<Engine> engine;
};

// What every served model's engine shares, and where its cost model is kept.
struct ServeSetup {
  EngineOptions engine;         // parallel, queue, default mode (the model's own fields are filled per model)
  std::string cost_model_file;  // --cost-model ("" for none); with several models, one file each
  std::string datastore_file;   // --draft-datastore ("" for none): verify's datastore drafts, every request
  size_t models = 1;            // how many models are served
  int64_t cores = 1;            // for the cost model's key
  std::string device = "cpu";
};

// Starts the engine of `served` over `text` (its model already on its device): the engine gets the model's
// tokenizer, chat format and sampler defaults, and with setup.cost_model_file its own cost-model file
// (cost_model_file_for) and key (cost_model_key). Sets served.engine and served.chat (a chat template of its
// own, or an instruction-tuned name). Throws Error when the model cannot decode the default mode.
std::unique_ptr<ServedText> start_served_model(TextModel text, const std::string& path, ServedModel& served,
                                               const ServeSetup& setup, ThreadPool* pool);

// The served models of these files, in order: each with its id and file name (no engine yet). Throws
// Error naming both files when two models share an id.
std::vector<ServedModel> served_models_of(const std::vector<std::string>& paths);

// The model a request answers with (models must not be empty):
// - `name` empty, or "default" (when no model has that id): chat -> the first chat model, else the first model; completions -> the first model;
// - `name` an id or a file name: that model; chat to a model that is not a chat model while a chat model
//   is served beside it: ApiError 400 (code "model_not_chat"), naming the chat models;
// - `name` unknown: with one model, that model (any name is accepted, as a single-model server always
//   did); with several, ApiError 404 (code "model_not_found") listing the ids.
const ServedModel& pick_model(const std::vector<ServedModel>& models, const std::string& name, bool chat);

}  // namespace canvas::serve
