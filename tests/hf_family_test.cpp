// LLaDA / Dream / LLaDA-MoE in their Hugging Face layouts: loading the tiny fixture directories
// (tests/fixtures/make_hf_family_fixtures.py, the tiny-*.gguf weights), converting them to GGUF, exporting
// GGUF models back, and the errors for checkpoints that do not fit their config.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/bpe_json.h"
#include "io/gguf.h"
#include "io/json.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "model/hf_families.h"
#include "model/model.h"
#include "test_util.h"

namespace canvas {
namespace {

namespace fs = std::filesystem;

const char* kFamilies[] = {"llada", "dream", "llada-moe"};

std::string hf_dir(const std::string& family) { return test::fixture("tiny-" + family + "-hf"); }
std::string ids_of(const std::string& family) {
  std::string ids = test::read_text(test::fixture("tiny-" + family + ".ids.txt"));
  while (!ids.empty() && (ids.back() == '\n' || ids.back() == '\r')) ids.pop_back();
  return ids;
}

// canvas logits of `model` over the family's fixture ids, compared with the reference .npy.
double logits_error(const std::string& model, const std::string& family, bool causal, const std::string& out,
                    double* other_error = nullptr) {
  const auto r = test::run_canvas("logits -m " + model + " --ids " + ids_of(family) + " --out " + out +
                                  (causal ? " --causal" : "") + " -t 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  if (r.exit_code != 0) return 1e9;
  const NpyArray got = read_npy(out);
  const std::string base = test::fixture("tiny-" + family);
  const NpyArray want = read_npy(base + (causal ? ".causal.npy" : ".bidirectional.npy"));
  EXPECT_EQ(got.shape, want.shape);
  if (other_error)
    *other_error = test::relative_error(got.data, read_npy(base + (causal ? ".bidirectional.npy" : ".causal.npy")).data);
  return test::relative_error(got.data, want.data);
}

// The tensors of two safetensors checkpoints agree: same names, shapes, dtypes and bytes.
void expect_same_safetensors(const std::string& a, const std::string& b) {
  const auto x = SafetensorsModel::open(a), y = SafetensorsModel::open(b);
  ASSERT_EQ(x->tensors().size(), y->tensors().size()) << a << " vs " << b;
  for (const TensorView& t : x->tensors()) {
    const TensorView* u = y->find_tensor(t.name);
    ASSERT_NE(u, nullptr) << t.name << " is missing from " << b;
    EXPECT_EQ(t.ne, u->ne) << t.name;
    EXPECT_EQ(t.type, u->type) << t.name;
    EXPECT_EQ(0, std::memcmp(t.data, u->data, size_t(t.bytes()))) << t.name << " differs";
  }
}

class HfFamilyCli : public ::testing::TestWithParam<const char*> {};

// Logits from the directory equal the independent numpy reference (as the GGUF's do), both attention views.
TEST_P(HfFamilyCli, LogitsFromDirectoryMatchReference) {
  const std::string family = GetParam();
  test::TempDir tmp;
  for (bool causal : {false, true}) {
    double other = 0;
    EXPECT_LT(logits_error(hf_dir(family), family, causal, tmp.path("logits.npy"), &other), 1e-5)
        << family << (causal ? " causal" : " bidirectional");
    EXPECT_GT(other, 1e-3);  // the comparison can fail: the other view does not match
  }
}

// convert DIR OUT.gguf writes the GGUF llama.cpp's converter would: the same tensors, byte for byte, as the
// fixture GGUF (LLaDA's Q/K rows permuted, experts stacked), and the same logits.
TEST_P(HfFamilyCli, ConvertToGgufGivesTheFixtureGguf) {
  const std::string family = GetParam();
  test::TempDir tmp;
  const std::string out = tmp.path("model.gguf");
  const auto r = test::run_canvas("convert " + hf_dir(family) + " " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LT(logits_error(out, family, false, tmp.path("logits.npy")), 1e-5);
  const auto got = GgufFile::open(out), want = GgufFile::open(test::fixture("tiny-" + family + ".gguf"));
  EXPECT_EQ(got->get_string("general.architecture", ""), family);
  EXPECT_EQ(got->get_int("tokenizer.ggml.mask_token_id", -1), want->get_int("tokenizer.ggml.mask_token_id", -2));
  EXPECT_EQ(got->get_string_array("tokenizer.ggml.tokens"), want->get_string_array("tokenizer.ggml.tokens"));
  EXPECT_EQ(got->get_string_array("tokenizer.ggml.merges"), want->get_string_array("tokenizer.ggml.merges"));
  ASSERT_EQ(got->tensors().size(), want->tensors().size());
  for (const TensorView& t : want->tensors()) {
    const TensorView* u = got->find_tensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(t.ne, u->ne) << t.name;
    ASSERT_EQ(t.type, u->type) << t.name;
    EXPECT_EQ(0, std::memcmp(t.data, u->data, size_t(t.bytes()))) << t.name << " differs from the fixture GGUF";
  }
}

// convert MODEL.gguf DIR --to hf writes the published layout: the same tensors as the fixture directory
// the Python script wrote independently, a config.json that loads as the same model, a tokenizer.json
// that tokenizes as the GGUF's; the reloaded export gives the reference logits.
TEST_P(HfFamilyCli, ExportToHfGivesTheFixtureDirectory) {
  const std::string family = GetParam();
  test::TempDir tmp;
  const std::string out = tmp.path("export");
  const auto r = test::run_canvas("convert --in " + test::fixture("tiny-" + family + ".gguf") + " --out " + out +
                                  " --to hf");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_safetensors(out, hf_dir(family));
  EXPECT_LT(logits_error(out, family, false, tmp.path("logits.npy")), 1e-5);
  const Model exported = Model::load(out), fixture = Model::load(hf_dir(family));
  const ModelConfig &a = exported.config, &b = fixture.config;
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.vocab, b.vocab);
  EXPECT_EQ(a.mask_token, b.mask_token);
  EXPECT_EQ(a.eos_token, b.eos_token);
  EXPECT_EQ(a.rms_eps, b.rms_eps);
  EXPECT_EQ(a.rope.theta, b.rope.theta);
  EXPECT_EQ(a.tied_output, b.tied_output);
  EXPECT_EQ(a.shift_logits, b.shift_logits);
  const Tokenizer gguf = Tokenizer::from_gguf(*GgufFile::open(test::fixture("tiny-" + family + ".gguf")));
  const Tokenizer json = bpe_tokenizer_from_json(out + "/tokenizer.json");
  const std::string text = "In the beginning God created <|mdm_mask|> the heaven, 1234 and\n the earth.";
  EXPECT_EQ(json.encode(text), gguf.encode(text));
  EXPECT_EQ(json.vocab_size(), gguf.vocab_size());
}

INSTANTIATE_TEST_SUITE_P(Families, HfFamilyCli, ::testing::ValuesIn(kFamilies), [](const auto& info) {
  std::string name = info.param;
  for (char& ch : name)
    if (ch == '-') ch = '_';
  return name;
});

// A model canvas trained (models/text-masked.gguf, llada; models/text-ar.gguf, llama) exports and reloads
// with identical logits; one with learned position embeddings is refused naming them.
TEST(HfExportCli, TrainedModelsRoundTrip) {
  test::TempDir tmp;
  for (const char* name : {"text-masked", "text-ar"}) {
    const std::string gguf = test::source_path(std::string("models/") + name + ".gguf");
    const std::string dir = tmp.path(name);
    auto r = test::run_canvas("convert " + gguf + " " + dir);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(fs::exists(dir + "/model.safetensors") && fs::exists(dir + "/config.json") &&
                fs::exists(dir + "/tokenizer.json"));
    const std::string ids = "5,70,71,72,101,32,104,256";
    r = test::run_canvas("logits -m " + gguf + " --ids " + ids + " --out " + tmp.path("a.npy") + " -t 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = test::run_canvas("logits -m " + dir + " --ids " + ids + " --out " + tmp.path("b.npy") + " -t 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const NpyArray a = read_npy(tmp.path("a.npy")), b = read_npy(tmp.path("b.npy"));
    ASSERT_EQ(a.shape, b.shape);
    EXPECT_LT(test::relative_error(b.data, a.data), 1e-6) << name;
  }
  const auto r = test::run_canvas("convert --in " + test::source_path("models/sudoku-masked.gguf") + " --out " +
                                  tmp.path("sudoku") + " --to hf");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("position embeddings"), std::string::npos) << r.output;
}

TEST(HfExportCli, HelpAndFlags) {
  auto r = test::run_canvas("convert --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("--to"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("LLaDA-MoE"), std::string::npos);
  test::TempDir tmp;
  r = test::run_canvas("convert --in " + hf_dir("dream") + " --out " + tmp.path("x") + " --to onnx");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--to must be gguf or hf"), std::string::npos) << r.output;
  r = test::run_canvas("convert " + test::fixture("tiny-dream.gguf") + " " + tmp.path("y") + " --type q8_0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("f32, f16 or bf16"), std::string::npos) << r.output;
  r = test::run_canvas("convert " + test::fixture("tiny-dream.gguf") + " " + tmp.path("z") + " --type bf16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto st = SafetensorsModel::open(tmp.path("z"));
  EXPECT_EQ(st->require_tensor("model.embed_tokens.weight").type, DType::BF16);
}

// ---- errors: a copy of a fixture directory with one thing wrong -------------------------------------

// Copies the family's fixture into `dir` with the safetensors rewritten by `edit` (name -> entries) and
// config.json by `edit_config`.
void write_variant(const std::string& family, const std::string& dir,
                   const std::function<void(std::vector<SafetensorsEntry>&, std::deque<std::vector<uint8_t>>&)>& edit,
                   const std::function<void(nlohmann::json&)>& edit_config = nullptr) {
  fs::create_directories(dir);
  const auto st = SafetensorsModel::open(hf_dir(family));
  std::vector<SafetensorsEntry> entries;
  std::deque<std::vector<uint8_t>> storage;
  for (const TensorView& t : st->tensors()) {
    SafetensorsEntry e{t.name, t.type, {}, t.data, size_t(t.bytes())};
    for (int d = t.n_dims - 1; d >= 0; --d) e.shape.push_back(t.ne[size_t(d)]);
    entries.push_back(e);
  }
  edit(entries, storage);
  write_safetensors(dir + "/model.safetensors", entries);
  nlohmann::json config = load_json_file(hf_dir(family) + "/config.json");
  if (edit_config) edit_config(config);
  std::ofstream(dir + "/config.json") << config.dump(2);
  fs::copy_file(hf_dir(family) + "/tokenizer.json", dir + "/tokenizer.json");
}

std::string load_error(const std::string& dir) {
  try {
    Model::load(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void drop(std::vector<SafetensorsEntry>& entries, const std::string& name) {
  const size_t before = entries.size();
  std::erase_if(entries, [&](const SafetensorsEntry& e) { return e.name == name; });
  ASSERT_EQ(entries.size() + 1, before) << name;
}

TEST(HfFamilyLoad, UnchangedCopyLoads) {  // the variant writer itself changes nothing
  test::TempDir tmp;
  write_variant("llada-moe", tmp.path("m"), [](auto&, auto&) {});
  EXPECT_EQ(load_error(tmp.path("m")), "");
}

TEST(HfFamilyLoad, MissingTensorIsNamed) {
  test::TempDir tmp;
  write_variant("llada", tmp.path("m"), [](auto& e, auto&) { drop(e, "model.transformer.blocks.1.ff_proj.weight"); });
  const std::string err = load_error(tmp.path("m"));
  EXPECT_NE(err.find("missing tensor 'model.transformer.blocks.1.ff_proj.weight'"), std::string::npos) << err;
}

TEST(HfFamilyLoad, MissingExpertIsNamed) {
  test::TempDir tmp;
  write_variant("llada-moe", tmp.path("m"), [](auto& e, auto&) { drop(e, "model.layers.1.mlp.experts.2.up_proj.weight"); });
  const std::string err = load_error(tmp.path("m"));
  EXPECT_NE(err.find("'model.layers.1.mlp.experts.2.up_proj.weight'"), std::string::npos) << err;
}

TEST(HfFamilyLoad, WrongShapeIsNamed) {
  test::TempDir tmp;
  write_variant("dream", tmp.path("m"), [](auto& entries, auto&) {
    for (SafetensorsEntry& e : entries)
      if (e.name == "model.layers.0.self_attn.k_proj.weight") std::swap(e.shape[0], e.shape[1]);
  });
  const std::string err = load_error(tmp.path("m"));
  EXPECT_NE(err.find("'model.layers.0.self_attn.k_proj.weight' has shape"), std::string::npos) << err;
  EXPECT_NE(err.find("expected"), std::string::npos) << err;
}

TEST(HfFamilyLoad, UnusedTensorIsRefused) {  // e.g. biases a config without them would silently ignore
  test::TempDir tmp;
  write_variant("llada", tmp.path("m"), [](auto& entries, auto& storage) {
    storage.emplace_back(64 * 4, 0);
    entries.push_back({"model.transformer.blocks.0.q_proj.bias", DType::F32, {64}, storage.back().data(), 64 * 4});
  });
  const std::string err = load_error(tmp.path("m"));
  EXPECT_NE(err.find("'model.transformer.blocks.0.q_proj.bias' is not used"), std::string::npos) << err;
}

TEST(HfFamilyLoad, UnknownModelTypeIsNamed) {
  test::TempDir tmp;
  write_variant("dream", tmp.path("m"), [](auto&, auto&) {}, [](nlohmann::json& c) {
    c["model_type"] = "mamba";
    c["architectures"] = {"MambaForCausalLM"};
  });
  const std::string err = load_error(tmp.path("m"));
  EXPECT_NE(err.find("model_type 'mamba'"), std::string::npos) << err;
  EXPECT_NE(err.find("MambaForCausalLM"), std::string::npos) << err;
}

TEST(HfFamilyLoad, UnsupportedConfigFeatureIsNamed) {
  test::TempDir tmp;
  write_variant("llada", tmp.path("a"), [](auto&, auto&) {}, [](nlohmann::json& c) { c["include_bias"] = true; });
  EXPECT_NE(load_error(tmp.path("a")).find("include_bias"), std::string::npos);
  write_variant("llada-moe", tmp.path("b"), [](auto&, auto&) {},
                [](nlohmann::json& c) { c["moe_router_score_function"] = "sigmoid"; });
  EXPECT_NE(load_error(tmp.path("b")).find("moe_router_score_function"), std::string::npos);
  write_variant("llada", tmp.path("c"), [](auto&, auto&) {}, [](nlohmann::json& c) { c.erase("d_model"); });
  EXPECT_NE(load_error(tmp.path("c")).find("d_model"), std::string::npos);
}

// Issue 61 J: eos / bos / pad ids of config.json were not range-checked: eos 1000000000 loaded (and
// `convert` wrote a GGUF canvas then refused), -1 dropped EOS without a word, 2^32 + 5 wrapped to 5. Each
// is an Error naming the file and key, at load and at convert; so is a GGUF whose id is past its embedding.
TEST(HfFamilyLoad, SpecialTokenIdsOutsideTheVocabularyAreNamed) {
  test::TempDir tmp;
  int n = 0;
  for (const char* key : {"eos_token_id", "bos_token_id", "pad_token_id"})
    for (const nlohmann::json& bad : {nlohmann::json(1000000000), nlohmann::json(-1), nlohmann::json((int64_t(1) << 32) + 5),
                                      nlohmann::json::array({1, 1000000000})}) {
      const std::string dir = tmp.path("m" + std::to_string(n++));
      write_variant("dream", dir, [](auto&, auto&) {}, [&](nlohmann::json& c) { c[key] = bad; });
      const std::string err = load_error(dir);
      EXPECT_NE(err.find(dir + "/config.json: " + key), std::string::npos) << key << " " << bad << ": " << err;
      EXPECT_NE(err.find("outside the vocabulary"), std::string::npos) << key << " " << bad << ": " << err;
    }
  const std::string dir = tmp.path("m0");  // eos 1000000000
  const auto r = test::run_canvas("convert " + dir + " " + tmp.path("out.gguf"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("eos_token_id"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(tmp.path("out.gguf")));
}

// Published config values reach the model: LLaDA's mask id from config.json, LLaDA-MoE's (no
// mask_token_id published) from the tokenizer's <|mdm_mask|>; Dream shifts its logits; LLaDA-MoE's
// qk_layernorm asks for the per-head norm tensors.
TEST(HfFamilyLoad, ConfigValues) {
  const Model llada = Model::load(hf_dir("llada"));
  EXPECT_EQ(llada.config.arch, "llada");
  EXPECT_EQ(llada.config.mask_token, 318);
  EXPECT_FALSE(llada.config.shift_logits);
  EXPECT_EQ(llada.config.rope.layout, RopeLayout::Normal);  // Q/K rows put in GGUF order at load
  const Model moe = Model::load(hf_dir("llada-moe"));
  EXPECT_EQ(moe.config.mask_token, 318);
  EXPECT_EQ(moe.config.n_experts, 4);
  EXPECT_EQ(moe.config.rope.layout, RopeLayout::Neox);
  const Model dream = Model::load(hf_dir("dream"));
  EXPECT_TRUE(dream.config.shift_logits);
  EXPECT_TRUE(dream.config.qkv_bias);
  EXPECT_TRUE(dream.config.tied_output);
  test::TempDir tmp;
  write_variant("llada-moe", tmp.path("m"), [](auto&, auto&) {}, [](nlohmann::json& c) { c["qk_layernorm"] = true; });
  EXPECT_NE(load_error(tmp.path("m")).find("missing tensor 'model.layers.0.self_attn.q_norm.weight'"), std::string::npos);
}

// LLaDA-MoE's qk_layernorm (per-head RMSNorm of q and k before RoPE): the directory, its GGUF and its
// re-export give the same logits, and the norms change them (they are read, not ignored).
TEST(HfQkNormCli, LladaMoeQkNormSurvivesConvertAndExport) {
  test::TempDir tmp;
  const std::string dir = tmp.path("qknorm");
  write_variant("llada-moe", dir, [](auto& entries, auto& storage) {
    for (int l = 0; l < 2; ++l)
      for (const char* which : {"q_norm", "k_norm"}) {
        storage.emplace_back(16 * 4);
        float* w = reinterpret_cast<float*>(storage.back().data());
        for (int i = 0; i < 16; ++i) w[i] = 1.f + 0.5f * float((i * 7 + l * 3 + (which[0] == 'k')) % 5) - 1.f;
        entries.push_back({"model.layers." + std::to_string(l) + ".self_attn." + which + ".weight", DType::F32, {16},
                           storage.back().data(), 16 * 4});
      }
  }, [](nlohmann::json& c) { c["qk_layernorm"] = true; });
  const std::string ids = ids_of("llada-moe");
  auto logits = [&](const std::string& model, const std::string& out) {
    const auto r = test::run_canvas("logits -m " + model + " --ids " + ids + " --out " + out + " -t 2");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return read_npy(out);
  };
  const NpyArray a = logits(dir, tmp.path("a.npy"));
  auto r = test::run_canvas("convert " + dir + " " + tmp.path("m.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(GgufFile::open(tmp.path("m.gguf"))->find_tensor("blk.1.attn_k_norm.weight"), nullptr);
  const NpyArray b = logits(tmp.path("m.gguf"), tmp.path("b.npy"));
  r = test::run_canvas("convert " + tmp.path("m.gguf") + " " + tmp.path("back") + " --to hf");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_safetensors(tmp.path("back"), dir);
  const NpyArray want = read_npy(test::fixture("tiny-llada-moe.bidirectional.npy"));
  EXPECT_LT(test::relative_error(b.data, a.data), 1e-6);
  EXPECT_GT(test::relative_error(a.data, want.data), 1e-3);
}

// tokenizer.json pre-tokenizers: the Llama 3 and Qwen2 regexes select their rules, anything else is named.
TEST(HfTokenizerJson, PreTokenizerRegexes) {
  test::TempDir tmp;
  nlohmann::json base = load_json_file(hf_dir("dream") + "/tokenizer.json");
  auto variant = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = base;
    edit(j);
    std::ofstream(tmp.path(name)) << j.dump();
    return tmp.path(name);
  };
  auto split = [](const std::string& regex) {
    return nlohmann::json{{"type", "Sequence"},
                          {"pretokenizers",
                           {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  };
  const std::string qwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const std::string& qwen2_value = qwen2;  // as the parsed file holds it: single backslashes
  EXPECT_EQ(bpe_vocab_from_json(hf_dir("dream") + "/tokenizer.json").pre, "gpt2");
  EXPECT_EQ(bpe_vocab_from_json(variant("q.json", [&](auto& j) { j["pre_tokenizer"] = split(qwen2_value); })).pre, "qwen2");
  std::string llama3 = qwen2_value;
  llama3.replace(llama3.find("\\p{N}|"), 6, "\\p{N}{1,3}|");
  EXPECT_EQ(bpe_vocab_from_json(variant("l.json", [&](auto& j) {
              j["pre_tokenizer"] = split(llama3);
              j["model"]["ignore_merges"] = true;
            })).pre,
            "llama-bpe");
  auto error = [&](const std::string& path) {
    try {
      bpe_vocab_from_json(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error(variant("x.json", [&](auto& j) { j["pre_tokenizer"] = split("\\w+"); })).find("regex"),
            std::string::npos);
  EXPECT_NE(error(variant("n.json", [&](auto& j) { j["normalizer"] = {{"type", "NFD"}}; })).find("normalizer"),
            std::string::npos);
  EXPECT_FALSE(is_byte_level_tokenizer_json(test::fixture("tiny-diffusion-gemma/tokenizer.json")));
  EXPECT_TRUE(is_byte_level_tokenizer_json(hf_dir("llada") + "/tokenizer.json"));
  // Ids past the file's tokens (a checkpoint's padded vocabulary) are unused padding.
  const BpeVocab padded = bpe_vocab_from_json(hf_dir("llada") + "/tokenizer.json", 330);
  ASSERT_EQ(padded.tokens.size(), 330u);
  EXPECT_EQ(padded.tokens[325], "[PAD325]");
  EXPECT_EQ(padded.token_types[325], 5);
}

TEST(HfRopeRows, PermutationRoundTrips) {
  std::vector<float> rows(2 * 8 * 3);  // 2 heads of 8 rows, 3 columns
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = float(i);
  TensorView t;
  t.type = DType::F32;
  t.n_dims = 2;
  t.ne = {3, 16, 1, 1};
  t.data = rows.data();
  std::vector<float> gguf(rows.size()), back(rows.size());
  permute_rope_rows(t, 2, 8, true, gguf.data());
  // GGUF row 2i + k of a head is HF row k * 4 + i: row 1 <- row 4, row 2 <- row 1, row 9 <- row 12.
  EXPECT_EQ(gguf[1 * 3], rows[4 * 3]);
  EXPECT_EQ(gguf[2 * 3], rows[1 * 3]);
  EXPECT_EQ(gguf[9 * 3], rows[12 * 3]);
  t.data = gguf.data();
  permute_rope_rows(t, 2, 8, false, back.data());
  EXPECT_EQ(back, rows);
}

}  // namespace
}  // namespace canvas
