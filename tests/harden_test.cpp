// Regression tests for hostile input found by probing: JSON nested deep enough to exhaust the stack, a
// tokenizer.json whose one huge id would size a multi-gigabyte table, FIFOs given as files, headers echoed
// whole into messages. Each input here once crashed, hung or misbehaved.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "io/bpe_json.h"
#include "io/gguf.h"
#include "io/hf_tokenizer.h"
#include "io/json.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/weight_check.h"
#include "train/data.h"
#include "test_util.h"

namespace canvas {
namespace {

void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown; expected one mentioning '" << *parts.begin() << "'";
  } catch (const Error& e) {
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "message: " << e.what() << "\nmissing: " << part;
  }
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

// A safetensors file holding `header` as its JSON header and no data.
std::string safetensors_bytes(const std::string& header) {
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  return bytes + header;
}

std::string nested(size_t depth, const std::string& inner = "1") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

TEST(HardenJson, DeepNestingIsAnErrorNotAStackOverflow) {
  // 100k levels: nlohmann parses it, but dump() and the destructor recurse per level.
  expect_error([] { parse_json(nested(100000), "deep.json"); }, {"deep.json", "nested more than 128"});
  expect_error([] { parse_json("{\"a\": " + nested(100000) + "}", "deep.json"); }, {"deep.json", "nested"});
  // Brackets inside strings do not count; the limit itself is accepted.
  EXPECT_NO_THROW(parse_json("[\"" + std::string(1000, '[') + "\"]", "s.json"));
  EXPECT_NO_THROW(parse_json(nested(128), "ok.json"));
  expect_error([] { parse_json(nested(129), "deep.json"); }, {"nested"});
  // A type error on a nested value prints an excerpt, not the whole value.
  const JsonDocument doc =
      JsonDocument::parse("{\"k\": " + nested(100, "\"" + std::string(5000, '7') + "\"") + "}", "d.json");
  try {
    doc.get_int("k", 0);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_LT(std::strlen(e.what()), 300u) << e.what();
  }
}

TEST(HardenJson, HugeNumberIsAShortError) {
  // nlohmann throws out_of_range (not parse_error) for a number past the double range, quoting it whole.
  try {
    parse_json("[" + std::string(5000, '7') + "]", "n.json");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n.json"), std::string::npos) << e.what();
    EXPECT_LT(std::strlen(e.what()), 300u);
  }
}

TEST(HardenJson, DeepNestingInEveryJsonInput) {
  test::TempDir dir;
  const std::string deep = "{\"__metadata__\": {\"x\": " + nested(100000) + "}}";
  write_bytes(dir.path("deep.safetensors"), safetensors_bytes(deep));
  expect_error([&] { SafetensorsFile::open(dir.path("deep.safetensors")); }, {"deep.safetensors", "nested"});

  std::filesystem::create_directories(dir.path("model"));
  write_bytes(dir.path("model/config.json"), "{\"model_type\": " + nested(100000) + "}");
  expect_error([&] { config_from_hf(dir.path("model/config.json")); }, {"config.json", "nested"});

  expect_error([] { HfTokenizer::from_json_text("{\"model\": {\"vocab\": {\"a\": " + nested(100000) + "}}}", "t.json"); },
               {"t.json", "nested"});
}

TEST(HardenTokenizerJson, HugeIdIsRefusedBeforeAllocating) {
  nlohmann::json doc = load_json_file(test::fixture("hf/tokenizer.json"));
  // One id far past the number of tokens: a gap, refused by counting, not by sizing a table to it.
  for (const int64_t id : {int64_t(1) << 27, int64_t(INT32_MAX) - 1}) {
    nlohmann::json edited = doc;
    edited["model"]["vocab"]["zzz-huge"] = id;
    expect_error([&] { HfTokenizer::from_json_text(edited.dump(), "huge.json"); },
                 {"huge.json", std::to_string(id), "names only"});
    edited = doc;
    edited["added_tokens"].push_back({{"id", id}, {"content", "<huge>"}, {"special", true}});
    expect_error([&] { HfTokenizer::from_json_text(edited.dump(), "huge.json"); }, {"added_tokens.8", "names only"});
  }
  EXPECT_NO_THROW(HfTokenizer::from_json_text(doc.dump(), "ok.json"));
}

TEST(HardenFiles, FifoIsRefusedWithoutBlocking) {
  test::TempDir dir;
  const std::string fifo = dir.path("model.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Before: open() on a FIFO with no writer blocks forever.
  expect_error([&] { GgufFile::open(fifo); }, {fifo, "not a regular file"});
  expect_error([&] { SafetensorsFile::open(fifo); }, {fifo, "not a regular file"});
  expect_error([&] { read_npy(fifo); }, {fifo, "not a regular file"});
  expect_error([&] { load_json_file(fifo); }, {fifo, "not a regular file"});
  expect_error([] { read_npy("/dev/zero"); }, {"/dev/zero", "not a regular file"});
}

TEST(HardenNpy, BadHeaderIsNotEchoedWhole) {
  test::TempDir dir;
  std::string header = "{'descr': '<f4', 'bogus" + std::string(20000, 'x') + "': 1}";
  header += '\n';
  std::string bytes = "\x93NUMPY";
  bytes += char(2);
  bytes += char(0);
  const uint32_t n = uint32_t(header.size());
  bytes.append(reinterpret_cast<const char*>(&n), 4);
  write_bytes(dir.path("bad.npy"), bytes + header);
  try {
    read_npy(dir.path("bad.npy"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad header"), std::string::npos) << e.what();
    EXPECT_LT(std::strlen(e.what()), 400u) << e.what();
  }
  // Control bytes are shown escaped, never written raw to a terminal.
  header = "{'descr': '\x1b[2J', 'fortran_order': False, 'shape': (1,), }\n";
  bytes.resize(8);
  const uint32_t m = uint32_t(header.size());
  bytes.append(reinterpret_cast<const char*>(&m), 4);
  write_bytes(dir.path("esc.npy"), bytes + header + std::string(4, '\0'));
  try {
    read_npy(dir.path("esc.npy"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find('\x1b'), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("\\x1b"), std::string::npos) << e.what();
  }
}

// A copy of a GGUF fixture with metadata edited by `meta` and tensors dropped or replaced by `tensor`
// (return false to drop; may point `data` at replacement bytes that live until the write).
std::string edited_gguf(const std::string& fixture, const std::string& out,
                        const std::function<void(GgufWriter&)>& meta,
                        const std::function<bool(const TensorView&, const void*&)>& tensor = nullptr) {
  auto file = GgufFile::open(test::fixture(fixture));
  GgufWriter writer;
  for (const auto& [key, value] : file->metadata()) writer.set(key, value);
  meta(writer);
  for (const TensorView& t : file->tensors()) {
    const void* data = t.data;
    if (tensor && !tensor(t, data)) continue;
    writer.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims), data,
                      uint64_t(t.bytes()));
  }
  writer.write(out);
  return out;
}

TEST(HardenModel, NonFiniteHyperParametersAreRefusedAtLoad) {
  test::TempDir dir;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  expect_error([&] {
    Model::load(edited_gguf("tiny-llada.gguf", dir.path("eps.gguf"),
                            [&](GgufWriter& w) { w.set("llada.attention.layer_norm_rms_epsilon", GgufValue::f32(nan)); }));
  }, {"eps.gguf", "layer_norm_rms_epsilon", "positive finite"});
  for (const float theta : {0.f, -10000.f, nan}) {
    expect_error([&] {
      Model::load(edited_gguf("tiny-llada.gguf", dir.path("theta.gguf"),
                              [&](GgufWriter& w) { w.set("llada.rope.freq_base", GgufValue::f32(theta)); }));
    }, {"theta.gguf", "rope.freq_base"});
  }
}

// A copy of tiny-llada.gguf at `out` whose f32 tensor `name` holds `value` (NaN by default): in every
// element, or in one.
std::string nan_gguf(const std::string& out, const std::string& name, bool every_element,
                     float value = std::numeric_limits<float>::quiet_NaN()) {
  std::vector<float> poisoned;
  return edited_gguf("tiny-llada.gguf", out, [](GgufWriter&) {}, [&](const TensorView& t, const void*& data) {
    if (t.name == name) {
      poisoned.assign(t.f32(), t.f32() + t.elements());
      for (size_t i = 0; i < poisoned.size(); ++i)
        if (every_element || i == 5) poisoned[i] = value;
      data = poisoned.data();
    }
    return true;
  });
}

// NaN or Inf in a weight is refused at load, naming the file, the tensor and the row; the sampled check of
// a large tensor reads its first and last rows, --check-weights every row.
TEST(HardenCli, NonFiniteWeightsAreRefusedAtLoad) {
  test::TempDir dir;
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    const std::string path = nan_gguf(dir.path("bad.gguf"), "blk.1.ffn_down.weight", false, bad);
    expect_error([&] { Model::load(path); }, {"bad.gguf", "blk.1.ffn_down.weight", "row 0", "NaN or Inf"});
    const test::CommandResult r = test::run_canvas("generate -m " + path + " -p 'And God' -n 4 --seed 1");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("blk.1.ffn_down.weight"), std::string::npos) << r.output;
  }
  // A finite model passes both scans, the full one reading every element of every weight.
  const Model clean = Model::load(test::fixture("tiny-llada.gguf"));
  const int64_t sampled = check_weights_finite(clean, WeightScan::Sampled, "clean");
  EXPECT_EQ(check_weights_finite(clean, WeightScan::Full, "clean"), sampled);  // every tensor is small: read whole
  EXPECT_GT(sampled, clean.config.vocab * clean.config.hidden);
  const test::CommandResult ok = test::run_canvas("generate -m " + test::fixture("tiny-llada.gguf") +
                                                  " -p 'And God' -n 4 --seed 1 --check-weights");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
}

// Weights that are finite but overflow the forward (3e38) reach the sampler as NaN/Inf logits: the run
// stops with an error naming the position instead of printing tokens picked from garbage.
TEST(HardenCli, NaNWeightsFailBeforeSampling) {
  test::TempDir dir;
  const std::string path = nan_gguf(dir.path("nan.gguf"), "output.weight", true, 3e38f);
  // Masked diffusion and AR stop alike, naming the sequence position of the bad row.
  for (const char* mode : {"", " --mode ar"}) {
    const test::CommandResult r = test::run_canvas("generate -m " + path + " -p 'And God' -n 4 --seed 1" + mode);
    EXPECT_NE(r.exit_code, 0) << mode << ": " << r.output;
    EXPECT_NE(r.output.find("not finite"), std::string::npos) << mode << ": " << r.output;
    EXPECT_NE(r.output.find("at position "), std::string::npos) << mode << ": " << r.output;
  }
}

// NaN in attention (issue 35): with one NaN weight in blk.0.attn_q, scalar stopped with "logits are not
// finite" while avx2 and avx512 printed text, their vector exp having turned the NaN attention scores into
// finite weights. NaN weights are now refused at load, so the scores are poisoned the way a forward can
// still poison them: attn_q weights of 3e38, finite, whose products overflow to inf - inf. Every SIMD level
// the machine has must stop the same way, autoregressive and diffusion decoding alike. Those weights
// overflow q8_0's f16 block scales: quantize refuses them instead of writing Inf scales.
TEST(HardenCli, OneNaNWeightFailsOnEverySimdLevel) {
  test::TempDir dir;
  const std::string path = nan_gguf(dir.path("nan-q.gguf"), "blk.0.attn_q.weight", true, 3e38f);
  const std::string q8 = dir.path("nan-q8.gguf");
  const test::CommandResult quantized = test::run_canvas("quantize " + path + " " + q8 + " q8_0");
  EXPECT_EQ(quantized.exit_code, 1) << quantized.output;
  EXPECT_NE(quantized.output.find("blk.0.attn_q.weight row 0"), std::string::npos) << quantized.output;
  EXPECT_NE(quantized.output.find("does not fit q8_0"), std::string::npos) << quantized.output;
  EXPECT_FALSE(std::filesystem::exists(q8));
  int levels = 0;
  for (const SimdLevel level : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
    if (int(level) > int(simd_level())) continue;  // not on this CPU
    ++levels;
    const std::string name = simd_level_name(level);
    for (const char* mode : {"", " --mode ar"}) {
      const test::CommandResult r = test::run_canvas("generate -m " + path + " -p 'And God' -n 4 --seed 1" + mode,
                                                     true, "CANVAS_SIMD=" + name);
      EXPECT_EQ(r.exit_code, 1) << name << mode << ": " << r.output;
      EXPECT_NE(r.output.find("not finite"), std::string::npos) << name << mode << ": " << r.output;
    }
    // The level was in force: the clean model's full stats line names it.
    const test::CommandResult clean = test::run_canvas(
        "generate -m " + test::fixture("tiny-llada.gguf") + " -p 'And God' -n 4 --seed 1 -v", true,
        "CANVAS_SIMD=" + name);
    ASSERT_EQ(clean.exit_code, 0) << clean.output;
    EXPECT_NE(clean.output.find(", " + name + ","), std::string::npos) << clean.output;
  }
  EXPECT_GE(levels, 1);
}

TEST(HardenModel, UnusedTensorsAreReported) {
  test::TempDir dir;
  // Expert tensors in a dense file: refused, naming the tensor.
  std::vector<float> extra(64, 0.f);
  const std::string path = edited_gguf("tiny-llada.gguf", dir.path("extra.gguf"), [](GgufWriter&) {});
  {
    auto file = GgufFile::open(path);
    GgufWriter writer;
    for (const auto& [key, value] : file->metadata()) writer.set(key, value);
    for (const TensorView& t : file->tensors())
      writer.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims), t.data,
                        uint64_t(t.bytes()));
    writer.add_tensor("blk.0.ffn_gate_exps.weight", DType::F32, {8, 8}, extra.data(), 64 * 4);
    writer.write(dir.path("experts.gguf"));
  }
  expect_error([&] { Model::load(dir.path("experts.gguf")); }, {"experts.gguf", "blk.0.ffn_gate_exps.weight", "not used"});
  // A MoE file whose expert_count says 0 is a dense model that lacks its MLP: an error naming the tensor.
  expect_error([&] {
    Model::load(edited_gguf("tiny-llada-moe.gguf", dir.path("moe0.gguf"), [](GgufWriter& w) {
      w.set("llada-moe.expert_count", GgufValue::u32(0));
    }));
  }, {"moe0.gguf"});
  EXPECT_NO_THROW(Model::load(test::fixture("tiny-llada.gguf")));
  EXPECT_NO_THROW(Model::load(test::fixture("tiny-llada-moe.gguf")));
}

