// printf onto the end of a string, whatever its length: the printed reports and listings.
#pragma once
#include <string>

namespace canvas {

// Appends printf(format, ...) to `out`, whatever its length.
void appendf(std::string& out, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace canvas
