// Tests for the safetensors reader (single file and sharded checkpoints, ggml-order shapes, every kind of
// corrupt header) and for the JSON config helpers (key paths, defaults, type errors).
#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "io/json.h"
#include "test_util.h"

namespace canvas {
namespace {

namespace fs = std::filesystem;

std::string hf_fixture(const std::string& name) {
  return test::fixture("hf/" + name);
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

// u64 little-endian header length + header + data.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

// Runs `fn`, expects a canvas::Error whose message contains every one of `parts`.
void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown; expected one mentioning '" << *parts.begin() << "'";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const std::string& part : parts)
      EXPECT_NE(message.find(part), std::string::npos) << "message: " << message << "\nmissing: " << part;
  }
}

// Reads element i (flat, C order of the safetensors shape = ggml order from ne[0]) as float.
float value_at(const TensorView& t, int64_t i) {
  const auto* p = static_cast<const uint8_t*>(t.data);
  uint16_t h;
  switch (t.type) {
    case DType::F32: {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    case DType::F16:
      std::memcpy(&h, p + 2 * i, 2);
      return f16_to_f32(h);
    case DType::BF16:
      std::memcpy(&h, p + 2 * i, 2);
      return bf16_to_f32(h);
    default:
      ADD_FAILURE() << "unexpected dtype";
      return 0;
  }
}

// The fixture's tensors, as make_hf_fixtures.py defines them (values are exact in every dtype).
struct Expected {
  const char* name;
  DType type;
  std::array<int64_t, 4> ne;  // ggml order
  int n_dims;
  std::function<double(int64_t)> value;
};
const std::vector<Expected>& expected_tensors() {
  static const std::vector<Expected> list = {
      {"model.embed_tokens.weight", DType::F32, {3, 4, 1, 1}, 2, [](int64_t i) { return i * 0.5 - 1.0; }},
      {"model.norm.weight",
       DType::BF16,
       {3, 1, 1, 1},
       1,
       [](int64_t i) {
         return std::array<double, 3>{1.0, -2.5, 0.125}[size_t(i)];
       }},
      {"model.layers.0.self_attn.q_proj.weight",
       DType::F16,
       {3, 2, 1, 1},
       2,
       [](int64_t i) { return (i - 2.0) * 0.75; }},
      {"model.layers.0.experts.gate_up_proj",
       DType::BF16,
       {4, 3, 2, 1},
       3,
       [](int64_t i) { return i * 0.25 - 3.0; }},
      {"model.layers.0.layer_scalar", DType::F32, {1, 1, 1, 1}, 1, [](int64_t) { return 0.5; }},
      {"model.step", DType::F32, {1, 1, 1, 1}, 1, [](int64_t) { return 7.0; }},
  };
  return list;
}

void check_fixture_model(const SafetensorsModel& model) {
  ASSERT_EQ(model.tensors().size(), expected_tensors().size());
  for (const Expected& e : expected_tensors()) {
    SCOPED_TRACE(e.name);
    const TensorView* t = model.find_tensor(e.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->name, e.name);
    EXPECT_EQ(t->type, e.type);
    EXPECT_EQ(t->ne, e.ne);
    EXPECT_EQ(t->n_dims, e.n_dims);
    for (int64_t i = 0; i < t->elements(); ++i)
      EXPECT_EQ(value_at(*t, i), float(e.value(i))) << "element " << i;
  }
  // ggml order: element (i0, i1, i2) of gate_up_proj [2, 3, 4] sits at i2*12 + i1*4 + i0, and row r of the
  // [out=4, in=3] embedding starts at r * row_size.
  const TensorView& experts = model.require_tensor("model.layers.0.experts.gate_up_proj");
  const TensorView second = experts.matrix(1);
  EXPECT_EQ(bf16_to_f32(reinterpret_cast<const uint16_t*>(second.data)[1 * 4 + 2]),
            float((12 + 4 + 2) * 0.25 - 3.0));
  const TensorView& embed = model.require_tensor("model.embed_tokens.weight");
  EXPECT_EQ(reinterpret_cast<const float*>(embed.row(2))[1], float((2 * 3 + 1) * 0.5 - 1.0));
}

TEST(SafetensorsTest, SingleFileValuesShapesAndDtypes) {
  const auto model = SafetensorsModel::open(hf_fixture("model.safetensors"));
  check_fixture_model(*model);
  EXPECT_EQ(model->files().size(), 1u);
  EXPECT_EQ(model->metadata().at("format"), "pt");
  EXPECT_EQ(model->file_of("model.step"), hf_fixture("model.safetensors"));
  // Tensors come in file (data offset) order.
  EXPECT_EQ(model->tensors().front().name, "model.embed_tokens.weight");
  EXPECT_EQ(model->tensors().back().name, "model.step");
}

TEST(SafetensorsTest, DirectoryWithSingleFile) {
  const auto model = SafetensorsModel::open(test::fixture("hf"));
  check_fixture_model(*model);
}

TEST(SafetensorsTest, ShardedCheckpointThroughIndex) {
  for (const std::string& path :
       {hf_fixture("sharded"), hf_fixture("sharded/model.safetensors.index.json")}) {
    SCOPED_TRACE(path);
    const auto model = SafetensorsModel::open(path);
    check_fixture_model(*model);
    EXPECT_EQ(model->files().size(), 2u);
    EXPECT_EQ(fs::path(model->file_of("model.norm.weight")).filename(), "model-00001-of-00002.safetensors");
    EXPECT_EQ(fs::path(model->file_of("model.layers.0.layer_scalar")).filename(),
              "model-00002-of-00002.safetensors");
  }
}

TEST(SafetensorsTest, MissingTensorNamesItAndTheFile) {
  const auto model = SafetensorsModel::open(hf_fixture("model.safetensors"));
  EXPECT_EQ(model->find_tensor("nope"), nullptr);
  expect_error([&] { model->require_tensor("model.layers.7.mlp.up_proj.weight"); },
               {"model.layers.7.mlp.up_proj.weight", "model.safetensors", "missing tensor"});
  expect_error([&] { model->file_of("nope"); }, {"'nope'"});
}

TEST(SafetensorsTest, TruncatedAtEveryLength) {
  const std::string bytes = read_bytes(hf_fixture("model.safetensors"));
  uint64_t header_size;
  std::memcpy(&header_size, bytes.data(), 8);
  ASSERT_LT(8 + header_size, bytes.size());
  const std::string path = test::temp_path("truncated.safetensors");
  for (size_t length = 0; length < bytes.size(); ++length) {
    SCOPED_TRACE("length " + std::to_string(length));
    write_bytes(path, bytes.substr(0, length));
    if (length < 8)
      expect_error([&] { SafetensorsFile::open(path); }, {path, "too short"});
    else if (length < 8 + header_size)
      expect_error([&] { SafetensorsFile::open(path); }, {path, "header length", "runs past the end"});
    else
      expect_error([&] { SafetensorsFile::open(path); }, {path, "run past the end of the data"});
  }
  std::remove(path.c_str());
}

TEST(SafetensorsTest, MalformedHeaderJson) {
  const std::string path = test::temp_path("badjson.safetensors");
  std::string bytes = read_bytes(hf_fixture("model.safetensors"));
  const size_t colon = bytes.find(':', 8);
  bytes[colon] = ';';
  write_bytes(path, bytes);
  expect_error([&] { SafetensorsFile::open(path); }, {path, "malformed JSON", "line 1, column"});
  // Invalid UTF-8 inside a name.
  bytes = read_bytes(hf_fixture("model.safetensors"));
  bytes[bytes.find("model.norm") + 2] = char(0xFF);
  write_bytes(path, bytes);
  expect_error([&] { SafetensorsFile::open(path); }, {path, "malformed JSON"});
  // Header length field absurdly large.
  bytes = read_bytes(hf_fixture("model.safetensors"));
  const uint64_t huge = uint64_t(1) << 63;
  std::memcpy(bytes.data(), &huge, 8);
  write_bytes(path, bytes);
  expect_error([&] { SafetensorsFile::open(path); }, {path, "9223372036854775808", "runs past the end"});
  std::remove(path.c_str());
}

TEST(SafetensorsTest, CraftedHeadersGiveClearErrors) {
  const std::string path = test::temp_path("crafted.safetensors");
  struct Case {
    std::string header;
    size_t data_bytes;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
       4,
       {"tensor 'a'", "[0, 8]", "past the end of the data"}},
      {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
       16,
       {"tensor 'a'", "hold 8 bytes", "needs 12"}},
      {R"({"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,16]}})",
       16,
       {"tensor 'a'", "hold 16 bytes", "needs 8"}},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       16,
       {"'a'", "'b'", "overlap"}},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       8,
       {"key 'a' appears twice"}},
      {R"({"ids":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
       8,
       {"tensor 'ids'", "I64", "not supported", "F32, F16 and BF16"}},
      {R"({"q":{"dtype":"Q9","shape":[1],"data_offsets":[0,1]}})", 1, {"tensor 'q'", "unknown dtype 'Q9'"}},
      {R"({"a":{"dtype":"F32","shape":[1,1,1,1,1],"data_offsets":[0,4]}})",
       4,
       {"tensor 'a'", "5 dimensions", "at most 4"}},
      {R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
       4,
       {"tensor 'a'", "not a non-negative integer"}},
      {R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})",
       4,
       {"tensor 'a'", "not a non-negative integer"}},
      {R"({"a":{"dtype":"F32","shape":[1099511627776,1099511627776,1099511627776],"data_offsets":[0,4]}})",
       4,
       {"tensor 'a'", "absurd"}},
      {R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,4]}})",
       4,
       {"tensor 'a'", "absurd"}},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})",
       8,
       {"tensor 'a'", "end before they begin"}},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})",
       4,
       {"tensor 'a'", "data_offsets should be"}},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}})",
       4,
       {"tensor 'a'", "past the end"}},
      {R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4, {"tensor 'a'", "needs \"dtype\""}},
      {R"({"a":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})",
       4,
       {"tensor 'a'", "dtype should be a string"}},
      {R"({"a":{"dtype":"F32","shape":1,"data_offsets":[0,4]}})",
       4,
       {"tensor 'a'", "shape should be an array"}},
      {R"({"a":[1,2]})", 4, {"tensor 'a'", "should be an object"}},
      {R"([1,2])", 0, {"header is JSON array"}},
      {R"({"__metadata__":{"format":1}})", 0, {"__metadata__", "'format'", "should be a string"}},
      {R"({"__metadata__":[]})", 0, {"__metadata__ should be an object"}},
      {"", 0, {"malformed JSON"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header);
    write_bytes(path, safetensors_bytes(c.header, std::string(c.data_bytes, '\0')));
    std::vector<std::string> parts = c.parts;
    parts.push_back(path);
    try {
      SafetensorsFile::open(path);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      for (const std::string& part : parts)
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what() << "\nmissing: " << part;
    }
  }
  // Accepted edge cases: an empty tensor, a 0-d tensor, a gap between tensors, padding spaces.
  write_bytes(path, safetensors_bytes(R"({"e":{"dtype":"F16","shape":[0,3],"data_offsets":[0,0]},)"
                                      R"("s":{"dtype":"F32","shape":[],"data_offsets":[4,8]}}    )",
                                      std::string(8, '\0')));
  const auto file = SafetensorsFile::open(path);
  ASSERT_EQ(file->tensors().size(), 2u);
  EXPECT_EQ(file->find_tensor("e")->elements(), 0);
  EXPECT_EQ((file->find_tensor("e")->ne), (std::array<int64_t, 4>{3, 0, 1, 1}));
  EXPECT_EQ(file->find_tensor("s")->elements(), 1);
  EXPECT_EQ(static_cast<const uint8_t*>(file->find_tensor("s")->data) -
                static_cast<const uint8_t*>(file->find_tensor("e")->data),
            4);
  std::remove(path.c_str());
}

