// The conversion library (src/convert/convert.h, quantize.h, retype.h) called directly: a tiny Hugging Face
// checkpoint to GGUF and back, a tiny tensor set re-typed against the row kernels' own round trip, and the
// fallbacks and metadata parsing the CLI reports.
#include "convert/convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "convert/quantize.h"
#include "convert/retype.h"
#include "ops/matmul.h"
#include "test_util.h"

namespace canvas {
namespace {

// Every tensor of `want` is in `got` with the same shape, type and bytes, and there are no others (GGUF
// files and safetensors checkpoints alike).
template <class File>
void expect_same_tensors(const File& got, const File& want) {
  ASSERT_EQ(got.tensors().size(), want.tensors().size());
  for (const TensorView& t : want.tensors()) {
    const TensorView* u = got.find_tensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(t.ne, u->ne) << t.name;
    ASSERT_EQ(t.type, u->type) << t.name;
    EXPECT_EQ(0, std::memcmp(t.data, u->data, size_t(t.bytes()))) << t.name << " differs";
  }
}

// convert_hf_to_gguf writes the tensors of the fixture GGUF byte for byte (Q/K rows permuted), reports
// each tensor once through on_tensor, copies the tokenizer and counts every tensor as f32.
TEST(ConvertLibrary, HfCheckpointToGgufMatchesTheFixture) {
  test::TempDir tmp;
  const std::string out = tmp.path("llada.gguf");
  int64_t calls = 0, last_total = 0;
  ConversionCallbacks callbacks;
  callbacks.on_tensor = [&](int64_t done, int64_t total) {
    EXPECT_EQ(done, calls + 1);
    ++calls;
    last_total = total;
  };
  callbacks.on_tokenizer_skipped = [](const std::string& path, const std::string& problem) {
    ADD_FAILURE() << path << " skipped: " << problem;
  };
  const GgufConversion r = convert_hf_to_gguf(test::fixture("tiny-llada-hf"), out, DType::F32, callbacks);
  EXPECT_EQ(r.arch, "llada");
  EXPECT_EQ(r.skipped, 0);
  EXPECT_EQ(calls, last_total);
  EXPECT_EQ(r.report.fallbacks(), "");
  EXPECT_EQ(r.tokenizer.rfind("tokenizer ", 0), 0u) << r.tokenizer;
  const auto got = GgufFile::open(out), want = GgufFile::open(test::fixture("tiny-llada.gguf"));
  EXPECT_EQ(r.report.tensors(), int64_t(want->tensors().size()));
  EXPECT_EQ(r.report.summary(), std::to_string(want->tensors().size()) +
                                    " tensors: " + std::to_string(want->tensors().size()) + " f32");
  EXPECT_EQ(got->get_string_array("tokenizer.ggml.tokens"), want->get_string_array("tokenizer.ggml.tokens"));
  expect_same_tensors(*got, *want);
  // The files it may read are the checkpoint's own .json and .safetensors files.
  const std::vector<std::string> files = hf_checkpoint_files(test::fixture("tiny-llada-hf"));
  EXPECT_FALSE(files.empty());
  for (const std::string& f : files) EXPECT_TRUE(f.ends_with(".json") || f.ends_with(".safetensors")) << f;
}

// Exporting the fixture GGUF writes the fixture directory's tensors byte for byte; a non-float type is
// refused.
TEST(ConvertLibrary, GgufToHfMatchesTheFixtureDirectory) {
  test::TempDir tmp;
  const std::string out = tmp.path("export");
  const HfExport r = convert_gguf_to_hf(test::fixture("tiny-llada.gguf"), out, DType::F32);
  EXPECT_EQ(r.arch, "llada");
  EXPECT_FALSE(r.layout.empty());
  EXPECT_EQ(r.tokenizer.rfind("tokenizer.json ", 0), 0u) << r.tokenizer;
  const auto x = SafetensorsModel::open(out), y = SafetensorsModel::open(test::fixture("tiny-llada-hf"));
  EXPECT_EQ(r.tensors, x->tensors().size());
  expect_same_tensors(*x, *y);
  EXPECT_THROW(convert_gguf_to_hf(test::fixture("tiny-llada.gguf"), tmp.path("q"), DType::Q8_0), Error);
}

// A tiny tensor set written as one GGUF: a vector, a matrix of whole 256-blocks, one of whole 32-blocks
// only and one of neither.
struct TensorSet {
  std::vector<std::vector<float>> data;
  std::vector<std::pair<std::string, std::vector<int64_t>>> specs{{"norm.weight", {64}},
                                                                  {"blocks256.weight", {256, 3}},
                                                                  {"blocks32.weight", {96, 2}},
                                                                  {"odd.weight", {40, 2}}};
  void write(const std::string& path) {
    Rng rng(7);
    GgufWriter w;
    w.set("diffusion.eb_entropy_bound", GgufValue::f32(0.1f));
    for (const auto& [name, shape] : specs) {
      std::vector<float>& v = data.emplace_back(size_t(shape[0] * (shape.size() > 1 ? shape[1] : 1)));
      for (float& x : v) x = float(rng.uniform()) * 2 - 1;
      w.add_tensor(name, DType::F32, shape, v.data(), v.size() * 4);
    }
    w.write(path);
  }
};

// quantize_gguf to q4_k: every tensor's bytes are exactly the row kernels' quantization of the source
// (stored_type's fallbacks for rows q4_k cannot hold), its dequantized values are near the source, the
// report lists the two fallbacks, and the metadata keys are set.
TEST(QuantizeLibrary, RetypesEachTensorLikeTheRowKernels) {
  test::TempDir tmp;
  TensorSet set;
  set.write(tmp.path("in.gguf"));
  const auto in = GgufFile::open(tmp.path("in.gguf"));
  QuantizeOptions options;
  options.type = DType::Q4_K;
  const GgufValue* bound = in->find("diffusion.eb_entropy_bound");
  options.metadata.emplace_back("diffusion.eb_entropy_bound",
                                parse_metadata_value("1.5", bound, "diffusion.eb_entropy_bound"));
  options.metadata.emplace_back("canvas.note", parse_metadata_value("hello", nullptr, "canvas.note"));
  int64_t calls = 0;
  ConversionCallbacks callbacks;
  callbacks.on_tensor = [&](int64_t done, int64_t total) {
    EXPECT_EQ(done, ++calls);
    EXPECT_EQ(total, 4);
  };
  const RetypeReport report = quantize_gguf(*in, tmp.path("out.gguf"), options, callbacks);
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(report.summary(), "4 tensors: 1 f16, 1 f32, 1 q4_k, 1 q8_0");
  const std::string fallbacks = report.fallbacks();
  EXPECT_NE(fallbacks.find("  blocks32.weight: q8_0 instead of q4_k (rows of 96 values"), std::string::npos)
      << fallbacks;
  EXPECT_NE(fallbacks.find("  odd.weight: f16 instead of q4_k"), std::string::npos) << fallbacks;
  EXPECT_EQ(fallbacks.find("norm.weight"), std::string::npos) << fallbacks;  // vectors are not listed

  const auto out = GgufFile::open(tmp.path("out.gguf"));
  EXPECT_EQ(out->get_int("general.file_type", -1), 14);  // llama.cpp's MOSTLY_Q4_K_S
  EXPECT_FLOAT_EQ(float(out->get_float("diffusion.eb_entropy_bound", 0)), 1.5f);
  EXPECT_EQ(out->find("diffusion.eb_entropy_bound")->type, GgufType::Float32);
  EXPECT_EQ(out->get_string("canvas.note", ""), "hello");
  const DType want_types[] = {DType::F32, DType::Q4_K, DType::Q8_0, DType::F16};
  const double tolerance[] = {0, 0.15, 0.02, 1e-3};  // relative error of the dequantized tensor
  for (size_t k = 0; k < set.specs.size(); ++k) {
    const TensorView* t = out->find_tensor(set.specs[k].first);
    ASSERT_NE(t, nullptr) << set.specs[k].first;
    ASSERT_EQ(t->type, want_types[k]) << t->name;
    const int64_t cols = t->ne[0], rows = t->rows();
    std::vector<uint8_t> reference(size_t(row_bytes(t->type, cols)));
    std::vector<float> back(size_t(cols * rows));
    for (int64_t r = 0; r < rows; ++r) {
      quantize_row(t->type, &set.data[k][size_t(r * cols)], reference.data(), cols);
      EXPECT_EQ(0, std::memcmp(reference.data(), t->row(r), reference.size())) << t->name << " row " << r;
      dequantize_row(t->type, t->row(r), &back[size_t(r * cols)], cols);
    }
    EXPECT_LE(test::relative_error(back, set.data[k]), tolerance[k]) << t->name;
  }
}

// Metadata values parse as the existing key's type, else as the first of u32, f32, bool and string.
TEST(QuantizeLibrary, MetadataValues) {
  const GgufValue f = GgufValue::f32(0.5f), b = GgufValue::boolean(false),
                  i = GgufValue::integer(GgufType::Int32, 3);
  EXPECT_EQ(parse_metadata_value("2", &f, "k").type, GgufType::Float32);
  EXPECT_EQ(parse_metadata_value("-7", &i, "k").i, -7);
  EXPECT_EQ(parse_metadata_value("true", &b, "k").i, 1);
  EXPECT_EQ(parse_metadata_value("12", nullptr, "k").type, GgufType::Uint32);
  EXPECT_EQ(parse_metadata_value("1.25", nullptr, "k").type, GgufType::Float32);
  EXPECT_EQ(parse_metadata_value("false", nullptr, "k").type, GgufType::Bool);
  EXPECT_EQ(parse_metadata_value("name", nullptr, "k").s, "name");
  try {
    parse_metadata_value("abc", &f, "--set x");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--set x: 'abc' is not a finite number");
  }
  EXPECT_THROW(parse_metadata_value("-1", nullptr, "k"), Error);  // new integers are u32
  EXPECT_THROW(parse_metadata_value("2.5", &i, "k"), Error);
}

// stored_type: vectors stay f32; rows a block type cannot hold fall back, saying why.
TEST(Retype, StoredTypeFallbacks) {
  TensorView t;
  t.n_dims = 2;
  t.ne = {512, 4, 1, 1};
  std::string reason;
  EXPECT_EQ(stored_type(t, DType::Q6_K, &reason), DType::Q6_K);
  EXPECT_EQ(reason, "");
  t.ne[0] = 64;
  EXPECT_EQ(stored_type(t, DType::Q6_K, &reason), DType::Q8_0);
  EXPECT_NE(reason.find("q8_0's 32-value blocks fit"), std::string::npos) << reason;
  t.ne[0] = 20;
  EXPECT_EQ(stored_type(t, DType::Q4_0, &reason), DType::F16);
  EXPECT_NE(reason.find("no block type fits"), std::string::npos) << reason;
  t.n_dims = 1;
  EXPECT_EQ(stored_type(t, DType::BF16, &reason), DType::F32);
  EXPECT_EQ(reason, "1-D tensors stay f32");
  EXPECT_EQ(llama_file_type(DType::Q8_0), 7u);
  EXPECT_THROW(llama_file_type(DType::I32), Error);
}

}  // namespace
}  // namespace canvas
