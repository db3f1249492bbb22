// Where canvas keeps what it measures or computes once per machine (cost models, tokenized datastores).
#pragma once
#include <string>

namespace canvas {

// $XDG_CACHE_HOME/canvas, else ~/.cache/canvas; "" when neither variable is set.
std::string user_cache_dir();

}  // namespace canvas
