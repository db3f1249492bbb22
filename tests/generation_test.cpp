// The Generator's request options, run directly (tests/generation_identity_test.cpp checks that generate,
// chat and serve give the same tokens through it).
#include "decode/generation.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace canvas {
namespace {

// ignore_eos decodes all N tokens. With the first token made the EOS id, a plain run stops at it (AR at once,
// masked diffusion after the block holding it) and keeps none of its tokens; an ignore_eos run gives every
// token of the run in which that id was not EOS, and finishes by length.
TEST(Generation, IgnoreEosDecodesAllTokens) {
  ThreadPool pool(2);
  for (DecodeMode mode : {DecodeMode::Ar, DecodeMode::Diffusion}) {
    Model model = Model::load(test::fixture("tiny-llada.gguf"));
    model.config.eos_token = model.config.pad_token = -1;
    GenerationRequest r;
    r.prompt = {5, 6, 7, 8};
    r.mode = mode;
    r.max_new_tokens = 8;
    r.block_length = 4;
    const GenerationOutput plain = Generator(model, nullptr, SamplerDefaults{}).run(r, &pool);
    ASSERT_EQ(plain.tokens.size(), 8u) << decode_mode_name(mode);

    model.config.eos_token = plain.tokens[0];
    const GenerationOutput stopped = Generator(model, nullptr, SamplerDefaults{}).run(r, &pool);
    EXPECT_TRUE(stopped.tokens.empty()) << decode_mode_name(mode);
    EXPECT_EQ(stopped.finish_reason, "eos") << decode_mode_name(mode);
    EXPECT_LT(stopped.passes, plain.passes) << decode_mode_name(mode);

    r.ignore_eos = true;
    const GenerationOutput all = Generator(model, nullptr, SamplerDefaults{}).run(r, &pool);
    EXPECT_EQ(all.tokens, plain.tokens) << decode_mode_name(mode);
    EXPECT_EQ(all.passes, plain.passes) << decode_mode_name(mode);
    EXPECT_EQ(all.finish_reason, "length") << decode_mode_name(mode);
  }
}

// Uniform-state diffusion (EOS pads the rest of its canvas and ends the run) and draft-and-verify (an EOS
// ends the run) honour it too, the model's EOS ids made the first token again.
TEST(Generation, IgnoreEosDecodesAllTokensOfUniformStateAndVerify) {
  ThreadPool pool(2);
  const std::string path = test::source_path("models/text-dg.gguf");
  const TextModel m = TextModel::from(Model::load(path), path);
  for (DecodeMode mode : {DecodeMode::Diffusion, DecodeMode::Verify}) {
    GenerationRequest r;
    r.text = "And God said";
    r.mode = mode;
    r.max_new_tokens = 40;
    SamplerDefaults defaults = m.defaults;
    const GenerationOutput plain = Generator(m.model, &m.tokenizer, defaults, &m.chat).run(r, &pool);
    ASSERT_EQ(plain.tokens.size(), 40u) << decode_mode_name(mode);

    defaults.params.eos_ids = {plain.tokens[0]};
    const Generator eos_first(m.model, &m.tokenizer, defaults, &m.chat);
    const GenerationOutput stopped = eos_first.run(r, &pool);
    EXPECT_TRUE(stopped.tokens.empty()) << decode_mode_name(mode);
    EXPECT_EQ(stopped.finish_reason, "eos") << decode_mode_name(mode);

    r.ignore_eos = true;
    const GenerationOutput all = eos_first.run(r, &pool);
    EXPECT_EQ(all.tokens, plain.tokens) << decode_mode_name(mode);
    EXPECT_EQ(all.pad_tokens, 0) << decode_mode_name(mode);
    EXPECT_EQ(all.finish_reason, "length") << decode_mode_name(mode);
  }
}

}  // namespace
}  // namespace canvas
