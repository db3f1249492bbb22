// GGUF reader/writer: round trips, typed getters, and hostile input (truncation, bit flips, crafted headers).
#include "io/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
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

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const uint8_t* data, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), std::streamsize(n));
}
void write_bytes(const std::string& path, const std::vector<uint8_t>& b) { write_bytes(path, b.data(), b.size()); }

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = uint8_t(rng());
  return b;
}

// Expects open() to throw canvas::Error whose message contains `needle` and the path.
void expect_open_error(const std::string& path, const std::string& needle) {
  try {
    GgufFile::open(path);
    ADD_FAILURE() << "expected an error containing '" << needle << "' for " << path;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg << "\nexpected: " << needle;
    EXPECT_NE(msg.find(path), std::string::npos) << "message lacks the path: " << msg;
  }
}

// Everything a reader touches on a successfully opened file; fails the test if a tensor points outside the map.
void touch_everything(const GgufFile& f) {
  size_t chars = 0;
  for (const auto& [k, v] : f.metadata()) chars += k.size() + v.to_string().size();
  EXPECT_GE(chars, f.metadata().size());  // every rendering is non-empty
  const uint8_t* base = f.mapped_data();
  uint64_t sum = 0;
  for (const TensorView& t : f.tensors()) {
    const uint8_t* p = static_cast<const uint8_t*>(t.data);
    ASSERT_GE(p, base + f.data_offset());
    ASSERT_LE(uint64_t(p - base) + uint64_t(t.bytes()), f.file_size()) << t.name;
    for (int64_t k = 0; k < t.bytes(); ++k) sum += p[k];
  }
  (void)sum;
}

// Tensors used in the round-trip tests; the storage outlives the writer.
struct SampleTensors {
  std::vector<uint8_t> f32 = random_bytes(7 * 3 * 4, 1);        // [7, 3]
  std::vector<uint8_t> f16 = random_bytes(5 * 2, 2);            // [5]
  std::vector<uint8_t> q8 = random_bytes(2 * 34 * 3 * 2, 3);    // [64, 3, 2]
  std::vector<uint8_t> q4 = random_bytes(1 * 18 * 5 * 1 * 2, 4);  // [32, 5, 1, 2]
};

GgufWriter sample_writer(const SampleTensors& t) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::string("diffusiongemma"));
  w.set("general.name", GgufValue::string(std::string("tiny \"model\"\n\xe2\x9c\x93 with\0nul", 25)));
  w.set("u8", GgufValue::integer(GgufType::Uint8, 255));
  w.set("i8", GgufValue::integer(GgufType::Int8, -128));
  w.set("u16", GgufValue::integer(GgufType::Uint16, 65535));
  w.set("i16", GgufValue::integer(GgufType::Int16, -32768));
  w.set("u32", GgufValue::u32(4000000000u));
  w.set("i32", GgufValue::i32(-2000000000));
  w.set("u64", GgufValue::u64(18446744073709551615ull));
  w.set("i64", GgufValue::integer(GgufType::Int64, -9000000000000000000ll));
  w.set("f32", GgufValue::f32(0.1f));
  w.set("f64", GgufValue::f64(3.141592653589793));
  w.set("flag", GgufValue::boolean(true));
  w.set("off", GgufValue::boolean(false));
  w.set("empty", GgufValue::string(""));
  w.set("tokens", GgufValue::string_array({"<pad>", "", "hello", std::string("\0\xff", 2), "\xc3\xa9t\xc3\xa9"}));
  w.set("ids", GgufValue::int_array(GgufType::Int32, {1, -2, 3, 2147483647, -2147483647 - 1}));
  w.set("u8s", GgufValue::int_array(GgufType::Uint8, {0, 1, 255}));
  w.set("u64s", GgufValue::int_array(GgufType::Uint64, {0, -1, 42}));  // -1 is 2^64 - 1 bit-cast
  w.set("bools", GgufValue::int_array(GgufType::Bool, {1, 0, 1}));
  w.set("scores", GgufValue::float_array({0.5f, -1.25f, 1e-30f}));
  GgufValue f64s;
  f64s.type = GgufType::Array;
  f64s.array_type = GgufType::Float64;
  f64s.floats = {1.0 / 3.0, -2.5};
  w.set("f64s", f64s);
  w.set("no_items", GgufValue::int_array(GgufType::Int16, {}));
  w.add_tensor("w.f32", DType::F32, {7, 3}, t.f32.data(), t.f32.size());
  w.add_tensor("b.f16", DType::F16, {5}, t.f16.data(), t.f16.size());
  w.add_tensor("experts.q8_0", DType::Q8_0, {64, 3, 2}, t.q8.data(), t.q8.size());
  w.add_tensor("blocks.q4_0", DType::Q4_0, {32, 5, 1, 2}, t.q4.data(), t.q4.size());
  return w;
}

