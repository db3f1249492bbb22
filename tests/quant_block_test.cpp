// core/quant_block.h: the one block decoder the CPU's row dequantisation and the CUDA kernels share, and
// ops get_row_bytes, which hands the device a weight's rows in the file layout.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/quant_block.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/matmul.h"

namespace canvas {
namespace {

constexpr DType kDecodable[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                                DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};

// Random bytes for a row, with every f16 field a finite value (a NaN scale compares unequal to itself).
std::vector<uint8_t> random_row(Rng& rng, DType type, int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = float(rng.normal() * 0.7);
  std::vector<uint8_t> bytes(static_cast<size_t>(row_bytes(type, n)));
  quantize_row(type, x.data(), bytes.data(), n);
  return bytes;
}

// Every element of every block, as decode_block + block_value give it, is bit for bit the value
// dequantize_row's own loops give for Q8_0 and Q4_0. (dequantize_row reads the other six types through
// decode_block itself, so comparing them here could not fail: QuantizeTest.DequantizeHandBuilt* in
// matmul_test.cpp checks them against blocks built by hand.)
TEST(QuantBlock, DecodesEveryTypeAsDequantizeRow) {
  Rng rng(3);
  const int64_t n = 512;
  for (DType type : kDecodable) ASSERT_TRUE(block_decodable(type)) << dtype_name(type);
  for (DType type : {DType::Q8_0, DType::Q4_0}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<uint8_t> bytes = random_row(rng, type, n);
      if (trial % 2) {  // raw random quants: only each block's f16 scale (its first two bytes) kept finite
        const int64_t block = dtype_info(type).block_bytes;
        for (size_t i = 0; i < bytes.size(); ++i)
          if (int64_t(i) % block >= 2) bytes[i] = uint8_t(rng.below(256));
      }
      std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
      dequantize_row(type, bytes.data(), want.data(), n);
      DecodedBlock blk;
      for (int64_t b = 0; b < n / 32; ++b) {
        decode_block(type, bytes.data(), b, blk);
        for (int i = 0; i < 32; ++i) got[size_t(b * 32 + i)] = block_value(blk, i);
      }
      ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << dtype_name(type) << " trial " << trial;
    }
  }
  EXPECT_FALSE(block_decodable(DType::F16));
  EXPECT_FALSE(block_decodable(DType::Q2_K));
}

// An interleaved Q4_0 / Q8_0 matrix hands back each row's file bytes, including a last group padded
// past the matrix's rows; a plain matrix hands back its own rows.
TEST(QuantBlock, RowBytesOfInterleavedMatricesAreTheFileRows) {
  Rng rng(5);
  const int64_t k = 128;
  for (DType type : {DType::Q4_0, DType::Q8_0}) {
    for (int64_t rows : {int64_t(32), int64_t(21)}) {
      std::vector<uint8_t> file;
      for (int64_t r = 0; r < rows; ++r) {
        const std::vector<uint8_t> row = random_row(rng, type, k);
        file.insert(file.end(), row.begin(), row.end());
      }
      TensorView w;
      w.name = "w";
      w.type = type;
      w.ne = {k, rows, 1, 1};
      w.n_dims = 2;
      w.data = file.data();
      const int64_t rb = row_bytes(type, k);
      std::vector<uint8_t> got(static_cast<size_t>(rb));
      for (int64_t r = 0; r < rows; ++r) {  // plain: the row itself
        get_row_bytes(w, r, got.data());
        ASSERT_EQ(std::memcmp(got.data(), file.data() + r * rb, size_t(rb)), 0);
      }
      std::vector<uint8_t> inter(static_cast<size_t>(interleaved_bytes(w)));
      TensorView wi = w;
      interleave_for_matmul(wi, inter.data(), nullptr);
      ASSERT_TRUE(is_interleaved(wi.type));
      for (int64_t r = 0; r < rows; ++r) {
        get_row_bytes(wi, r, got.data());
        EXPECT_EQ(std::memcmp(got.data(), file.data() + r * rb, size_t(rb)), 0) << dtype_name(type) << " row " << r;
      }
      EXPECT_THROW(get_row_bytes(wi, rows, got.data()), Error);
    }
  }
}

}  // namespace
}  // namespace canvas
