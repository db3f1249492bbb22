// DiffusionGemma / Gemma 4: config parsing, and encoder and decoder logits of the tiny checkpoint
// (tests/fixtures/tiny-diffusion-gemma) against the independent float64 reference of make_gemma_fixture.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "core/error.h"
#include "io/gguf.h"
#include "io/json.h"
#include "io/npy.h"
#include "model/model.h"
#include "ops/matmul.h"
#include "test_util.h"

namespace canvas {
namespace {

namespace fs = std::filesystem;

const std::string kModelDir = "tiny-diffusion-gemma";

std::string model_dir() { return test::fixture(kModelDir); }
std::string reference(const std::string& name) { return test::fixture(kModelDir + "/reference/" + name); }

std::string read_ids(const std::string& name) {
  std::string ids = test::read_text(reference(name));
  while (!ids.empty() && (ids.back() == '\n' || ids.back() == ' ')) ids.pop_back();
  return ids;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(int32_t(std::stoi(item)));
  return out;
}

// A copy of the fixture checkpoint whose config.json is edited by `edit`.
std::string edited_copy(const test::TempDir& tmp, const std::function<void(nlohmann::json&)>& edit) {
  const fs::path dir = tmp.path("model");
  fs::create_directories(dir);
  fs::copy_file(fs::path(model_dir()) / "model.safetensors", dir / "model.safetensors");
  nlohmann::json config = load_json_file(model_dir() + "/config.json");
  edit(config);
  std::ofstream(dir / "config.json") << config.dump(2);
  return dir.string();
}

// `canvas logits` on a model directory; returns the written array.
NpyArray cli_logits(const std::string& model, const std::string& extra, const std::string& out) {
  const auto r = test::run_canvas("logits -m " + model + " --ids " + read_ids("ids.txt") + " " + extra + " --out " +
                                  out + " -t 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  NpyArray a = read_npy(out);
  std::remove(out.c_str());
  return a;
}

TEST(GemmaConfig, ReadsHuggingFaceConfig) {
  const ModelConfig c = config_from_hf(model_dir() + "/config.json");
  EXPECT_EQ(c.arch, "diffusion-gemma");
  EXPECT_EQ(c.layer_style, LayerStyle::Gemma4);
  EXPECT_TRUE(c.has_decoder);
  EXPECT_EQ(c.vocab, 300);
  EXPECT_EQ(c.hidden, 64);
  EXPECT_EQ(c.n_layers, 6);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.ffn, 32);
  EXPECT_EQ(c.n_experts, 8);
  EXPECT_EQ(c.n_experts_used, 2);
  EXPECT_EQ(c.expert_ffn, 16);
  EXPECT_TRUE(c.dense_and_moe);
  EXPECT_TRUE(c.expert_weights_norm);
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_FLOAT_EQ(c.logit_softcap, 30.f);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.attention_scale, 1.f);
  EXPECT_FLOAT_EQ(c.embedding_scale, 8.f);
  EXPECT_EQ(c.activation, Activation::GeluTanh);
  EXPECT_TRUE(c.tied_output);
  EXPECT_EQ(c.bos_token, 2);
  EXPECT_EQ(c.eos_token, 1);
  EXPECT_EQ(c.pad_token, 0);
  ASSERT_EQ(c.layer_attention.size(), 6u);
  for (int l = 0; l < 5; ++l) {
    const LayerAttention a = c.attention_of(l);
    EXPECT_EQ(a.kind, AttentionKind::Sliding) << l;
    EXPECT_EQ(a.head_dim, 16);
    EXPECT_EQ(a.n_kv_heads, 2);
    EXPECT_FLOAT_EQ(a.rope.theta, 10000.f);
    EXPECT_EQ(a.rope.active_pairs, 0);  // every pair rotates
    EXPECT_EQ(a.rope.layout, RopeLayout::Neox);
    EXPECT_FALSE(a.value_from_key);
  }
  const LayerAttention full = c.attention_of(5);
  EXPECT_EQ(full.kind, AttentionKind::Full);
  EXPECT_EQ(full.head_dim, 32);
  EXPECT_EQ(full.n_kv_heads, 1);
  EXPECT_FLOAT_EQ(full.rope.theta, 1e6f);
  EXPECT_EQ(full.rope.rot_dims, 32);
  EXPECT_EQ(full.rope.active_pairs, 4);  // 0.25 * 32 / 2
  EXPECT_TRUE(full.value_from_key);
}

TEST(GemmaConfig, BadConfigsNameTheKey) {
  test::TempDir tmp;
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](nlohmann::json& j) { j["text_config"]["layer_types"].erase(0); }, "layer_types"},
      {[](nlohmann::json& j) { j["text_config"]["layer_types"][1] = "chunked_attention"; }, "layer_types.1"},
      {[](nlohmann::json& j) { j["text_config"]["rope_parameters"]["full_attention"]["rope_type"] = "yarn"; },
       "rope_type"},
      {[](nlohmann::json& j) { j["text_config"]["num_global_key_value_heads"] = 3; }, "KV heads"},
      {[](nlohmann::json& j) { j["text_config"].erase("hidden_size"); }, "text_config.hidden_size"},
      {[](nlohmann::json& j) { j["text_config"]["hidden_size"] = "64"; }, "text_config.hidden_size"},
      {[](nlohmann::json& j) { j["model_type"] = "llama"; }, "model_type"},
      {[](nlohmann::json& j) { j["text_config"]["num_kv_shared_layers"] = 2; }, "num_kv_shared_layers"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const fs::path path = tmp.path("config" + std::to_string(i) + ".json");
    nlohmann::json config = load_json_file(model_dir() + "/config.json");
    cases[i].edit(config);
    std::ofstream(path) << config.dump(2);
    try {
      config_from_hf(path.string());
      ADD_FAILURE() << "case " << i << ": expected an error";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(cases[i].expected), std::string::npos) << "case " << i << ": " << what;
      EXPECT_NE(what.find(path.string()), std::string::npos) << "case " << i << ": " << what;
    }
  }
}

