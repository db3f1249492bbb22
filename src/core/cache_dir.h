// Where canvas keeps what it measures or computes once per machine (cost models, tokenized datastores).
#pragma once
#include <string>

namespace canvas {

// $XDG_CACHE_HOME/canvas when XDG_CACHE_HOME is an absolute path (a relative one is ignored, as the XDG spec
// says), else ~/.cache/canvas; "" when neither applies.
std::string user_cache_dir();

}  // namespace canvas