void expect_same_value(const GgufValue& a, const GgufValue& b, const std::string& key) {
  EXPECT_EQ(a.type, b.type) << key;
  EXPECT_EQ(a.to_string(1000), b.to_string(1000)) << key;
  if (a.type == GgufType::Array) {
    EXPECT_EQ(a.array_type, b.array_type) << key;
    EXPECT_EQ(a.ints, b.ints) << key;
    EXPECT_EQ(a.floats, b.floats) << key;
    EXPECT_EQ(a.strings, b.strings) << key;
  } else {
    EXPECT_EQ(a.i, b.i) << key;
    EXPECT_EQ(a.s, b.s) << key;
    if (a.type == GgufType::Float32)
      EXPECT_EQ(float(a.f), float(b.f)) << key;
    else
      EXPECT_EQ(a.f, b.f) << key;
  }
}

TEST(Gguf, RoundTripMetadataAndTensors) {
  TempDir dir;
  SampleTensors t;
  const GgufWriter w = sample_writer(t);
  for (uint64_t alignment : {32u, 64u, 1u, 4096u}) {
    const std::string path = dir.path("model_" + std::to_string(alignment) + ".gguf");
    w.write(path, alignment);
    EXPECT_FALSE(fs::exists(temp_file_for(path)));
    auto f = GgufFile::open(path);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), alignment);
    EXPECT_EQ(f->data_offset() % alignment, 0u);
    EXPECT_EQ(f->file_size(), fs::file_size(path));
    EXPECT_EQ(f->find("general.alignment") != nullptr, alignment != 32);
    if (alignment != 32) {
      EXPECT_EQ(f->find("general.alignment")->type, GgufType::Uint32);
    }

    EXPECT_EQ(f->get_string("general.architecture", ""), "diffusiongemma");
    EXPECT_EQ(f->get_string("general.name", ""), std::string("tiny \"model\"\n\xe2\x9c\x93 with\0nul", 25));
    EXPECT_EQ(f->get_int("u8", 0), 255);
    EXPECT_EQ(f->get_int("i8", 0), -128);
    EXPECT_EQ(f->get_int("u16", 0), 65535);
    EXPECT_EQ(f->get_int("i16", 0), -32768);
    EXPECT_EQ(f->get_int("u32", 0), 4000000000ll);
    EXPECT_EQ(f->get_int("i32", 0), -2000000000);
    EXPECT_EQ(std::bit_cast<uint64_t>(f->find("u64")->i), 18446744073709551615ull);
    EXPECT_EQ(f->get_int("i64", 0), -9000000000000000000ll);
    EXPECT_EQ(float(f->get_float("f32", 0)), 0.1f);
    EXPECT_EQ(f->get_float("f64", 0), 3.141592653589793);
    EXPECT_TRUE(f->get_bool("flag", false));
    EXPECT_FALSE(f->get_bool("off", true));
    EXPECT_EQ(f->get_string("empty", "x"), "");
    EXPECT_EQ(f->get_string_array("tokens"),
              (std::vector<std::string>{"<pad>", "", "hello", std::string("\0\xff", 2), "\xc3\xa9t\xc3\xa9"}));
    EXPECT_EQ(f->get_int_array("ids"), (std::vector<int64_t>{1, -2, 3, 2147483647, -2147483647 - 1}));
    EXPECT_EQ(f->get_int_array("u8s"), (std::vector<int64_t>{0, 1, 255}));
    EXPECT_EQ(f->get_int_array("u64s"), (std::vector<int64_t>{0, -1, 42}));
    EXPECT_EQ(f->get_int_array("bools"), (std::vector<int64_t>{1, 0, 1}));
    EXPECT_EQ(f->get_float_array("scores"), (std::vector<double>{0.5f, -1.25f, 1e-30f}));
    EXPECT_EQ(f->get_float_array("f64s"), (std::vector<double>{1.0 / 3.0, -2.5}));
    EXPECT_EQ(f->find("f64s")->array_type, GgufType::Float64);
    EXPECT_EQ(f->find("no_items")->array_type, GgufType::Int16);
    EXPECT_EQ(f->find("no_items")->array_size(), 0);
    // Metadata order is preserved.
    EXPECT_EQ(f->metadata()[0].first, "general.architecture");
    EXPECT_EQ(f->metadata()[2].first, "u8");

    ASSERT_EQ(f->tensors().size(), 4u);
    struct Expect {
      const char* name;
      DType type;
      std::array<int64_t, 4> ne;
      int n_dims;
      const std::vector<uint8_t>* bytes;
    };
    const Expect expected[] = {
        {"w.f32", DType::F32, {7, 3, 1, 1}, 2, &t.f32},
        {"b.f16", DType::F16, {5, 1, 1, 1}, 1, &t.f16},
        {"experts.q8_0", DType::Q8_0, {64, 3, 2, 1}, 3, &t.q8},
        {"blocks.q4_0", DType::Q4_0, {32, 5, 1, 2}, 4, &t.q4},
    };
    for (size_t k = 0; k < 4; ++k) {
      const TensorView& v = f->tensors()[k];
      EXPECT_EQ(v.name, expected[k].name);
      EXPECT_EQ(v.type, expected[k].type);
      EXPECT_EQ(v.ne, expected[k].ne);
      EXPECT_EQ(v.n_dims, expected[k].n_dims);
      ASSERT_EQ(uint64_t(v.bytes()), expected[k].bytes->size());
      EXPECT_EQ(std::memcmp(v.data, expected[k].bytes->data(), expected[k].bytes->size()), 0) << v.name;
      const uint64_t offset = uint64_t(static_cast<const uint8_t*>(v.data) - f->mapped_data());
      EXPECT_EQ(offset % alignment, 0u) << v.name;
      EXPECT_EQ(f->find_tensor(expected[k].name), &v);
    }
    EXPECT_EQ(&f->require_tensor("experts.q8_0"), &f->tensors()[2]);
    EXPECT_EQ(f->find_tensor("nope"), nullptr);
  }
}