TEST(GemmaLoad, DirectoryAndConfigPathLoadTheSameModel) {
  const Model a = Model::load(model_dir());
  const Model b = Model::load(model_dir() + "/config.json");
  EXPECT_EQ(a.file, nullptr);
  ASSERT_NE(a.safetensors, nullptr);
  EXPECT_EQ(a.layers.size(), 6u);
  EXPECT_EQ(a.layers[5].wv.data, nullptr);  // attention_k_eq_v: no v_proj on the full layer
  EXPECT_NE(a.layers[4].wv.data, nullptr);
  EXPECT_FLOAT_EQ(a.layers[2].layer_scalar_decoder, 0.8f);
  EXPECT_FLOAT_EQ(a.layers[2].layer_scalar_encoder, 0.8f);  // 0.9 - 0.05 * 2
  EXPECT_FLOAT_EQ(a.layers[3].layer_scalar_decoder, 0.9f);
  EXPECT_FLOAT_EQ(a.layers[3].layer_scalar_encoder, 0.75f);
  EXPECT_EQ(a.parameter_count(), b.parameter_count());
  EXPECT_GT(a.parameter_count(), 250000);
}

// DiffusionGemma's full layers never have a v_proj (the reference reads V from K whatever
// attention_k_eq_v says); attention_k_eq_v = false only keeps num_global_key_value_heads from applying, so
// the stored k_proj no longer has the config's shape.
TEST(GemmaLoad, DiffusionGemmaWithoutKEqVIsAShapeError) {
  test::TempDir tmp;
  const std::string dir =
      edited_copy(tmp, [](nlohmann::json& j) { j["text_config"]["attention_k_eq_v"] = false; });
  try {
    Model::load(dir);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("k_proj"), std::string::npos) << e.what();
  }
}

