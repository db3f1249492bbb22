// NumPy .npy files (version 1.0, little-endian float32 / int32, C order): read and write.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace canvas {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;  // float32 arrays (int32 arrays are converted)
};

void write_npy(const std::string& path, const float* data, const std::vector<int64_t>& shape);
// Throws Error naming the file for anything but a little-endian f4/i4 C-order array.
NpyArray read_npy(const std::string& path);

}  // namespace canvas
