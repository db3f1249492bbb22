// What the canvas binary knows from its build: where the shipped models are installed and the default ones.
#pragma once
#include <string>

#include "cli/options.h"

namespace canvas::cli {

// The installed data directory (models/ lives there), set at build time; "" when not installed.
std::string data_dir();

// A model shipped under models/ (e.g. "text-masked.gguf"), looked up in $CANVAS_DATA_DIR/models, ./models,
// BINDIR/../share/canvas/models (an installed tree, wherever it was moved), the configured install data
// directory and the source tree's models/; throws an error pointing at
// `help_command` --help when none has it.
std::string shipped_model_path(const std::string& name, const std::string& help_command);
// -m's value when given, else that shipped model.
std::string model_or_shipped(const Args& args, const std::string& name, const std::string& help_command);

// The model generate and serve use without -m: canvas's DiffusionGemma-architecture text model; chat uses
// its instruction-tuned variant.
inline constexpr const char* kDefaultTextModel = "text-dg.gguf";
inline constexpr const char* kDefaultChatModel = "text-dg-chat.gguf";

}  // namespace canvas::cli