TEST(GemmaLogits, EncoderMatchesReference) {
  const NpyArray got = cli_logits(model_dir(), "", test::temp_path("gemma_encoder.npy"));
  const NpyArray want = read_npy(reference("encoder.npy"));
  ASSERT_EQ(got.shape, (std::vector<int64_t>{20, 300}));
  ASSERT_EQ(got.shape, want.shape);
  EXPECT_LT(test::relative_error(got.data, want.data), 1e-4);
}

TEST(GemmaLogits, DecoderMatchesReference) {
  const NpyArray got = cli_logits(model_dir(), "--canvas-ids " + read_ids("canvas_ids.txt"),
                                  test::temp_path("gemma_decoder.npy"));
  const NpyArray want = read_npy(reference("decoder.npy"));
  ASSERT_EQ(got.shape, (std::vector<int64_t>{16, 300}));
  ASSERT_EQ(got.shape, want.shape);
  EXPECT_LT(test::relative_error(got.data, want.data), 1e-4);
  // Self-conditioning changes the answer, so the two decoder references tell the paths apart.
  EXPECT_GT(test::relative_error(got.data, read_npy(reference("decoder_self_cond.npy")).data), 1e-2);
}

TEST(GemmaLogits, SelfConditionedDecoderMatchesReference) {
  const NpyArray got =
      cli_logits(model_dir(), "--canvas-ids " + read_ids("canvas_ids.txt") + " --self-cond " + reference("self_cond.npy"),
                 test::temp_path("gemma_decoder_sc.npy"));
  const NpyArray want = read_npy(reference("decoder_self_cond.npy"));
  ASSERT_EQ(got.shape, want.shape);
  EXPECT_LT(test::relative_error(got.data, want.data), 1e-4);
}

// The checks can fail: a window one position off changes encoder rows past the window and every
// decoder row (the decoder's sliding layers see window - 1 cached positions).
TEST(GemmaLogits, WrongWindowDoesNotMatch) {
  test::TempDir tmp;
  const std::string dir = edited_copy(tmp, [](nlohmann::json& j) { j["text_config"]["sliding_window"] = 9; });
  const NpyArray encoder = cli_logits(dir, "", tmp.path("encoder.npy"));
  const NpyArray want = read_npy(reference("encoder.npy"));
  ASSERT_EQ(encoder.shape, want.shape);
  const size_t inside = size_t(8 * 300);  // rows 0..7 see fewer than 8 keys either way
  EXPECT_LT(test::relative_error({encoder.data.begin(), encoder.data.begin() + inside},
                                 {want.data.begin(), want.data.begin() + inside}),
            1e-4);
  EXPECT_GT(test::relative_error(encoder.data, want.data), 1e-3);
  const NpyArray decoder = cli_logits(dir, "--canvas-ids " + read_ids("canvas_ids.txt"), tmp.path("decoder.npy"));
  EXPECT_GT(test::relative_error(decoder.data, read_npy(reference("decoder.npy")).data), 1e-3);
}

// Swapping the encoder and decoder layer scalars must show (they differ in the fixture).
TEST(GemmaLogits, LayerScalarsOfTheOtherModeDoNotMatch) {
  Model model = Model::load(model_dir());
  for (LayerWeights& w : model.layers) std::swap(w.layer_scalar_encoder, w.layer_scalar_decoder);
  const std::vector<int32_t> ids = parse_ids(read_ids("ids.txt"));
  KvCache cache(model.config, int64_t(ids.size()));
  std::vector<int32_t> groups(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) groups[i] = int32_t(i);
  ForwardRequest req;
  req.tokens = ids.data();
  req.n = int64_t(ids.size());
  req.groups = groups.data();
  for (int32_t i = 0; i < req.n; ++i) req.logit_rows.push_back(i);
  std::vector<float> logits(size_t(req.n * model.config.vocab));
  req.logits = logits.data();
  forward(model, cache, req, nullptr);
  EXPECT_GT(test::relative_error(logits, read_npy(reference("encoder.npy")).data), 1e-3);
}