TEST(SafetensorsTest, NotAFile) {
  expect_error([] { SafetensorsFile::open("/nonexistent/x.safetensors"); },
               {"/nonexistent/x.safetensors", "cannot open"});
  expect_error([] { SafetensorsFile::open(test::fixture("hf")); }, {"is a directory"});
  const std::string empty_dir = test::temp_path("emptydir");
  fs::create_directories(empty_dir);
  expect_error([&] { SafetensorsModel::open(empty_dir); }, {empty_dir, "neither"});
  fs::remove_all(empty_dir);
}

// Copies the sharded fixture into a temporary folder, lets `edit` break it, expects an error.
void expect_sharded_error(const std::function<void(const fs::path&)>& edit,
                          std::initializer_list<std::string> parts) {
  const fs::path dir = test::temp_path("shards");
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(hf_fixture("sharded")))
    fs::copy_file(entry.path(), dir / entry.path().filename());
  edit(dir);
  expect_error([&] { SafetensorsModel::open(dir.string()); }, parts);
  fs::remove_all(dir);
}

TEST(SafetensorsTest, ShardedErrors) {
  const std::string index_name = "model.safetensors.index.json";
  auto rewrite_index = [&](const fs::path& dir, const std::string& from, const std::string& to) {
    std::string text = read_bytes((dir / index_name).string());
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    write_bytes((dir / index_name).string(), text);
  };
  expect_sharded_error(
      [](const fs::path& dir) { fs::remove(dir / "model-00002-of-00002.safetensors"); },
      {index_name, "shard 'model-00002-of-00002.safetensors'", "is missing", "model.layers.0."});
  expect_sharded_error(
      [&](const fs::path& dir) {
        rewrite_index(dir, "\"model.step\": \"model-00001", "\"model.step\": \"model-00002");
      },
      {index_name, "tensor 'model.step'", "model-00002-of-00002.safetensors", "does not hold it"});
  expect_sharded_error(
      [&](const fs::path& dir) {
        rewrite_index(dir, "\"model.step\": \"model-00001", "\"model.step\": \"../model-00001");
      },
      {index_name, "'../model-00001-of-00002.safetensors'", "inside the index's folder"});
  expect_sharded_error([&](const fs::path& dir) { rewrite_index(dir, "\"weight_map\"", "\"weights\""); },
                       {index_name, "missing key 'weight_map'"});
  expect_sharded_error(
      [&](const fs::path& dir) {
        rewrite_index(dir, "\"model.step\": \"model-00001-of-00002.safetensors\"", "\"model.step\": 3");
      },
      {index_name, "tensor 'model.step'", "should be a shard file name"});
  expect_sharded_error([&](const fs::path& dir) { rewrite_index(dir, "{", "{{"); },
                       {index_name, "malformed JSON"});
  expect_sharded_error(
      [&](const fs::path& dir) {
        const std::string shard = (dir / "model-00001-of-00002.safetensors").string();
        write_bytes(shard, read_bytes(shard).substr(0, 20));
      },
      {index_name, "shard 'model-00001-of-00002.safetensors'", "runs past the end"});
}

