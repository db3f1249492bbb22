// Fuzz harness: a safetensors file (8-byte length, JSON header, data) when the first byte is even; when it
// is odd, the rest is a sharded checkpoint's model.safetensors.index.json, resolved against a folder that
// holds one valid shard (shard names may try to escape the folder: they must be refused).
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "fuzz_input.h"
#include "io/safetensors.h"

namespace {

// A per-process folder with a valid one-tensor shard "model-00001-of-00001.safetensors".
const std::filesystem::path& shard_folder() {
  static const std::filesystem::path folder = [] {
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("canvas-fuzz-shards-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    std::string bytes(8, '\0');
    const uint64_t n = header.size();
    std::memcpy(bytes.data(), &n, 8);
    bytes += header + std::string(8, '\0');
    std::ofstream(dir / "model-00001-of-00001.safetensors", std::ios::binary) << bytes;
    return dir;
  }();
  return folder;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  try {
    if (data[0] % 2 == 0) {
      canvas::fuzz::MemoryFile file(data + 1, size - 1);
      const auto st = canvas::SafetensorsFile::open(file.path());
      for (const canvas::TensorView& t : st->tensors()) {
        // Touch the first and last byte of every tensor: they must lie inside the mapping.
        if (t.bytes() > 0) {
          volatile uint8_t sink = static_cast<const uint8_t*>(t.data)[0];
          sink = static_cast<const uint8_t*>(t.data)[t.bytes() - 1];
          (void)sink;
        }
      }
    } else {
      const std::filesystem::path& dir = shard_folder();
      std::ofstream(dir / "model.safetensors.index.json", std::ios::binary | std::ios::trunc)
          .write(reinterpret_cast<const char*>(data + 1), std::streamsize(size - 1));
      canvas::SafetensorsModel::open(dir.string());
    }
  } catch (const canvas::Error&) {
  }
  return 0;
}