TEST(Gguf, RewriteReproducesTheFileByteForByte) {
  TempDir dir;
  SampleTensors t;
  for (uint64_t alignment : {32u, 128u}) {
    const std::string a = dir.path("a.gguf"), b = dir.path("b.gguf");
    sample_writer(t).write(a, alignment);
    auto first = GgufFile::open(a);
    GgufWriter w;
    for (const auto& [k, v] : first->metadata()) w.set(k, v);
    for (const TensorView& v : first->tensors())
      w.add_tensor(v.name, v.type, std::vector<int64_t>(v.ne.begin(), v.ne.begin() + v.n_dims), v.data,
                   uint64_t(v.bytes()));
    w.write(b, alignment);
    auto second = GgufFile::open(b);
    ASSERT_EQ(first->metadata().size(), second->metadata().size());
    for (size_t k = 0; k < first->metadata().size(); ++k) {
      EXPECT_EQ(first->metadata()[k].first, second->metadata()[k].first);
      expect_same_value(first->metadata()[k].second, second->metadata()[k].second, first->metadata()[k].first);
    }
    EXPECT_EQ(read_bytes(a), read_bytes(b)) << "alignment " << alignment;
  }
}

TEST(Gguf, WritingWithDefaultAlignmentFixesAStaleAlignmentKey) {
  TempDir dir;
  GgufWriter w;
  w.set("general.alignment", GgufValue::u32(64));
  const float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  w.add_tensor("a", DType::F32, {3}, x, 12);
  w.add_tensor("b", DType::F32, {5}, x + 3, 20);
  w.write(dir.path("m.gguf"));  // 32
  auto f = GgufFile::open(dir.path("m.gguf"));
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->get_int("general.alignment", 0), 32);
  EXPECT_EQ(f->require_tensor("b").f32()[4], 8.0f);
}

TEST(Gguf, SetReplacesAndKeepsOrder) {
  TempDir dir;
  GgufWriter w;
  w.set("a", GgufValue::u32(1));
  w.set("b", GgufValue::u32(2));
  w.set("a", GgufValue::string("one"));
  w.write(dir.path("m.gguf"));
  auto f = GgufFile::open(dir.path("m.gguf"));
  ASSERT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->metadata()[0].first, "a");
  EXPECT_EQ(f->get_string("a", ""), "one");
  EXPECT_TRUE(f->tensors().empty());
}