// In-process: encoding the ids in two chunks (the second crossing the window) equals one pass; the
// decoder leaves the cache untouched, and its logits do not depend on the thread count.
TEST(GemmaForward, ChunkedEncoderAndReadOnlyDecoder) {
  const Model model = Model::load(model_dir());
  const ModelConfig& c = model.config;
  const std::vector<int32_t> ids = parse_ids(read_ids("ids.txt"));
  const std::vector<int32_t> canvas = parse_ids(read_ids("canvas_ids.txt"));
  const int64_t n = int64_t(ids.size()), m = int64_t(canvas.size());
  KvCache cache(c, n);
  std::vector<int32_t> groups(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) groups[size_t(i)] = int32_t(i);
  std::vector<float> logits(size_t(n * c.vocab));
  const int64_t split = 11;
  for (const auto& [begin, end] : {std::pair<int64_t, int64_t>{0, split}, {split, n}}) {
    ForwardRequest req;
    req.tokens = ids.data() + begin;
    req.n = end - begin;
    req.pos0 = begin;
    req.groups = groups.data() + begin;
    for (int32_t i = 0; i < req.n; ++i) req.logit_rows.push_back(i);
    req.logits = logits.data() + begin * c.vocab;
    forward(model, cache, req, nullptr);
  }
  EXPECT_LT(test::relative_error(logits, read_npy(reference("encoder.npy")).data), 1e-4);

  std::vector<std::vector<float>> keys_before;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerAttention a = c.attention_of(l);
    keys_before.emplace_back(cache.keys(l), cache.keys(l) + a.n_kv_heads * cache.head_stride(l));
  }
  const NpyArray self_cond = read_npy(reference("self_cond.npy"));
  const auto decode = [&](const Model& with, ThreadPool* pool) {
    ForwardRequest dec;
    dec.tokens = canvas.data();
    dec.n = m;
    dec.pos0 = n;
    dec.decoder = true;
    dec.self_cond = self_cond.data.data();
    for (int32_t i = 0; i < m; ++i) dec.logit_rows.push_back(i);
    std::vector<float> out(size_t(m * c.vocab));
    dec.logits = out.data();
    forward(with, cache, dec, pool);
    return out;
  };
  std::vector<std::vector<float>> outputs;
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    outputs.push_back(decode(model, &pool));
  }
  EXPECT_EQ(outputs[0], outputs[1]);
  EXPECT_EQ(outputs[0], outputs[2]);
  const std::vector<float> want = read_npy(reference("decoder_self_cond.npy")).data;
  EXPECT_LT(test::relative_error(outputs[0], want), 1e-4);
  // The soft embedding read from the transposed table made at load, and (as for vocabularies too large for
  // that table) from the embedding's rows as stored (ops/table_product.h): both against the reference.
  ASSERT_TRUE(model.embedding_columns != nullptr);
  Model tiled = model;
  tiled.embedding_columns.reset();
  const std::vector<float> from_tiles = decode(tiled, nullptr);
  EXPECT_LT(test::relative_error(from_tiles, want), 1e-4);
  EXPECT_LT(test::relative_error(from_tiles, outputs[0]), 1e-5);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    EXPECT_TRUE(std::equal(keys_before[size_t(l)].begin(), keys_before[size_t(l)].end(), cache.keys(l)))
        << "decoder wrote layer " << l << "'s cache";
  }
}