// --- JSON config helpers ------------------------------------------------------------------------------

TEST(SafetensorsJsonConfig, NestedKeysDefaultsAndTypes) {
  const JsonDocument config = JsonDocument::load(hf_fixture("config.json"));
  EXPECT_EQ(config.require_float("text_config.rope_parameters.full_attention.rope_theta"), 1e6);
  EXPECT_EQ(config.require_float("text_config.rope_parameters.full_attention.partial_rotary_factor"), 0.25);
  EXPECT_EQ(config.require_string("text_config.rope_parameters.sliding_attention.rope_type"), "default");
  EXPECT_EQ(config.require_int("text_config.hidden_size"), 64);
  EXPECT_EQ(config.get_float("text_config.hidden_size", 0), 64.0);  // integers read as floats
  EXPECT_EQ(config.get_float("text_config.rms_norm_eps", 0), 1e-6);
  EXPECT_EQ(config.get_bool("text_config.attention_bias", true), false);
  EXPECT_EQ(config.get_int("text_config.num_key_value_heads", 8), 8);  // null -> default
  EXPECT_FALSE(config.has("text_config.num_key_value_heads"));
  EXPECT_EQ(config.get_int("text_config.not_there", -3), -3);
  EXPECT_EQ(config.get_int("no.such.path", 5), 5);
  EXPECT_EQ(config.get_string("text_config.layer_types.1", ""), "full_attention");
  EXPECT_EQ(config.get_string("text_config.layer_types.2", "x"), "x");
  EXPECT_EQ(config.get_string_array("text_config.layer_types"),
            (std::vector<std::string>{"sliding_attention", "full_attention"}));
  EXPECT_TRUE(config.get_int_array("absent").empty());

  expect_error([&] { config.get_int("text_config.rope_parameters.full_attention.rope_type", 0); },
               {"config.json", "text_config.rope_parameters.full_attention.rope_type", "integer", "string"});
  expect_error([&] { config.require_float("text_config.rope_parameters.full_attention.rope_base"); },
               {"config.json", "missing key 'text_config.rope_parameters.full_attention.rope_base'"});
  expect_error([&] { config.require_int("text_config.rms_norm_eps"); },
               {"text_config.rms_norm_eps", "an integer"});
  expect_error([&] { config.get_bool("text_config.hidden_size", false); },
               {"text_config.hidden_size", "boolean"});
  expect_error([&] { config.get_int_array("text_config.layer_types"); },
               {"text_config.layer_types[0]", "integer"});
  expect_error([&] { config.get_string_array("text_config.hidden_size"); },
               {"text_config.hidden_size", "array"});

  const JsonDocument generation = JsonDocument::load(hf_fixture("generation_config.json"));
  EXPECT_EQ(generation.get_int_or_int_array("eos_token_id"), (std::vector<int64_t>{1, 106, 50}));
  EXPECT_EQ(generation.get_int_or_int_array("pad_token_id"), (std::vector<int64_t>{0}));
  EXPECT_EQ(generation.get_float("t_max", 0), 0.8);
  EXPECT_EQ(generation.get_int("max_denoising_steps", 0), 48);
}

