// printf onto the end of a string (appendf.h).
#include "core/appendf.h"

#include <cstdarg>
#include <cstdio>

namespace canvas {

void appendf(std::string& out, const char* format, ...) {
  va_list args, again;
  va_start(args, format);
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  if (n > 0) {
    const size_t at = out.size();
    out.resize(at + size_t(n) + 1);
    std::vsnprintf(out.data() + at, size_t(n) + 1, format, again);
    out.resize(at + size_t(n));
  }
  va_end(again);
}

}  // namespace canvas