// Encoder logits of the ids, then decoder logits of the canvas with the fixture's self-conditioning input.
std::pair<std::vector<float>, std::vector<float>> encoder_and_decoder(const Model& model) {
  const ModelConfig& c = model.config;
  const std::vector<int32_t> ids = parse_ids(read_ids("ids.txt"));
  const std::vector<int32_t> canvas = parse_ids(read_ids("canvas_ids.txt"));
  const int64_t n = int64_t(ids.size()), m = int64_t(canvas.size());
  KvCache cache(c, n);
  std::vector<int32_t> groups(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) groups[size_t(i)] = int32_t(i);
  std::vector<float> encoder(size_t(n * c.vocab)), decoder(size_t(m * c.vocab));
  ForwardRequest req;
  req.tokens = ids.data();
  req.n = n;
  req.groups = groups.data();
  for (int32_t i = 0; i < n; ++i) req.logit_rows.push_back(i);
  req.logits = encoder.data();
  forward(model, cache, req, nullptr);
  const NpyArray self_cond = read_npy(reference("self_cond.npy"));
  ForwardRequest dec;
  dec.tokens = canvas.data();
  dec.n = m;
  dec.pos0 = n;
  dec.decoder = true;
  dec.self_cond = self_cond.data.data();
  for (int32_t i = 0; i < m; ++i) dec.logit_rows.push_back(i);
  dec.logits = decoder.data();
  forward(model, cache, dec, nullptr);
  return {encoder, decoder};
}

TEST(GemmaConvert, F32GgufGivesTheSameLogitsAsSafetensors) {
  test::TempDir tmp;
  const std::string gguf = tmp.path("tiny.gguf");
  const auto r = test::run_canvas("convert --in " + model_dir() + " --out " + gguf + " --type f32");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Model from_gguf = Model::load(gguf);
  const Model from_safetensors = Model::load(model_dir());
  ASSERT_NE(from_gguf.file, nullptr);
  EXPECT_EQ(from_gguf.config.arch, "diffusion-gemma");
  EXPECT_EQ(from_gguf.file->get_int("diffusion.eb_max_steps", 0), 48);
  ASSERT_EQ(from_gguf.config.layer_attention.size(), 6u);
  for (int64_t l = 0; l < 6; ++l) {
    const LayerAttention a = from_gguf.config.attention_of(l), b = from_safetensors.config.attention_of(l);
    EXPECT_EQ(a.kind, b.kind) << l;
    EXPECT_EQ(a.head_dim, b.head_dim) << l;
    EXPECT_EQ(a.n_kv_heads, b.n_kv_heads) << l;
    EXPECT_EQ(a.rope.active_pairs, b.rope.active_pairs) << l;
    EXPECT_EQ(a.rope.theta, b.rope.theta) << l;
    EXPECT_EQ(a.value_from_key, b.value_from_key) << l;
  }
  EXPECT_EQ(from_gguf.config.sliding_window, 8);
  EXPECT_EQ(from_gguf.config.embedding_scale, from_safetensors.config.embedding_scale);
  const auto [encoder_gguf, decoder_gguf] = encoder_and_decoder(from_gguf);
  const auto [encoder_st, decoder_st] = encoder_and_decoder(from_safetensors);
  EXPECT_EQ(encoder_gguf, encoder_st);  // the same f32 weights through the same code: bitwise equal
  EXPECT_EQ(decoder_gguf, decoder_st);
  EXPECT_LT(test::relative_error(decoder_gguf, read_npy(reference("decoder_self_cond.npy")).data), 1e-4);
}

// Fraction of rows whose argmax agrees.
double argmax_agreement(const std::vector<float>& a, const std::vector<float>& b, int64_t vocab) {
  const int64_t rows = int64_t(a.size()) / vocab;
  int64_t same = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const auto row_a = a.begin() + r * vocab, row_b = b.begin() + r * vocab;
    same += std::max_element(row_a, row_a + vocab) - row_a == std::max_element(row_b, row_b + vocab) - row_b;
  }
  return double(same) / double(rows);
}

