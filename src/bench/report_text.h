// Building the printed reports of the benchmarks: printf onto the end of a string.
#pragma once
#include <string>

namespace canvas::bench {

// Appends printf(format, ...) to `out`, whatever its length.
void appendf(std::string& out, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace canvas::bench