TEST(Gguf, TypedGetters) {
  TempDir dir;
  SampleTensors t;
  sample_writer(t).write(dir.path("m.gguf"));
  auto f = GgufFile::open(dir.path("m.gguf"));
  // Fallbacks for absent keys.
  EXPECT_EQ(f->get_int("absent", 7), 7);
  EXPECT_EQ(f->get_float("absent", 1.5), 1.5);
  EXPECT_TRUE(f->get_bool("absent", true));
  EXPECT_EQ(f->get_string("absent", "fb"), "fb");
  EXPECT_TRUE(f->get_string_array("absent").empty());
  EXPECT_TRUE(f->get_int_array("absent").empty());
  EXPECT_TRUE(f->get_float_array("absent").empty());
  // Widening.
  EXPECT_EQ(f->get_float("u32", 0), 4000000000.0);
  EXPECT_EQ(f->get_float("u64", 0), 18446744073709551615.0);
  EXPECT_EQ(f->get_float_array("ids"), (std::vector<double>{1, -2, 3, 2147483647, -2147483648.0}));
  EXPECT_EQ(f->require_int("i16"), -32768);
  EXPECT_EQ(f->require_float("f64"), 3.141592653589793);
  EXPECT_EQ(f->require_string("general.architecture"), "diffusiongemma");
  EXPECT_TRUE(f->find("u32")->is_integer());
  EXPECT_FALSE(f->find("flag")->is_integer());
  EXPECT_TRUE(f->find("f32")->is_float());

  auto expect_error = [](auto&& fn, const std::string& needle1, const std::string& needle2) {
    try {
      fn();
      ADD_FAILURE() << "expected an error mentioning " << needle1;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(needle1), std::string::npos) << msg;
      EXPECT_NE(msg.find(needle2), std::string::npos) << msg;
    }
  };
  expect_error([&] { f->get_int("general.name", 0); }, "general.name", "string");
  expect_error([&] { f->get_int("f32", 0); }, "'f32'", "float32");
  expect_error([&] { f->get_int("flag", 0); }, "'flag'", "bool");
  expect_error([&] { f->get_int("u64", 0); }, "'u64'", "int64");  // 2^64 - 1 does not fit
  expect_error([&] { f->get_float("general.name", 0); }, "general.name", "number");
  expect_error([&] { f->get_bool("u8", false); }, "'u8'", "bool");
  expect_error([&] { f->get_string("u8", ""); }, "'u8'", "uint8");
  expect_error([&] { f->get_string("tokens", ""); }, "'tokens'", "array of string");
  expect_error([&] { f->get_string_array("ids"); }, "'ids'", "array of int32");
  expect_error([&] { f->get_string_array("general.name"); }, "general.name", "string");
  expect_error([&] { f->get_int_array("scores"); }, "'scores'", "float32");
  expect_error([&] { f->get_float_array("tokens"); }, "'tokens'", "string");
  expect_error([&] { f->require_int("missing.key"); }, "missing key", "missing.key");
  expect_error([&] { f->require_float("missing.key"); }, "missing key", "missing.key");
  expect_error([&] { f->require_string("missing.key"); }, "missing key", "missing.key");
  expect_error([&] { f->require_int("general.name"); }, "general.name", "integer");
  expect_error([&] { f->require_tensor("output.weight"); }, "output.weight", dir.path("m.gguf"));
}

TEST(Gguf, ToString) {
  EXPECT_EQ(GgufValue::u32(7).to_string(), "7");
  EXPECT_EQ(GgufValue::u64(18446744073709551615ull).to_string(), "18446744073709551615");
  EXPECT_EQ(GgufValue::integer(GgufType::Int8, -3).to_string(), "-3");
  EXPECT_EQ(GgufValue::boolean(true).to_string(), "true");
  EXPECT_EQ(GgufValue::f32(0.1f).to_string(), "0.1");
  EXPECT_EQ(GgufValue::f64(0.25).to_string(), "0.25");
  EXPECT_EQ(GgufValue::string("a \"b\"\n\x01").to_string(), "\"a \\\"b\\\"\\n\\x01\"");
  EXPECT_EQ(GgufValue::int_array(GgufType::Int32, {1, 2, 3}).to_string(), "[1, 2, 3] (3 x int32)");
  EXPECT_EQ(GgufValue::int_array(GgufType::Bool, {1, 0}).to_string(), "[true, false] (2 x bool)");
  EXPECT_EQ(GgufValue::string_array({"a", "b", "c", "d"}).to_string(2), "[\"a\", \"b\", ...] (4 x string)");
  EXPECT_EQ(GgufValue::float_array({0.5f}).to_string(), "[0.5] (1 x float32)");
  EXPECT_EQ(GgufValue::int_array(GgufType::Uint8, {}).to_string(), "[] (0 x uint8)");
  std::vector<int64_t> many(100000, 5);
  EXPECT_LT(GgufValue::int_array(GgufType::Int32, many).to_string().size(), 80u);
  EXPECT_LT(GgufValue::string(std::string(100000, 'x')).to_string().size(), 200u);
  EXPECT_STREQ(gguf_type_name(GgufType::Float64), "float64");
  EXPECT_STREQ(gguf_type_name(GgufType(99)), "unknown");
}