// Copies the tiny DiffusionGemma checkpoint with config.json edited.
std::string edited_checkpoint(const test::TempDir& dir, const std::function<void(nlohmann::json&)>& edit,
                              const std::string& fixture = "tiny-diffusion-gemma") {
  const std::filesystem::path src = test::fixture(fixture), dst = dir.path("ckpt");
  std::filesystem::remove_all(dst);
  std::filesystem::create_directories(dst);
  for (const char* name : {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"})
    if (std::filesystem::exists(src / name)) std::filesystem::copy_file(src / name, dst / name);
  nlohmann::json config = load_json_file((src / "config.json").string());
  edit(config);
  std::ofstream(dst / "config.json") << config.dump(2);
  return dst.string();
}

nlohmann::json& text_config(nlohmann::json& j) { return j.contains("text_config") ? j["text_config"] : j; }

TEST(HardenModel, SilentlyIgnoredHfConfigIsAnError) {
  test::TempDir dir;
  expect_error([&] {
    Model::load(edited_checkpoint(dir, [](nlohmann::json& j) {
      text_config(j)["enable_moe_block"] = true;
      text_config(j)["num_experts"] = 0;
    }));
  }, {"enable_moe_block", "num_experts"});
  expect_error([&] {
    Model::load(edited_checkpoint(dir, [](nlohmann::json& j) { text_config(j).erase("rope_parameters"); }));
  }, {"config.json", "rope_parameters"});
  expect_error([&] {
    Model::load(edited_checkpoint(dir, [](nlohmann::json& j) { text_config(j)["rms_norm_eps"] = -1; }));
  }, {"config.json", "rms_norm_eps"});
}

// Counts a config claims are bounded by the tensors present before anything is sized by them: a claimed
// 10^9 layers once listed 10^9 layers of tensor names (a hang, then gigabytes).
TEST(HardenModel, LayerCountsAreBoundedByTheTensorsPresent) {
  test::TempDir dir;
  expect_error([&] {
    Model::load(edited_checkpoint(dir, [](nlohmann::json& j) { j["n_layers"] = 1000000000; }, "tiny-llada-hf"));
  }, {"1000000000 layers", "tensors"});
  expect_error([&] {
    Model::load(edited_checkpoint(dir, [](nlohmann::json& j) {
      text_config(j)["num_hidden_layers"] = 99999;
      text_config(j).erase("layer_types");
    }));
  }, {"99999 layers", "tensors"});
  // LLaDA's vocab_size beyond its embedding_size: tokens without an embedding row.
  expect_error([&] {
    Model::load(edited_checkpoint(dir, [](nlohmann::json& j) { j["vocab_size"] = int64_t(INT32_MAX); }, "tiny-llada-hf"));
  }, {"vocab_size 2147483647", "embedding_size"});
  EXPECT_NO_THROW(Model::load(edited_checkpoint(dir, [](nlohmann::json&) {}, "tiny-llada-hf")));
}

// The byte-level reader (bpe_json.h) sized its table by the highest id: one added token with id 5e7 in a
// 4 KB tokenizer.json reached gigabytes. Ids must now be dense, checked before allocating.
TEST(HardenTokenizerJson, ByteLevelReaderRefusesIdGaps) {
  test::TempDir dir;
  const std::string ckpt = edited_checkpoint(dir, [](nlohmann::json&) {}, "tiny-llada-hf");
  const std::string path = ckpt + "/tokenizer.json";
  EXPECT_NO_THROW(bpe_vocab_from_json(path));
  nlohmann::json doc = load_json_file(path);
  for (const int64_t id : {int64_t(50000000), int64_t(INT32_MAX) - 1}) {
    nlohmann::json edited = doc;
    edited["added_tokens"].push_back({{"id", id}, {"content", "<huge>"}, {"special", true}});
    std::ofstream(path) << edited.dump();
    expect_error([&] { bpe_vocab_from_json(path); }, {"tokenizer.json", std::to_string(id), "names only"});
    edited = doc;
    edited["model"]["vocab"]["zzz-huge"] = id;
    std::ofstream(path) << edited.dump();
    expect_error([&] { bpe_vocab_from_json(path); }, {std::to_string(id), "without gaps"});
  }
}

TEST(HardenCli, GenerationConfigStepsNamesTheFile) {
  test::TempDir dir;
  const std::string ckpt = edited_checkpoint(dir, [](nlohmann::json&) {});
  nlohmann::json g = load_json_file(ckpt + "/generation_config.json");
  g["max_denoising_steps"] = 0;
  std::ofstream(ckpt + "/generation_config.json") << g.dump(2);
  const test::CommandResult r = test::run_canvas("generate -m " + ckpt + " -p hi -n 4");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("generation_config.json: max_denoising_steps is 0"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("--steps"), std::string::npos) << r.output;
}

TEST(HardenCli, LogitsChecksTheContextLength) {
  const Model model = Model::load(test::fixture("tiny-llada.gguf"));
  std::string ids;
  for (int64_t i = 0; i <= model.config.context_length; ++i) ids += (i ? ",1" : "1");
  test::TempDir dir;
  const test::CommandResult r =
      test::run_canvas("logits -m " + test::fixture("tiny-llada.gguf") + " --ids " + ids + " --out " + dir.path("l.npy"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("context length"), std::string::npos) << r.output.substr(0, 500);
}

TEST(HardenLlamaCpp, WrittenModelFilesCarryLlamaCppGeneralKeys) {
  test::TempDir dir;
  std::vector<uint16_t> weights(64, 0);
  GgufWriter w;
  w.set("general.architecture", GgufValue::string("llama"));
  w.add_tensor("blk.0.attn_q.weight", DType::F16, {8, 8}, weights.data(), weights.size() * 2);
  w.write(dir.path("m.gguf"));
  const auto f = GgufFile::open(dir.path("m.gguf"));
  EXPECT_EQ(f->get_string("general.name", ""), "llama");
  EXPECT_EQ(f->get_int("general.file_type", -1), 1);  // LLAMA_FTYPE_MOSTLY_F16
  // A name the writer gives is kept; files without an architecture (vocabularies) are left alone.
  w.set("general.name", GgufValue::string("tiny"));
  w.write(dir.path("named.gguf"));
  EXPECT_EQ(GgufFile::open(dir.path("named.gguf"))->get_string("general.name", ""), "tiny");
  GgufWriter vocab;
  vocab.set("tokenizer.ggml.model", GgufValue::string("gpt2"));
  vocab.write(dir.path("v.gguf"));
  EXPECT_EQ(GgufFile::open(dir.path("v.gguf"))->find("general.file_type"), nullptr);
  // The byte tokenizer canvas trains with names its pre-tokenizer as llama.cpp does.
  for (const auto& [key, value] : train::byte_tokenizer_metadata(false)) {
    if (key == "tokenizer.ggml.pre") {
      EXPECT_EQ(value.to_string(8), "\"gpt-2\"");
    }
  }
}

// A GGUF string as stored: its length (uint64, little-endian) then its bytes.
std::string gguf_string(const std::string& s) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((uint64_t(s.size()) >> (8 * i)) & 0xff);
  return out + s;
}

TEST(HardenLlamaCpp, LegacyPreTokenizerSpellingIsWrittenAsLlamaCppsAndStillRead) {
  test::TempDir dir;
  // A file as canvas wrote it before it used llama.cpp's spelling: tokenizer.ggml.pre "gpt2", which
  // llama.cpp refuses ("unknown pre-tokenizer type"). The writer no longer writes it, so the test makes
  // one: the byte vocabulary of models/text-ar.gguf written now ("gpt-2"), then the two strings edited in
  // place, the name one byte longer so that everything after the metadata stays where it was.
  const auto shipped = GgufFile::open(test::source_path("models/text-ar.gguf"));
  GgufWriter w0;
  for (const auto& [k, v] : shipped->metadata()) w0.set(k, v);
  w0.set("general.name", GgufValue::string("legacy-pre-x"));
  std::vector<float> weights(64, 0.f);
  w0.add_tensor("blk.0.attn_q.weight", DType::F32, {8, 8}, weights.data(), weights.size() * 4);
  w0.write(dir.path("new.gguf"));
  std::string bytes = test::read_text(dir.path("new.gguf"));
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"gpt-2", "gpt2"}, {"legacy-pre-x", "legacy-pre-xy"}}) {
    const size_t at = bytes.find(gguf_string(from));
    ASSERT_NE(at, std::string::npos) << from;
    bytes.replace(at, gguf_string(from).size(), gguf_string(to));
  }
  std::ofstream(dir.path("old.gguf"), std::ios::binary) << bytes;
  const auto old_file = GgufFile::open(dir.path("old.gguf"));
  ASSERT_EQ(old_file->get_string("tokenizer.ggml.pre", ""), "gpt2");
  const Tokenizer old_tok = Tokenizer::from_gguf(*old_file);
  GgufWriter w;
  for (const auto& [k, v] : old_file->metadata()) w.set(k, v);
  w.add_tensor("blk.0.attn_q.weight", DType::F32, {8, 8}, weights.data(), weights.size() * 4);
  w.write(dir.path("m.gguf"));
  const auto f = GgufFile::open(dir.path("m.gguf"));
  EXPECT_EQ(f->get_string("tokenizer.ggml.pre", ""), "gpt-2");
  EXPECT_EQ(f->get_int("general.file_type", -1), 0);             // LLAMA_FTYPE_ALL_F32
  EXPECT_EQ(f->get_int("general.quantization_version", -1), 2);  // GGML_QUANT_VERSION
  EXPECT_EQ(f->get_string("general.name", ""), "legacy-pre-xy");
  // Both spellings tokenize the same way.
  const Tokenizer new_tok = Tokenizer::from_gguf(*f);
  const std::string text = "In the beginning, 1:1 God's  \xc3\xa9\n";
  EXPECT_EQ(new_tok.encode(text), old_tok.encode(text));
}

