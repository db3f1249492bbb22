// Hugging Face safetensors checkpoints: memory-mapped reader for one file or a sharded checkpoint
// (model.safetensors.index.json), every header field validated before use.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/mapped_file.h"
#include "core/tensor.h"

namespace canvas {

// One mapped .safetensors file. Layout: u64 little-endian N, N bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {string: string}}, then the
// data; offsets are relative to the first byte after the header.
class SafetensorsFile {
 public:
  // Throws Error naming the file (and the tensor) for: a file shorter than 8 bytes, a header length
  // running past the end, malformed JSON or a duplicate key, a field of the wrong type, an unsupported
  // dtype (only F32, F16 and BF16 are read), more than 4 dimensions, data_offsets out of order or past the
  // end of the file, a byte size that does not match dtype x shape, overlapping tensors. Gaps between
  // tensors are allowed. Never reads outside the mapping.
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return size_; }
  uint64_t header_size() const { return header_size_; }  // N (the JSON's byte length)
  // Tensors in header order. ne is in ggml order: the reverse of the safetensors shape, so a shape
  // [out, in] gives ne = {in, out}; a 0-d tensor (shape []) is one element. data points into the map.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find_tensor(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  uint64_t size_ = 0;
  uint64_t header_size_ = 0;
  MappedFile map_;
  std::vector<TensorView> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A checkpoint: one file, or the shards named by an index. The model keeps every shard mapped; the
// TensorViews it hands out are valid as long as it lives.
class SafetensorsModel {
 public:
  // `path` may be a .safetensors file, a model.safetensors.index.json (or any *.index.json), or a
  // directory holding model.safetensors.index.json or model.safetensors (the index wins when both are
  // there). For an index: weight_map (tensor name -> shard file name, relative to the index's folder)
  // must be an object of strings; a shard that is missing or invalid, a listed tensor absent from its
  // shard, or a shard name that leaves the folder (absolute or with "..") gives Error naming the index,
  // the shard and the tensor. The model's tensors are exactly those listed in weight_map (in the
  // index's order), so tensors a shard holds but the index does not list are not exposed.
  static std::shared_ptr<SafetensorsModel> open(const std::string& path);

  const std::string& path() const { return path_; }  // what was opened (the index for a sharded model)
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find_tensor(const std::string& name) const;
  // Missing tensor -> Error naming it and the checkpoint.
  const TensorView& require_tensor(const std::string& name) const;
  // The file a tensor's data lies in (for messages); throws Error for an unknown tensor.
  const std::string& file_of(const std::string& name) const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  // The first file's __metadata__ (e.g. {"format": "pt"}).
  const std::map<std::string, std::string>& metadata() const;

 private:
  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<TensorView> tensors_;
  std::vector<size_t> file_index_;  // per tensor: index into files_
  std::unordered_map<std::string, size_t> index_;
};

// One tensor to write: shape in safetensors order (outermost first, the reverse of ggml's ne); data
// holds exactly dtype x shape bytes.
struct SafetensorsEntry {
  std::string name;
  DType type = DType::F32;  // F32, F16 or BF16
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t bytes = 0;
};

// Writes one .safetensors file (to path + ".tmp", then renamed): the header lists the tensors in the
// given order, packed without gaps, padded with spaces to a multiple of 8 bytes; `metadata` becomes
// __metadata__. Throws Error naming the tensor for another dtype, a duplicate name or a byte count that
// does not match its shape, and naming the path when it cannot be written.
void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// "F32", "F16", "BF16" -> DType; every other safetensors dtype name gives Error (the message says
// which ones are read), naming `what` (e.g. "tensor 'x' in model.safetensors").
DType safetensors_dtype(const std::string& name, const std::string& what);

}  // namespace canvas