// canvas inspect's listing: the header, each key with its type (arrays cut to max_items), every tensor with
// its offset, and the totals.
TEST(Gguf, ListingShowsHeaderKeysTensorsAndTotals) {
  const auto file = GgufFile::open(test::fixture("tiny-llada.gguf"));
  const std::string cut = gguf_listing(*file, 2);
  EXPECT_EQ(cut.rfind("file: " + file->path() + "\nGGUF version 3, ", 0), 0u) << cut.substr(0, 200);
  EXPECT_NE(cut.find("metadata (" + std::to_string(file->metadata().size()) + " keys):\n"), std::string::npos);
  EXPECT_NE(cut.find("  general.architecture"), std::string::npos);
  EXPECT_NE(cut.find("tensors (" + std::to_string(file->tensors().size()) + "):\n"), std::string::npos);
  int64_t elements = 0;
  for (const TensorView& t : file->tensors()) {
    EXPECT_NE(cut.find("  " + t.name + " "), std::string::npos) << t.name;
    elements += t.elements();
  }
  EXPECT_NE(cut.find("\n" + std::to_string(elements) + " parameters, "), std::string::npos);
  EXPECT_NE(cut.find(", ...] ("), std::string::npos);  // the vocabulary, cut
  EXPECT_GT(gguf_listing(*file, size_t(-1)).size(), cut.size());
}

TEST(Gguf, WriterRejectsBadInput) {
  TempDir dir;
  const float x[64] = {};
  GgufWriter w;
  EXPECT_THROW(w.add_tensor("t", DType::F32, {3}, x, 16), Error);            // byte size mismatch
  EXPECT_THROW(w.add_tensor("t", DType::Q8_0, {33}, x, 34), Error);          // not a block multiple
  EXPECT_THROW(w.add_tensor("t", DType::F32, {}, x, 4), Error);              // no dims
  EXPECT_THROW(w.add_tensor("t", DType::F32, {1, 1, 1, 1, 1}, x, 4), Error); // too many dims
  EXPECT_THROW(w.add_tensor("t", DType::F32, {0}, x, 0), Error);             // zero dim
  EXPECT_THROW(w.add_tensor("t", DType::F32, {int64_t(1) << 62, 4}, x, 0), Error);  // overflow
  EXPECT_THROW(w.add_tensor("t", DType(4), {1}, x, 4), Error);               // unknown dtype
  EXPECT_THROW(w.add_tensor("t", DType::F32, {1}, nullptr, 4), Error);       // no data
  w.add_tensor("t", DType::F32, {3}, x, 12);
  EXPECT_THROW(w.add_tensor("t", DType::F32, {3}, x, 12), Error);  // duplicate
  EXPECT_THROW(w.write(dir.path("a.gguf"), 0), Error);
  EXPECT_THROW(w.write(dir.path("a.gguf"), 48), Error);
  EXPECT_THROW(GgufValue::int_array(GgufType::String, {1}), Error);
  EXPECT_THROW(GgufValue::integer(GgufType::Float32, 1), Error);

  GgufWriter range;
  range.set("small", GgufValue::int_array(GgufType::Uint8, {1, 256}));
  try {
    range.write(dir.path("b.gguf"));
    ADD_FAILURE() << "expected an out-of-range error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'small'"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir.path("b.gguf")));
  EXPECT_FALSE(fs::exists(temp_file_for(dir.path("b.gguf"))));
  EXPECT_THROW(w.write(dir.path("no/such/dir/c.gguf")), Error);
}

TEST(Gguf, OpenRejectsMissingEmptyAndDirectoryPaths) {
  TempDir dir;
  expect_open_error(dir.path("does_not_exist.gguf"), "cannot open");
  fs::create_directories(dir.path("subdir"));
  expect_open_error(dir.path("subdir"), "directory");
  write_bytes(dir.path("empty.gguf"), {});
  expect_open_error(dir.path("empty.gguf"), "empty");
}