// LLaDA-MoE as llama.cpp's converter writes it: per-head RMSNorm weights blk.N.attn_{q,k}_norm.weight
// ({head_dim}), applied to Q and K before RoPE. A per-head RMSNorm makes attention independent of the
// scale of each head's Q and K, so scaling attn_q / attn_k changes the logits without the norms and
// leaves them unchanged with them: that shows canvas binds the norms and applies them per head.
TEST(HardenLlamaCpp, LladaMoeQkNormTensorsAreReadAndApplied) {
  test::TempDir dir;
  std::vector<std::vector<float>> keep;  // the edited tensors' data, alive until written
  auto variant = [&](const std::string& name, float q_scale, float k_scale) {
    return edited_gguf("tiny-llada-moe.gguf", dir.path(name), [](GgufWriter&) {},
                       [&, q_scale, k_scale](const TensorView& t, const void*& data) {
                         const bool q = t.name.ends_with(".attn_q.weight"), k = t.name.ends_with(".attn_k.weight");
                         if (q || k) {
                           keep.emplace_back(t.f32(), t.f32() + t.elements());
                           for (float& v : keep.back()) v *= q ? q_scale : k_scale;
                           data = keep.back().data();
                         }
                         return true;
                       });
  };
  auto with_norms = [&](const std::string& name, float q_scale, float k_scale) {
    const std::string plain = variant(name + ".plain.gguf", q_scale, k_scale);
    auto file = GgufFile::open(plain);
    GgufWriter w;
    for (const auto& [k, v] : file->metadata()) w.set(k, v);
    for (const TensorView& t : file->tensors())
      w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims), t.data,
                   uint64_t(t.bytes()));
    const int64_t layers = file->require_int("llada-moe.block_count"), head_dim = 16;
    keep.emplace_back(size_t(head_dim), 0.f);
    for (int64_t i = 0; i < head_dim; ++i) keep.back()[size_t(i)] = 0.5f + 0.1f * float(i);  // not all ones
    for (int64_t l = 0; l < layers; ++l)
      for (const char* which : {"attn_q_norm", "attn_k_norm"})
        w.add_tensor("blk." + std::to_string(l) + "." + which + ".weight", DType::F32, {head_dim},
                     keep.back().data(), uint64_t(head_dim) * 4);
    w.write(dir.path(name));
    return dir.path(name);
  };
  const std::vector<int32_t> ids = {5, 17, 42, 99, 3, 250, 7, 318, 318, 12};
  std::vector<int32_t> rows(ids.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = int32_t(i);
  auto logits = [&](const std::string& path) {
    const Model m = Model::load(path);
    KvCache cache(m.config, int64_t(ids.size()));
    std::vector<int32_t> groups(ids.size(), 0);
    std::vector<float> out(rows.size() * size_t(m.config.vocab));
    ForwardRequest req;
    req.tokens = ids.data();
    req.n = int64_t(ids.size());
    req.groups = groups.data();
    req.logit_rows = rows;
    req.logits = out.data();
    forward(m, cache, req, nullptr);
    return out;
  };
  auto max_diff = [](const std::vector<float>& a, const std::vector<float>& b) {
    float d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
    return d;
  };
  const Model normed = Model::load(with_norms("normed.gguf", 1.f, 1.f));
  EXPECT_TRUE(normed.config.qk_norm);
  EXPECT_FALSE(Model::load(variant("plain.gguf", 1.f, 1.f)).config.qk_norm);
  const std::vector<float> base = logits(dir.path("normed.gguf"));
  const std::vector<float> scaled = logits(with_norms("normed-scaled.gguf", 3.f, 2.f));
  EXPECT_LT(max_diff(base, scaled), 1e-4f);
  EXPECT_GT(max_diff(logits(dir.path("plain.gguf")), logits(variant("plain-scaled.gguf", 3.f, 2.f))), 1e-2f);
  EXPECT_GT(max_diff(base, logits(dir.path("plain.gguf"))), 1e-2f);
  // canvas writes the model back with the norms (the trainer's export and convert go through config_to_gguf).
  GgufWriter w;
  EXPECT_NO_THROW(config_to_gguf(normed.config, w));
}

