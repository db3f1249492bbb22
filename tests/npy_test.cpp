// .npy reader/writer: exact header layout, round trips, int32 input, and clear errors on anything else.
#include "io/npy.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "core/error.h"
#include "core/output_file.h"
#include "test_util.h"

namespace canvas {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}

// A version 1.0 (or 2.0) file with the given header dict and payload, padded the way NumPy pads.
std::string npy_bytes(const std::string& dict, const std::string& payload, int major = 1) {
  const size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  const size_t total = (prefix + header.size() + 1 + 63) / 64 * 64;
  header.append(total - prefix - header.size() - 1, ' ');
  header += '\n';
  std::string out("\x93NUMPY", 6);
  out += char(major);
  out += char(0);
  const uint32_t len = uint32_t(header.size());
  out.append(reinterpret_cast<const char*>(&len), major == 1 ? 2 : 4);
  return out + header + payload;
}

template <class T>
std::string payload(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

void expect_read_error(const std::string& path, const std::string& needle) {
  try {
    read_npy(path);
    ADD_FAILURE() << "expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
  }
}

TEST(Npy, HeaderIsExactlyWhatNumpyWrites) {
  TempDir dir;
  const std::vector<float> data = {1, 2, 3, 4, 5, 6};
  write_npy(dir.path("a.npy"), data.data(), {2, 3});
  const std::string bytes = read_file(dir.path("a.npy"));
  // numpy.save(np.arange(1, 7, dtype=np.float32).reshape(2, 3)) writes this 128-byte prefix.
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  std::string expected("\x93NUMPY\x01\x00", 8);
  expected += char(118);
  expected += char(0);
  expected += dict + std::string(118 - dict.size() - 1, ' ') + "\n";
  ASSERT_EQ(bytes.size(), 128u + 24u);
  EXPECT_EQ(bytes.substr(0, 128), expected);
  EXPECT_EQ(std::memcmp(bytes.data() + 128, data.data(), 24), 0);
  EXPECT_FALSE(fs::exists(temp_file_for(dir.path("a.npy"))));
}

TEST(Npy, RoundTripAnyShape) {
  TempDir dir;
  const std::vector<std::vector<int64_t>> shapes = {{2, 3}, {5}, {}, {0}, {2, 0, 3}, {1, 1, 1, 1, 7}, {3, 4, 5}};
  std::mt19937 rng(3);
  for (const auto& shape : shapes) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> data(static_cast<size_t>(n));
    for (auto& x : data) x = std::uniform_real_distribution<float>(-10, 10)(rng);
    const std::string path = dir.path("x.npy");
    write_npy(path, data.data(), shape);
    const std::string bytes = read_file(path);
    const size_t header_len = uint8_t(bytes[8]) | size_t(uint8_t(bytes[9])) << 8;
    EXPECT_EQ((10 + header_len) % 64, 0u);
    EXPECT_EQ(bytes[10 + header_len - 1], '\n');
    const NpyArray back = read_npy(path);
    EXPECT_EQ(back.shape, shape);
    EXPECT_EQ(back.data, data);
  }
  write_npy(dir.path("one.npy"), std::vector<float>{4}.data(), {1});
  EXPECT_NE(read_file(dir.path("one.npy")).find("'shape': (1,)"), std::string::npos);
  write_npy(dir.path("scalar.npy"), std::vector<float>{4}.data(), {});
  EXPECT_NE(read_file(dir.path("scalar.npy")).find("'shape': ()"), std::string::npos);
}

TEST(Npy, ReadsInt32AndOtherHeaderSpellings) {
  TempDir dir;
  const std::string path = dir.path("i.npy");
  write_file(path, npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }",
                             payload(std::vector<int32_t>{-3, 0, 7, 2147483647})));
  NpyArray a = read_npy(path);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(a.data, (std::vector<float>{-3, 0, 7, 2147483647.0f}));
  // Double quotes, another key order, no trailing comma, a Python 2 long, format version 2.0.
  write_file(path, npy_bytes("{\"shape\": (3L,), \"fortran_order\": False, \"descr\": \"<f4\"}",
                             payload(std::vector<float>{1.5f, 2.5f, -1}), 2));
  a = read_npy(path);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(a.data, (std::vector<float>{1.5f, 2.5f, -1}));
}

TEST(Npy, RejectsUnsupportedAndMalformedFiles) {
  TempDir dir;
  const std::string p = dir.path("bad.npy");
  const std::string four = payload(std::vector<float>{1, 2, 3, 4});
  struct Case {
    const char* what;
    std::string bytes;
    const char* needle;
  };
  const Case cases[] = {
      {"big-endian", npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", four), "'>f4'"},
      {"float64", npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", four), "'<f8'"},
      {"int64", npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", four), "unsupported dtype"},
      {"fortran", npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", four), "Fortran"},
      {"short data", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", four), "size mismatch"},
      {"extra data", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", four), "size mismatch"},
      {"overflowing shape",
       npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", four), "overflow"},
      {"huge dim", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", four),
       "too large"},
      {"negative dim", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }", four), "bad header"},
      {"missing key", npy_bytes("{'descr': '<f4', 'shape': (4,), }", four), "lacks"},
      {"unknown key", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}", four),
       "unknown key"},
      {"not a dict", npy_bytes("[1, 2]", four), "bad header"},
      {"unterminated", npy_bytes("{'descr: <f4", four), "unterminated"},
      {"trailing", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4,)} x", four), "trailing"},
      {"bad magic", std::string("\x93NUMPZ\x01\x00\x10\x00", 10) + std::string(16, ' '), "magic"},
      {"version 9", std::string("\x93NUMPY\x09\x00\x10\x00", 10) + std::string(16, ' '), "version"},
      {"too short", std::string("\x93NUM", 4), "too short"},
      {"header past end", std::string("\x93NUMPY\x01\x00\xff\x7f", 10) + "{}", "runs past the end"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    write_file(p, c.bytes);
    expect_read_error(p, c.needle);
  }
  expect_read_error(dir.path("missing.npy"), "cannot open");
  expect_read_error(dir.path(""), "directory");
  EXPECT_THROW(write_npy(dir.path("neg.npy"), nullptr, {-1}), Error);
  EXPECT_THROW(write_npy(dir.path("no/such/dir/x.npy"), std::vector<float>{1}.data(), {1}), Error);
}

TEST(NpyFuzz, TruncationAndMutationsNeverCrash) {
  TempDir dir;
  const std::vector<float> data = {1, 2, 3, 4, 5, 6};
  write_npy(dir.path("v.npy"), data.data(), {3, 2});
  const std::string valid = read_file(dir.path("v.npy"));
  const std::string p = dir.path("m.npy");
  for (size_t n = 0; n < valid.size(); ++n) {
    write_file(p, valid.substr(0, n));
    EXPECT_THROW(read_npy(p), Error) << "cut at " << n;
  }
  std::mt19937 rng(11);
  for (int trial = 0; trial < 1000; ++trial) {
    std::string b = valid;
    for (int e = 0; e < 3; ++e) b[rng() % 80] = char(rng() % 3 == 0 ? ' ' + rng() % 95 : rng());
    write_file(p, b);
    try {
      const NpyArray a = read_npy(p);
      int64_t n = 1;
      for (int64_t d : a.shape) n *= d;
      EXPECT_EQ(size_t(n), a.data.size());
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace canvas
