// canvas generate's infilling and schema-constrained modes (--suffix, <|hole:N|> prompts, --json-schema):
// the flags they add and the run that calls decode/infill.h.
#pragma once
#include <string>

#include "args.h"
#include "model/model.h"
#include "text_model.h"

namespace canvas::cli {

// The generate flags this mode adds (value flags): suffix, json-schema.
bool infill_requested(const Args& args);
// Runs generate with holes or a schema; prints the result like generate does. Returns the exit code.
int run_infill(const Args& args, const Model& model, const std::string& model_path,
               const TextTokenizer& tokenizer);

}  // namespace canvas::cli
