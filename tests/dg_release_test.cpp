// The DiffusionGemma release's own forms against the reference implementation: a tiny random model made by
// transformers 5.25.0 (tests/fixtures/make_release_fixture.py), its config as the release publishes it and
// as save_pretrained re-saves it, the reference's logits, and one generate() run replayed step by step.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/output_file.h"
#include "decode/entropy_bound.h"
#include "decode/text_model.h"
#include "decode/uniform_state.h"
#include "io/json.h"
#include "io/npy.h"
#include "io/gguf.h"
#include "convert/convert.h"
#include "model/model.h"
#include "test_util.h"

namespace canvas {
namespace {

namespace fs = std::filesystem;

std::string release_dir(const std::string& form) { return test::fixture("dg-release/" + form); }
std::string reference(const std::string& name) { return test::fixture("dg-release/reference/" + name); }

std::vector<int32_t> read_ids(const std::string& name) {
  std::vector<int32_t> out;
  std::stringstream ss(test::read_text(reference(name)));
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(int32_t(std::stoi(item)));
  return out;
}

std::vector<int32_t> ids_of(const nlohmann::json& array) { return array.get<std::vector<int32_t>>(); }

class DgRelease : public ::testing::TestWithParam<const char*> {};

TEST_P(DgRelease, ConfigTakesTheReferenceDefaults) {
  const Model model = Model::load(release_dir(GetParam()));
  const ModelConfig& c = model.config;
  EXPECT_EQ(c.arch, "diffusion-gemma");
  EXPECT_TRUE(c.release_form);
  EXPECT_EQ(c.default_mode, "diffusion");
  EXPECT_EQ(c.logit_softcap, 30.f);  // absent: the reference's 30
  ASSERT_EQ(c.n_layers, 6);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerAttention a = c.attention_of(l);
    const bool full = l % 3 == 2;
    EXPECT_EQ(a.kind, full ? AttentionKind::Full : AttentionKind::Sliding) << l;
    EXPECT_EQ(a.head_dim, full ? 512 : 16) << l;      // global_head_dim absent: 512
    EXPECT_EQ(a.n_kv_heads, full ? 1 : 2) << l;       // num_global_key_value_heads, attention_k_eq_v absent
    EXPECT_EQ(a.value_from_key, full) << l;           // no v_proj on full layers
  }
  const SamplerDefaults d = sampler_defaults(model, release_dir(GetParam()));
  EXPECT_EQ(d.params.canvas_length, 16);          // config.json's canvas_length
  EXPECT_EQ(d.params.entropy_bound, 5.f);         // generation_config.json's sampler_config.entropy_bound
  EXPECT_EQ(d.params.confidence_threshold, 1.f);
  EXPECT_EQ(d.params.max_denoising_steps, 12);
  EXPECT_EQ(d.max_new_tokens, 32);
  EXPECT_EQ(d.params.eos_ids, (std::vector<int32_t>{1, 106, 50}));
}

// Encoder, decoder (with and without self-conditioning) and a second canvas after a committed one, as
// transformers computes them, by the model at `path` (a directory or a GGUF).
void expect_reference_logits(const std::string& path) {
  const Model model = Model::load(path);
  const ModelConfig& c = model.config;
  const std::vector<int32_t> ids = read_ids("ids.txt"), canvas = read_ids("canvas_ids.txt"),
                             first = read_ids("first_canvas_ids.txt");
  const int64_t P = int64_t(ids.size()), L = int64_t(canvas.size());
  KvCache cache(c, P + 2 * L);
  const auto encode = [&](const std::vector<int32_t>& tokens, int64_t pos0, std::vector<float>* logits) {
    std::vector<int32_t> groups(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) groups[i] = int32_t(pos0 + int64_t(i));
    ForwardRequest req;
    req.tokens = tokens.data();
    req.n = int64_t(tokens.size());
    req.pos0 = pos0;
    req.groups = groups.data();
    if (logits) {
      for (int32_t i = 0; i < req.n; ++i) req.logit_rows.push_back(i);
      logits->resize(size_t(req.n * c.vocab));
      req.logits = logits->data();
    }
    forward(model, cache, req, nullptr);
  };
  const auto decode = [&](int64_t pos0, const float* self_cond) {
    ForwardRequest req;
    req.tokens = canvas.data();
    req.n = L;
    req.pos0 = pos0;
    req.decoder = true;
    req.self_cond = self_cond;
    for (int32_t i = 0; i < L; ++i) req.logit_rows.push_back(i);
    std::vector<float> out(size_t(L * c.vocab));
    req.logits = out.data();
    forward(model, cache, req, nullptr);
    return out;
  };
  std::vector<float> encoder;
  encode(ids, 0, &encoder);
  EXPECT_LT(test::relative_error(encoder, read_npy(reference("encoder.npy")).data), 1e-4);
  const std::vector<float> plain = decode(P, nullptr);
  EXPECT_LT(test::relative_error(plain, read_npy(reference("decoder.npy")).data), 1e-4);
  const NpyArray self_cond = read_npy(reference("self_cond.npy"));
  const std::vector<float> conditioned = decode(P, self_cond.data.data());
  EXPECT_LT(test::relative_error(conditioned, read_npy(reference("decoder_self_cond.npy")).data), 1e-4);
  EXPECT_GT(test::relative_error(conditioned, plain), 1e-2);  // the two references tell the paths apart
  encode(first, P, nullptr);
  EXPECT_LT(test::relative_error(decode(P + L, nullptr), read_npy(reference("second_canvas.npy")).data), 1e-4);
}

// From both config forms.
TEST_P(DgRelease, LogitsMatchTransformers) { expect_reference_logits(release_dir(GetParam())); }

// transformers' generate() with the release's sampler, its random draws replayed into canvas's sampler:
// every step's accepted positions and re-noised canvas, every canvas's argmax, the final sequence (EOS
// and padding included) and tokens per forward are the reference's.
TEST_P(DgRelease, GenerateIsTheReferenceStepByStep) {
  const std::string dir = release_dir(GetParam());
  const Model model = Model::load(dir);
  const nlohmann::json run = load_json_file(reference("generate.json"));
  EntropyBoundReplay replay;
  for (const nlohmann::json& canvas : run["canvases"]) {
    EntropyBoundReplay::Canvas& r = replay.canvases.emplace_back();
    r.initial = ids_of(canvas["initial"]);
    for (const nlohmann::json& step : canvas["steps"])
      r.steps.push_back({ids_of(step["sample"]), ids_of(step["noise"])});
  }
  EntropyBoundParams params = sampler_defaults(model, dir).params;
  params.max_new_tokens = 32;
  params.replay = &replay;
  std::vector<std::vector<int32_t>> canvases, accepted;  // per step: the re-noised canvas, its accepted mask
  DecodeCallbacks callbacks;
  int64_t committed = 0;
  callbacks.on_step = [&](const StepEvent& e) {
    if (e.step == 0) committed = int64_t(e.canvas->size()) - params.canvas_length;
    canvases.emplace_back(e.canvas->begin() + committed, e.canvas->end());
    std::vector<int32_t> mask(size_t(params.canvas_length), 0);
    for (int64_t i : e.committed) mask[size_t(i - committed)] = 1;
    accepted.push_back(mask);
  };
  const EntropyBoundResult result =
      generate_uniform_state(model, ids_of(run["prompt"]), params, nullptr, callbacks, nullptr);
  size_t k = 0;
  for (size_t b = 0; b < run["canvases"].size(); ++b) {
    const nlohmann::json& steps = run["canvases"][b]["steps"];
    ASSERT_EQ(result.steps_per_canvas.at(b), int64_t(steps.size())) << "canvas " << b;
    for (size_t s = 0; s < steps.size(); ++s, ++k) {
      ASSERT_LT(k, canvases.size());
      EXPECT_EQ(accepted[k], ids_of(steps[s]["accepted"])) << "canvas " << b << " step " << s;
      EXPECT_EQ(canvases[k], ids_of(steps[s]["output"])) << "canvas " << b << " step " << s;
    }
  }
  EXPECT_EQ(k, canvases.size());
  EXPECT_EQ(result.tokens, ids_of(run["sequence"]));
  EXPECT_NEAR(result.tokens_per_forward, run["tokens_per_forward"].get<double>(), 1e-6);  // the reference's is float32
}

// llama.cpp's DiffusionGemma branch: the same model as its converter writes it (conversion/diffusion_gemma.py,
// tests/fixtures/README.md says how). The file has no final_logit_softcapping key (config.json has none):
// llama.cpp then caps at 30, as the reference does, and so must canvas.
std::string branch_gguf() { return release_dir("llama-branch-f32.gguf"); }

TEST(DgReleaseLlamaBranch, ItsGgufLoadsAndMatchesTransformers) {
  const Model model = Model::load(branch_gguf());
  EXPECT_EQ(model.config.logit_softcap, 30.f);
  EXPECT_TRUE(model.config.release_form);
  const SamplerDefaults d = sampler_defaults(model, branch_gguf());
  EXPECT_EQ(d.params.canvas_length, 16);  // diffusion.canvas_length
  EXPECT_EQ(d.params.entropy_bound, 5.f);
  EXPECT_EQ(d.params.max_denoising_steps, 12);
  expect_reference_logits(branch_gguf());
}

// What canvas convert writes is what the branch's converter writes: the same keys with the same values and
// types, and the same tensors with the same shapes and types; it loads back with the reference's logits.
// Apart: the names the writers give, canvas's own embedding_scale and unknown_token_id, the soft-cap (canvas
// writes the 30 the branch leaves to its default), and the token types and scores: canvas keeps
// tokenizer.json's kinds (special added tokens control, scores 0), where the branch's gemma4 vocabulary marks
// them normal with score -1000 (its loader turns control-looking ones back into control) and makes
// <|tool_response>, <|channel>, <channel|> user-defined for its chat parser.
TEST(DgReleaseLlamaBranch, CanvasConvertWritesTheBranchsLayout) {
  test::TempDir dir;
  const std::string out = dir.path("canvas.gguf");
  convert_hf_to_gguf(release_dir("published"), out, DType::F32);
  const auto ours = GgufFile::open(out), theirs = GgufFile::open(branch_gguf());
  const std::set<std::string> own = {"general.name", "general.type", "general.size_label",
                                     "diffusion-gemma.embedding_scale", "tokenizer.ggml.unknown_token_id",
                                     "diffusion-gemma.final_logit_softcapping", "tokenizer.ggml.token_type",
                                     "tokenizer.ggml.scores"};
  const auto text = [](const GgufValue& v) {
    return std::string(gguf_type_name(v.type)) + " " + v.to_string(size_t(1) << 20);
  };
  std::map<std::string, std::string> a, b;
  for (const auto& [key, value] : ours->metadata())
    if (!own.count(key)) a[key] = text(value);
  for (const auto& [key, value] : theirs->metadata())
    if (!own.count(key)) b[key] = text(value);
  EXPECT_EQ(a, b);
  EXPECT_EQ(ours->get_float("diffusion-gemma.final_logit_softcapping", 0), 30.0);  // written, as llama.cpp's default
  std::map<std::string, std::string> ta, tb;
  const auto describe = [](const TensorView& t) {
    std::string d = dtype_name(t.type);
    for (int i = 0; i < t.n_dims; ++i) d += " " + std::to_string(t.ne[i]);
    return d;
  };
  for (const TensorView& t : ours->tensors()) ta[t.name] = describe(t);
  for (const TensorView& t : theirs->tensors()) tb[t.name] = describe(t);
  EXPECT_EQ(ta, tb);
  expect_reference_logits(out);
}

// tokenizer_config.json's mask_token becomes tokenizer.ggml.mask_token_id, as the branch's converter writes
// it (its llama-diffusion-cli refuses a file without one); without the file there is no key.
TEST(DgReleaseLlamaBranch, CanvasConvertWritesTheMaskTokenOfTokenizerConfig) {
  test::TempDir dir;
  const std::string in = dir.path("model");
  std::filesystem::copy(release_dir("published"), in);
  write_file(in + "/tokenizer_config.json", R"({"mask_token": "<|turn>"})");
  convert_hf_to_gguf(in, dir.path("mask.gguf"), DType::F32);
  EXPECT_EQ(GgufFile::open(dir.path("mask.gguf"))->get_int("tokenizer.ggml.mask_token_id", -1), 105);
  EXPECT_EQ(GgufFile::open(branch_gguf())->find("tokenizer.ggml.mask_token_id"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Forms, DgRelease, ::testing::Values("published", "resaved"),
                         [](const auto& info) { return std::string(info.param); });

// The CLI's default for the release: whole canvases of canvas_length with the release's sampler, said in
// the stats line.
TEST(DgReleaseCli, GenerateDenoisesWholeCanvasesByDefault) {
  const auto r = test::run_canvas("generate -m " + release_dir("published") + " -p hello -n 20 -s 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t brace = r.output.find('{');
  ASSERT_NE(brace, std::string::npos) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output.substr(brace, r.output.rfind('}') - brace + 1));
  EXPECT_EQ(j["mode"], "diffusion") << r.output;
  EXPECT_NE(j["mode_reason"].get<std::string>().find("release's default, whole canvases of 16"), std::string::npos)
      << r.output;
  ASSERT_TRUE(j.contains("steps_per_canvas")) << r.output;
  // The default stats line says it too.
  const auto line = test::run_canvas("generate -m " + release_dir("published") + " -p hello -n 20 -s 3");
  ASSERT_EQ(line.exit_code, 0) << line.output;
  EXPECT_NE(line.output.find("[diffusion, entropy-bound sampler (auto): "), std::string::npos) << line.output;
  EXPECT_NE(line.output.find(" in 1 canvas, "), std::string::npos) << line.output;
}

}  // namespace
}  // namespace canvas