// ---------------------------------------------------------------------------------------------------
// Hand-crafted headers.

struct Raw {
  std::vector<uint8_t> b;
  Raw& u8(uint8_t v) { return put(v); }
  Raw& u32(uint32_t v) { return put(v); }
  Raw& u64(uint64_t v) { return put(v); }
  Raw& str(const std::string& s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Raw& header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
    return u32(0x46554747).u32(version).u64(tensors).u64(kvs);
  }
  Raw& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(uint32_t(GgufType::Uint32)).u32(v); }
  Raw& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(uint32_t(ne.size()));
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }
  Raw& pad_to(size_t alignment) {
    b.resize((b.size() + alignment - 1) / alignment * alignment, 0);
    return *this;
  }
  Raw& zeros(size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
  template <class T>
  Raw& put(T v) {
    const size_t at = b.size();
    b.resize(at + sizeof(T));
    std::memcpy(b.data() + at, &v, sizeof(T));
    return *this;
  }
};

TEST(Gguf, HandCraftedValidFilesOpen) {
  TempDir dir;
  // Version 2, one f32 tensor, default alignment, zero tensors with no data section at all.
  const std::string p = dir.path("v2.gguf");
  write_bytes(p, Raw().header(1, 1, 2).kv_u32("k", 5).tensor("t", {4}, 0, 0).pad_to(32).zeros(16).b);
  auto f = GgufFile::open(p);
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->get_int("k", 0), 5);
  EXPECT_EQ(f->require_tensor("t").elements(), 4);
  write_bytes(p, Raw().header(0, 0).b);
  EXPECT_TRUE(GgufFile::open(p)->tensors().empty());
}

