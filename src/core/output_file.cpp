#include "core/output_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace canvas {

void write_file(const std::string& path, const std::function<void(std::ostream&)>& body) {
  check(!path.empty(), "no output file name given");
  const std::string tmp = path + ".tmp";
  const auto fail = [&](const std::string& what, int error) {
    std::remove(tmp.c_str());
    throw Error(what + " " + path + (error ? std::string(": ") + std::strerror(error) : std::string()));
  };
  {
    errno = 0;
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail("cannot write", errno);
    try {
      body(out);
    } catch (...) {
      out.close();
      std::remove(tmp.c_str());
      throw;
    }
    errno = 0;
    out.close();
    if (!out) fail("error writing", errno);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot write", errno);
}

void write_file(const std::string& path, std::string_view bytes) {
  write_file(path, [bytes](std::ostream& out) { out.write(bytes.data(), std::streamsize(bytes.size())); });
}

}  // namespace canvas
