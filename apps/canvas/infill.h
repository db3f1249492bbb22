// canvas generate's infilling and schema-constrained modes (--suffix, <|hole:N|> prompts, --json-schema):
// the flags they add and the run that calls decode/infill.h.
#pragma once
#include <string>

#include "cli/options.h"
#include "decode/generation.h"
#include "model/model.h"

namespace canvas::cli {

// The generate flags this mode adds (value flags): suffix, json-schema.
bool infill_requested(const Args& args);
// Runs generate with holes or a schema; prints the result like generate does. Returns the exit code.
// `request` holds generate's decoding options and prompt text.
int run_infill(const Args& args, const TextModel& m, GenerationRequest request);

}  // namespace canvas::cli