TEST(Gguf, HandCraftedMaliciousHeadersFailClearly) {
  TempDir dir;
  const std::string p = dir.path("evil.gguf");
  const uint64_t huge = ~uint64_t(0);
  const uint32_t kArray = uint32_t(GgufType::Array), kString = uint32_t(GgufType::String);
  struct Case {
    const char* what;
    std::vector<uint8_t> bytes;
    const char* needle;
  };
  const Case cases[] = {
      {"bad magic", Raw().u32(0x46554746).u32(3).u64(0).u64(0).b, "magic"},
      {"ggml magic", Raw().u32(0x67676d6c).u32(3).u64(0).u64(0).b, "magic"},
      {"short magic", Raw().u8('G').u8('G').b, "end of file"},
      {"version 1", Raw().header(0, 0, 1).b, "version 1"},
      {"version 4", Raw().header(0, 0, 4).b, "version 4"},
      {"version 0x03000000 (big-endian v3)", Raw().header(0, 0, 0x03000000).b, "version"},
      {"truncated counts", Raw().u32(0x46554747).u32(3).u64(0).u32(0).b, "end of file"},
      {"huge tensor count", Raw().header(huge, 0).zeros(64).b, "tensor count"},
      {"huge kv count", Raw().header(0, uint64_t(1) << 60).zeros(64).b, "absurd"},
      {"kv count beyond data", Raw().header(0, 2).kv_u32(std::string(20, 'k'), 1).b, "end of file"},
      {"huge key length", Raw().header(0, 1).u64(huge).u32(4).u32(0).b, "string length"},
      {"key length past end", Raw().header(0, 1).u64(100).u32(4).u32(0).b, "end of file"},
      {"huge string value", Raw().header(0, 1).str("k").u32(kString).u64(huge - 7).zeros(8).b, "string length"},
      {"unknown value type", Raw().header(0, 1).str("k").u32(13).u32(0).b, "unknown value type 13"},
      {"unknown value type max", Raw().header(0, 1).str("k").u32(0xffffffffu).u32(0).b, "unknown value type"},
      {"huge array", Raw().header(0, 1).str("k").u32(kArray).u32(0).u64(uint64_t(1) << 62).zeros(16).b, "absurd"},
      {"huge string array", Raw().header(0, 1).str("k").u32(kArray).u32(kString).u64(1000).zeros(100).b, "absurd"},
      {"array past end", Raw().header(0, 1).str("k").u32(kArray).u32(kString).u64(4).str("abcdefghijkl").zeros(16).b,
       "end of file"},
      {"bad array type", Raw().header(0, 1).str("k").u32(kArray).u32(77).u64(1).zeros(8).b, "element value type"},
      {"nested array", Raw().header(0, 1).str("k").u32(kArray).u32(kArray).u64(1).zeros(16).b, "nested"},
      {"bad bool", Raw().header(0, 1).str("k").u32(uint32_t(GgufType::Bool)).u8(2).zeros(8).b, "bool"},
      {"duplicate key", Raw().header(0, 2).kv_u32("k", 1).kv_u32("k", 2).b, "duplicate metadata key"},
      {"alignment 0", Raw().header(0, 1).kv_u32("general.alignment", 0).b, "alignment"},
      {"alignment 3", Raw().header(0, 1).kv_u32("general.alignment", 3).b, "alignment"},
      {"alignment 2^31", Raw().header(0, 1).kv_u32("general.alignment", 1u << 31).b, "alignment"},
      {"alignment string", Raw().header(0, 1).str("general.alignment").u32(kString).str("32").b, "alignment"},
      {"unknown dtype 4", Raw().header(1, 0).tensor("t", {32}, 4, 0).pad_to(32).zeros(64).b, "dtype id 4"},
      {"unknown dtype big", Raw().header(1, 0).tensor("t", {32}, 1000, 0).pad_to(32).zeros(64).b, "dtype"},
      {"n_dims 0", Raw().header(1, 0).str("t").u32(0).u32(0).u64(0).zeros(32).b, "n_dims"},
      {"n_dims 5", Raw().header(1, 0).tensor("t", {1, 1, 1, 1, 1}, 0, 0).pad_to(32).zeros(32).b, "n_dims"},
      {"huge n_dims", Raw().header(1, 0).str("t").u32(0xffffffffu).zeros(64).b, "n_dims"},
      {"zero dim", Raw().header(1, 0).tensor("t", {4, 0}, 0, 0).pad_to(32).zeros(32).b, "dimension"},
      {"negative dim", Raw().header(1, 0).tensor("t", {huge}, 0, 0).pad_to(32).zeros(32).b, "dimension"},
      {"element overflow", Raw().header(1, 0).tensor("t", {1ull << 32, 1ull << 32}, 0, 0).pad_to(32).b, "overflow"},
      {"byte overflow", Raw().header(1, 0).tensor("t", {1ull << 62}, 0, 0).pad_to(32).b, "overflow"},
      {"rows byte overflow", Raw().header(1, 0).tensor("t", {1ull << 31, 1ull << 31}, 0, 0).pad_to(32).b,
       "overflow"},
      {"not a block multiple", Raw().header(1, 0).tensor("t", {33}, 8, 0).pad_to(32).zeros(64).b, "block size"},
      {"misaligned offset", Raw().header(1, 0).tensor("t", {4}, 0, 8).pad_to(32).zeros(64).b, "not aligned"},
      {"offset past end", Raw().header(1, 0).tensor("t", {4}, 0, 64).pad_to(32).zeros(16).b, "end of file"},
      {"offset overflow", Raw().header(1, 0).tensor("t", {4}, 0, huge - 31).pad_to(32).zeros(16).b, "end of file"},
      {"data past end", Raw().header(1, 0).tensor("t", {8}, 0, 0).pad_to(32).zeros(16).b, "end of file"},
      {"duplicate tensor", Raw().header(2, 0).tensor("t", {4}, 0, 0).tensor("t", {4}, 0, 32).pad_to(32).zeros(64).b,
       "duplicate tensor name"},
      {"overlap", Raw().header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {4}, 0, 32).pad_to(32).zeros(64).b,
       "overlap"},
      {"huge tensor name", Raw().header(1, 0).u64(huge).zeros(40).b, "string length"},
      {"truncated tensor info", Raw().header(1, 0).str(std::string(30, 't')).u32(2).u64(4).b, "end of file"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    write_bytes(p, c.bytes);
    expect_open_error(p, c.needle);
  }
}

// ---------------------------------------------------------------------------------------------------
// Fuzz-style: truncation at every length and random mutations of a small valid file.

