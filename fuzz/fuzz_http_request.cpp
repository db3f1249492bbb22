// Fuzz harness: the bytes a client sends canvas serve, framed into requests (serve/http_connections.h) fed
// whole and split at a point the input chooses, and each body decompressed under the limit. Every bad
// input must end as a failure status, never a crash, a hang or an allocation beyond the limits.
#include <cstdint>
#include <string>
#include <vector>

#include "serve/http_connections.h"

namespace {

using canvas::serve::RequestReader;

// The requests framed from `bytes` fed in two pieces (split at `cut`), bodies decoded.
std::vector<std::string> frame(const std::string& bytes, size_t cut, const canvas::serve::ConnectionLimits& limits) {
  RequestReader reader(limits);
  std::vector<std::string> out;
  std::string in;
  for (const std::string& piece : {bytes.substr(0, cut), bytes.substr(cut)}) {
    in += piece;
    RequestReader::Status status;
    while ((status = reader.advance(in)) == RequestReader::Status::Ready) {
      canvas::serve::FramedRequest r = reader.take();
      canvas::serve::HttpFailure failure;
      if (canvas::serve::decode_body(r, limits.body_limit, failure)) out.push_back(r.text());
      else out.push_back(std::to_string(failure.status));
    }
    if (status == RequestReader::Status::Failed) {
      out.push_back(std::to_string(reader.failure().status));
      break;
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  canvas::serve::ConnectionLimits limits;
  limits.body_limit = 1 << 16;  // small, so that the limit paths are reached
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t cut = bytes.empty() ? 0 : size_t(data[0]) * bytes.size() / 256;
  // Where the bytes are cut must not change what is framed.
  if (frame(bytes, cut, limits) != frame(bytes, bytes.size(), limits)) __builtin_trap();
  return 0;
}
