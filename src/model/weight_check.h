// Finite weights: NaN or Inf in a weight is found when the model is loaded, not as nonsense text later.
#pragma once

#include <cstdint>
#include <string>

#include "model/model.h"

namespace canvas {

// How much of each tensor is read. Sampled reads every row of a tensor up to kFullScanBytes and
// kSampledRows evenly spaced rows (the first and last among them) of a larger one, so a 14 GB file is
// checked in well under a second; Full reads every row (`--check-weights`).
enum class WeightScan { Sampled, Full };
constexpr int64_t kFullScanBytes = int64_t(4) << 20;
constexpr int64_t kSampledRows = 256;

// Throws Error naming `path` (the file, for messages), the tensor, its row and the value when a scanned
// element of a weight the model binds (matrices of every storage type, dequantized row by row; vectors;
// layer scalars) is not finite; a sampled scan's error says that --check-weights reads every weight.
// Returns the number of elements read.
int64_t check_weights_finite(const Model& model, WeightScan scan, const std::string& path);

}  // namespace canvas
