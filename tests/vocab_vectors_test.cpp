// llama.cpp's published tokenizer test vectors (../shared/vocab: vocabulary-only GGUF files, the inputs
// and llama.cpp's ids), reproduced exactly by canvas's byte-level BPE (gpt-2) and SentencePiece (llama-spm)
// tokenizers, in process and through `canvas tokenize` / `canvas detokenize`.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "io/gguf.h"
#include "io/spm_tokenizer.h"
#include "io/tokenizer.h"
#include "test_util.h"

namespace canvas {
namespace {

std::string vocab_dir() { return std::string(CANVAS_SOURCE_DIR) + "/../shared/vocab"; }

// (text, ids) pairs of FILE.inp / FILE.out, split as llama.cpp's test-tokenizer-0 does.
std::vector<std::pair<std::string, std::vector<int32_t>>> vectors(const std::string& name) {
  const std::string base = vocab_dir() + "/" + name;
  const std::string inp = test::read_text(base + ".inp"), out = test::read_text(base + ".out");
  std::vector<std::string> texts;
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t at = 0;;) {
    const size_t next = inp.find(sep, at);
    if (next == std::string::npos) break;
    texts.push_back(inp.substr(at, next - at));
    at = next + sep.size();
  }
  std::vector<std::pair<std::string, std::vector<int32_t>>> result;
  std::istringstream lines(out);
  std::string line;
  for (const std::string& text : texts) {
    std::getline(lines, line);
    std::vector<int32_t> ids;
    std::istringstream in(line);
    for (int32_t id; in >> id;) ids.push_back(id);
    result.emplace_back(text, ids);
  }
  return result;
}

#define SKIP_WITHOUT_VOCAB()                                                                          \
  if (!std::filesystem::exists(vocab_dir() + "/ggml-vocab-gpt-2.gguf"))                                \
  GTEST_SKIP() << "llama.cpp's tokenizer vectors are not at " << vocab_dir()                           \
               << " (place the shared/ folder beside the source tree to run this test)"

TEST(VocabVectors, Gpt2ByteLevelBpeMatchesLlamaCpp) {
  SKIP_WITHOUT_VOCAB();
  const auto file = GgufFile::open(vocab_dir() + "/ggml-vocab-gpt-2.gguf");
  const Tokenizer t = Tokenizer::from_gguf(*file);
  const auto cases = vectors("ggml-vocab-gpt-2.gguf");
  ASSERT_GT(cases.size(), 40u);
  for (const auto& [text, ids] : cases) {
    EXPECT_EQ(t.encode(text, false, true), ids) << "text: '" << text << "'";
    EXPECT_EQ(t.decode(ids), text);
  }
}

TEST(VocabVectors, LlamaSpmMatchesLlamaCpp) {
  SKIP_WITHOUT_VOCAB();
  const auto file = GgufFile::open(vocab_dir() + "/ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(SpmTokenizer::describes(*file));
  const SpmTokenizer t = SpmTokenizer::from_gguf(*file);
  const auto cases = vectors("ggml-vocab-llama-spm.gguf");
  ASSERT_GT(cases.size(), 40u);
  for (const auto& [text, ids] : cases) {
    EXPECT_EQ(t.encode(text, false, true), ids) << "text: '" << text << "'";
    EXPECT_EQ(t.decode(ids), text);
  }
  EXPECT_EQ(t.encode("Hello world", true).front(), t.bos_id());
}

// A long text is encoded in pieces cut where no token spans the cut (io/token_pieces.h): llama.cpp's test
// texts, joined, give the ids of the whole text at every piece size.
TEST(VocabVectors, LlamaSpmPiecesGiveTheIdsOfTheWholeText) {
  SKIP_WITHOUT_VOCAB();
  const auto file = GgufFile::open(vocab_dir() + "/ggml-vocab-llama-spm.gguf");
  SpmTokenizer t = SpmTokenizer::from_gguf(*file);
  std::string text;
  for (int round = 0; round < 20; ++round)
    for (const auto& [each, ids] : vectors("ggml-vocab-llama-spm.gguf")) text += each + (round % 2 ? "\n" : " ");
  const std::vector<int32_t> whole = t.encode(text);
  for (size_t piece : {size_t(1), size_t(5), size_t(64), size_t(1000)}) {
    t.set_piece_bytes(piece);
    EXPECT_EQ(t.encode(text), whole) << "piece " << piece << " of " << text.size() << " bytes";
  }
}

TEST(VocabVectorsCli, TokenizeAndDetokenizeVocabularyOnlyFiles) {
  SKIP_WITHOUT_VOCAB();
  for (const char* name : {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf"}) {
    const std::string model = vocab_dir() + "/" + name;
    const auto cases = vectors(name);
    // Every vector through the command, the text passed as a file (its bytes unchanged).
    test::TempDir dir;
    for (size_t i = 0; i < cases.size(); ++i) {
      const std::string path = dir.path("text" + std::to_string(i));
      std::ofstream(path, std::ios::binary) << cases[i].first;
      const auto r = test::run_canvas("tokenize -m " + model + " -f " + path, false);
      std::string want;
      for (size_t k = 0; k < cases[i].second.size(); ++k) want += (k ? " " : "") + std::to_string(cases[i].second[k]);
      EXPECT_EQ(r.exit_code, 0);
      EXPECT_EQ(r.output, want + "\n") << name << " case " << i;
    }
    const auto r = test::run_canvas("tokenize -m " + model + " -p 'Hello world' --json --bos", false);
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_NE(r.output.find("\"ids\":["), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("\"pieces\":["), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(" world\""), std::string::npos) << r.output;
  }
  const auto r = test::run_canvas("detokenize -m " + vocab_dir() + "/ggml-vocab-llama-spm.gguf --ids 15043,3186", false);
  EXPECT_EQ(r.output, "Hello world\n");
  const auto bad = test::run_canvas("tokenize -m " + vocab_dir() + "/ggml-vocab-gpt-2.gguf");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("-p TEXT or -f FILE"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace canvas