std::vector<uint8_t> small_valid_file(const TempDir& dir) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::string("llada"));
  w.set("general.alignment", GgufValue::u32(32));
  w.set("n", GgufValue::u32(3));
  w.set("i64", GgufValue::integer(GgufType::Int64, -5));
  w.set("eps", GgufValue::f32(1e-6f));
  w.set("f64", GgufValue::f64(2.0));
  w.set("on", GgufValue::boolean(true));
  w.set("tokens", GgufValue::string_array({"a", "bc", "", "def"}));
  w.set("types", GgufValue::int_array(GgufType::Int32, {1, 2, 3}));
  w.set("u16s", GgufValue::int_array(GgufType::Uint16, {7, 8}));
  w.set("bools", GgufValue::int_array(GgufType::Bool, {0, 1}));
  w.set("scores", GgufValue::float_array({0.5f, 1.5f}));
  static const std::vector<uint8_t> f32 = random_bytes(3 * 2 * 4, 11);
  static const std::vector<uint8_t> f16 = random_bytes(3 * 2, 12);
  static const std::vector<uint8_t> q8 = random_bytes(34 * 2, 13);
  static const std::vector<uint8_t> q4 = random_bytes(18 * 2, 14);
  w.add_tensor("a", DType::F32, {3, 2}, f32.data(), f32.size());
  w.add_tensor("bb", DType::F16, {3}, f16.data(), f16.size());
  w.add_tensor("q8", DType::Q8_0, {32, 2}, q8.data(), q8.size());
  w.add_tensor("q4", DType::Q4_0, {32, 1, 2}, q4.data(), q4.size());
  w.write(dir.path("valid.gguf"));
  return read_bytes(dir.path("valid.gguf"));
}

TEST(GgufFuzz, TruncationAtEveryLengthFails) {
  TempDir dir;
  const std::vector<uint8_t> valid = small_valid_file(dir);
  ASSERT_GT(valid.size(), 400u);
  ASSERT_LT(valid.size(), 4000u);
  touch_everything(*GgufFile::open(dir.path("valid.gguf")));
  const std::string p = dir.path("cut.gguf");
  for (size_t n = 0; n < valid.size(); ++n) {
    write_bytes(p, valid.data(), n);
    try {
      GgufFile::open(p);
      ADD_FAILURE() << "a file cut to " << n << " of " << valid.size() << " bytes opened";
    } catch (const Error& e) {
      const std::string msg = e.what();
      const bool named = msg.find("end of file") != std::string::npos || msg.find("empty") != std::string::npos ||
                         msg.find("absurd") != std::string::npos;
      EXPECT_TRUE(named) << "cut at " << n << ": " << msg;
      EXPECT_NE(msg.find(p), std::string::npos) << msg;
    }
  }
}

TEST(GgufFuzz, RandomMutationsNeverCrash) {
  TempDir dir;
  const std::vector<uint8_t> valid = small_valid_file(dir);
  const uint64_t header_end = GgufFile::open(dir.path("valid.gguf"))->data_offset();
  const std::string p = dir.path("mutant.gguf");
  std::mt19937_64 rng(20240601);
  int opened = 0, rejected = 0;
  // CANVAS_GGUF_FUZZ_TRIALS=100000 runs a longer campaign by hand (e.g. under -fsanitize=address,undefined).
  const char* env = std::getenv("CANVAS_GGUF_FUZZ_TRIALS");
  const int trials = env != nullptr ? std::max(3000, std::atoi(env)) : 3000;
  for (int trial = 0; trial < trials; ++trial) {
    std::vector<uint8_t> bytes = valid;
    const int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      // Mostly hit the header, where the parser's decisions live.
      const size_t pos = (rng() % 5 != 0) ? size_t(rng() % header_end) : size_t(rng() % bytes.size());
      switch (rng() % 4) {
        case 0: bytes[pos] ^= uint8_t(1u << (rng() % 8)); break;
        case 1: bytes[pos] = uint8_t(rng()); break;
        case 2: bytes[pos] = 0xff; break;
        default: bytes[pos] = 0; break;
      }
    }
    if (rng() % 10 == 0) bytes.resize(size_t(rng() % bytes.size()));  // sometimes also truncate
    write_bytes(p, bytes);
    try {
      auto f = GgufFile::open(p);
      touch_everything(*f);
      ++opened;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
      ++rejected;
    }
  }
  // Both outcomes must occur: flips in tensor data or string bytes are harmless, most header flips are not.
  EXPECT_GT(opened, 50);
  EXPECT_GT(rejected, 1000);
}

TEST(GgufFuzz, RandomGarbageAfterMagicNeverCrashes) {
  TempDir dir;
  const std::string p = dir.path("garbage.gguf");
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    Raw r;
    r.header(rng() % 4, rng() % 6, 3);
    const size_t n = size_t(rng() % 300);
    for (size_t k = 0; k < n; ++k) r.u8(uint8_t(rng() % 3 == 0 ? rng() % 14 : rng()));
    write_bytes(p, r.b);
    try {
      touch_everything(*GgufFile::open(p));
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace canvas