// Gemma 4 keys as llama.cpp's gemma4 loader reads them: it requires ARCH.embedding_length_per_layer_input
// (canvas writes 0, as llama.cpp's converter does for models without per-layer inputs); canvas refuses the
// E2B / E4B features it does not run (per-layer inputs, KV sharing), naming the key.
TEST(HardenLlamaCpp, GemmaFilesCarryLlamaCppsPerLayerInputKeyAndRefuseWhatCanvasCannotRun) {
  test::TempDir dir;
  ModelConfig c = config_from_hf(test::fixture("tiny-diffusion-gemma/config.json"));
  for (const char* arch : {"gemma4", "diffusion-gemma"}) {
    SCOPED_TRACE(arch);
    c.arch = arch;
    c.has_decoder = c.uniform_state = c.arch == "diffusion-gemma";
    c.causal = c.shift_logits = c.arch == "gemma4";
    GgufWriter w;
    config_to_gguf(c, w);
    w.write(dir.path("g.gguf"));
    const auto f = GgufFile::open(dir.path("g.gguf"));
    EXPECT_EQ(f->get_int(std::string(arch) + ".embedding_length_per_layer_input", -1), 0);
    EXPECT_NO_THROW(config_from_gguf(*f));
    for (const char* key : {".embedding_length_per_layer_input", ".attention.shared_kv_layers"}) {
      GgufWriter bad = w;
      bad.set(std::string(arch) + key, GgufValue::u32(256));
      bad.write(dir.path("bad.gguf"));
      expect_error([&] { config_from_gguf(*GgufFile::open(dir.path("bad.gguf"))); },
                   {"bad.gguf", std::string(arch) + key, "not supported"});
    }
  }
}

}  // namespace
}  // namespace canvas