TEST(SafetensorsJsonConfig, ParseErrorsNameFileAndPosition) {
  expect_error([] { parse_json("{\"a\": 1,\n \"b\": tru}", "cfg.json"); },
               {"cfg.json", "malformed JSON", "line 2"});
  expect_error([] { parse_json("{\"a\": {\"b\": 1, \"b\": 2}}", "cfg.json"); },
               {"cfg.json", "key 'a.b' appears twice"});
  expect_error([] { parse_json("{\"a\": [{}, {\"c\": 1, \"c\": 1}]}", "cfg.json"); },
               {"key 'a[1].c' appears twice"});
  expect_error([] { parse_json("", "cfg.json"); }, {"cfg.json", "malformed JSON"});
  expect_error([] { load_json_file("/nonexistent/config.json"); },
               {"/nonexistent/config.json", "cannot open"});
  // Same key in different objects is fine; large and integral-float numbers convert.
  const JsonDocument doc =
      JsonDocument::parse(R"({"a": {"x": 1}, "b": {"x": 2}, "big": 1e6, "u": 18446744073709551615})", "t");
  EXPECT_EQ(doc.require_int("b.x"), 2);
  EXPECT_EQ(doc.require_int("big"), 1000000);
  expect_error([&] { doc.require_int("u"); }, {"'u'", "int64"});
}

}  // namespace
}  // namespace canvas
