// Re-typing tensors for convert and quantize: the type a tensor can be stored as under a requested type,
// why it differs, a report of exactly what was written, and the callbacks a conversion reports through.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "io/gguf.h"

namespace canvas {

// Vectors (1-D) stay f32; block types need rows of whole blocks: rows a 256-block K-quant cannot hold fall
// back to q8_0 (32-blocks), as llama.cpp's quantizer falls back to a 32-block type; rows no block type
// can hold stay f16. `reason` says why the stored type differs from `requested` ("" when it does not).
DType stored_type(const TensorView& t, DType requested, std::string* reason);

// Adds tensor `name` (data of `t`) to `w` as `type`, converting through f32 when the types differ; the
// converted bytes are kept in `storage` until the writer has written.
void add_retyped(GgufWriter& w, const std::string& name, const TensorView& t, DType type,
                 std::deque<std::vector<uint8_t>>& storage);

// llama.cpp's general.file_type (enum llama_ftype) for a file whose matrices were requested as `type`:
// ALL_F32 0, MOSTLY_F16 1, Q4_0 2, Q4_1 3, Q8_0 7, Q5_0 8, Q5_1 9, Q4_K_S 14, Q5_K_S 16, Q6_K 18, BF16 32
// (the K-quants are the "_S" kinds: every matrix the one type, none raised to a larger one).
uint32_t llama_file_type(DType type);

// What a conversion wrote: tensors per stored type, and one line per tensor that did not get the
// requested type (1-D vectors, which always stay f32, are counted but not listed).
class RetypeReport {
 public:
  void note(const std::string& name, const TensorView& t, DType requested, DType stored,
            const std::string& reason);
  int64_t tensors() const { return tensors_; }
  // "143 tensors: 120 q4_k, 10 q8_0, 13 f32"
  std::string summary() const;
  // One line per fallback: "  blk.0.ffn_down.weight: q8_0 instead of q4_k (rows of 320 values are ...)".
  std::string fallbacks() const;

 private:
  std::map<std::string, int64_t> counts_;
  std::vector<std::string> fallbacks_;
  int64_t tensors_ = 0;
};

// What a conversion tells its caller while it runs; every member may be left empty.
struct ConversionCallbacks {
  // One tensor more is being written: `done` counts it, of `total`.
  std::function<void(int64_t done, int64_t total)> on_tensor;
  // tokenizer.json at `path` was not copied because the GGUF form cannot hold it exactly (`problem` says
  // why); the GGUF then needs that file as its tokenizer.
  std::function<void(const std::string& path, const std::string& problem)> on_tokenizer_skipped;
};

}  // namespace canvas