// bf16 matrices (vectors stay f32) against the float64 reference on the same bf16-rounded weights.
TEST(GemmaConvert, Bf16GgufMatchesTheBf16Reference) {
  test::TempDir tmp;
  const std::string gguf = tmp.path("tiny-bf16.gguf");
  const auto r = test::run_canvas("convert --in " + model_dir() + " --out " + gguf + " --type bf16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Model model = Model::load(gguf);
  EXPECT_EQ(model.layers[0].wq.type, DType::BF16);
  EXPECT_EQ(model.layers[0].gate_up_exps.type, DType::BF16);
  EXPECT_EQ(model.output_norm.type, DType::F32);
  const auto [encoder, decoder] = encoder_and_decoder(model);
  EXPECT_LT(test::relative_error(encoder, read_npy(reference("encoder_bf16.npy")).data), 1e-4);
  EXPECT_LT(test::relative_error(decoder, read_npy(reference("decoder_self_cond_bf16.npy")).data), 1e-4);
  // Rounding to bf16 matters at this tolerance, so the comparison above can fail.
  EXPECT_GT(test::relative_error(encoder, read_npy(reference("encoder.npy")).data), 1e-3);
}

// Quantised types (with 8-bit activations) move this random model's router past some near ties, so the
// check is on types and on most decisions, not on values. K-quants need rows of 256: this model's rows of
// 64 fall back to Q8_0.
struct QuantCase {
  const char* type;
  DType attention_type;
};
class GemmaConvertQuantised : public testing::TestWithParam<QuantCase> {};

TEST_P(GemmaConvertQuantised, LoadsAndMostlyAgrees) {
  const QuantCase c = GetParam();
  test::TempDir tmp;
  const std::string gguf = tmp.path(std::string("tiny-") + c.type + ".gguf");
  const auto r = test::run_canvas("convert --in " + model_dir() + " --out " + gguf + " --type " + c.type);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string bytes_before = test::read_text(gguf);
  const Model model = Model::load(gguf);
  EXPECT_EQ(interleaved_base(model.layers[0].wq.type), c.attention_type);
  // Q8_0 / Q4_0 matrices are rearranged in the process's private copy of the mapping, never in the file.
  EXPECT_EQ(test::read_text(gguf), bytes_before);
  if (c.attention_type == DType::Q8_0 && matmul_simd_level() == SimdLevel::Avx512) {
    EXPECT_EQ(model.layers[0].wq.type, DType::Q8_0_R16);
  }
  EXPECT_EQ(model.layers[0].down_exps.type, DType::F16);  // rows of 16: not whole blocks of any type
  EXPECT_EQ(model.output_norm.type, DType::F32);
  const auto [encoder, decoder] = encoder_and_decoder(model);
  const std::vector<float> want = read_npy(reference("encoder.npy")).data;
  EXPECT_GE(argmax_agreement(encoder, want, 300), 0.8);
  for (float value : decoder) ASSERT_TRUE(std::isfinite(value));
}

INSTANTIATE_TEST_SUITE_P(Types, GemmaConvertQuantised,
                         testing::Values(QuantCase{"q8_0", DType::Q8_0}, QuantCase{"q5_0", DType::Q5_0},
                                         QuantCase{"q5_1", DType::Q5_1}, QuantCase{"q4_k", DType::Q8_0}),
                         [](const testing::TestParamInfo<QuantCase>& info) { return std::string(info.param.type); });

TEST(GemmaCli, DecoderFlagsNeedADecoderModel) {
  const auto r = test::run_canvas("logits -m " + test::fixture("tiny-llada.gguf") +
                                  " --ids 1,2,3 --canvas-ids 4,5 --out /dev/null");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--canvas-ids needs a model with a decoder"), std::string::npos) << r.output;
  const auto bad = test::run_canvas("logits -m " + model_dir() + " --ids " + read_ids("ids.txt") +
                                    " --canvas-ids 1,2 --self-cond " + reference("self_cond.npy") + " --out /dev/null");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("self-conditioning logits must have shape [2, 300]"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace canvas
