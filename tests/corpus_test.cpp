// The corpus data source: documents from bible / fortune / plain files, the held-out split by document,
// token streams under a trained tokenizer, and a training run on it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>

#include "core/error.h"
#include "core/rng.h"
#include "io/bpe_trainer.h"
#include "io/gguf.h"
#include "io/hf_tokenizer.h"
#include "model/model.h"
#include "test_util.h"
#include "train/corpus.h"
#include "train/task.h"
#include "train/trainer.h"

namespace canvas {
namespace {

using train::CorpusDocument;

// `bible` prints one "BookC:V text" line per verse.
const char* kBibleOutput =
    "Ge1:1 In the beginning God created the heaven and the earth.\n"
    "Ge1:2 And the earth was without form, and void.\n"
    "Ge2:1 Thus the heavens and the earth were finished, and all the host of them.\n"
    "1Sa3:10 And the LORD came, and stood, and called as at other times, Samuel, Samuel.\n"
    "1Sa3:11 And the LORD said to Samuel, Behold, I will do a thing in Israel.\n";

// Many small documents in two parts.
std::vector<CorpusDocument> synthetic_documents(size_t per_part) {
  std::vector<CorpusDocument> docs;
  const char* words[] = {"and", "the", "light", "was", "good", "God", "said", "let", "there", "be", "waters", "day"};
  Rng rng(11);
  for (const char* part : {"kjv", "other"})
    for (size_t i = 0; i < per_part; ++i) {
      std::string text;
      for (int w = 0; w < 12; ++w) text += std::string(w ? " " : "") + words[rng.below(12)];
      docs.push_back({std::string(part) + ":" + std::to_string(i), text + ".\n"});
    }
  return docs;
}

train::TrainingVocabulary sample_vocabulary(const std::vector<CorpusDocument>& docs, const std::string& path) {
  BpeTrainer t;
  for (const CorpusDocument& d : docs) t.add_text(d.text);
  BpeTrainOptions o;
  o.vocab_size = 320;
  write_vocab_gguf(t.train(o), path);
  return train::load_training_vocabulary(path);
}

TEST(Corpus, BibleOutputBecomesOneDocumentPerChapter) {
  const std::vector<CorpusDocument> docs = train::kjv_documents(kBibleOutput);
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0].key, "kjv:Ge1");
  EXPECT_EQ(docs[0].text,
            "In the beginning God created the heaven and the earth.\nAnd the earth was without form, and void.\n");
  EXPECT_EQ(docs[1].key, "kjv:Ge2");
  EXPECT_EQ(docs[2].key, "kjv:1Sa3");
  EXPECT_EQ(docs[2].text.substr(0, 12), "And the LORD");
  EXPECT_THROW(train::kjv_documents("no reference here\n"), Error);
}

TEST(Corpus, FortunesAndParagraphsAreDocuments) {
  const std::vector<CorpusDocument> f =
      train::fortune_documents("wisdom", "\nA stitch in time.\n\n%\nTwo\n\tlines.\n%\n%\nLast, no newline");
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].key, "fortunes:wisdom:0");
  EXPECT_EQ(f[0].text, "A stitch in time.\n");
  EXPECT_EQ(f[1].text, "Two\n\tlines.\n");
  EXPECT_EQ(f[2].text, "Last, no newline\n");

  const std::string path = test::temp_path("corpus-paragraphs.txt");
  std::ofstream(path) << "First paragraph,\nstill first.\n\n\n  \nSecond.\n";
  const std::vector<CorpusDocument> p = train::load_corpus(path);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].key, path + ":0");
  EXPECT_EQ(p[0].text, "First paragraph,\nstill first.\n");
  EXPECT_EQ(p[1].text, "Second.\n");
  EXPECT_THROW(train::load_corpus(path + "," + path), Error);  // a part named twice
  EXPECT_THROW(train::load_corpus("no-such-corpus"), Error);
  EXPECT_THROW(train::load_corpus(""), Error);
  EXPECT_THROW(train::load_corpus_part("fortunes", test::temp_path("no-fortunes-here")), Error);
  std::remove(path.c_str());
}

TEST(Corpus, HeldOutSplitIsByDocumentAndDeterministic) {
  const std::vector<CorpusDocument> docs = synthetic_documents(500);
  const train::CorpusSplit split = train::split_corpus(docs, 0.02);
  ASSERT_EQ(split.held_out.size(), 20u);  // 10 per part
  EXPECT_EQ(split.train.size() + split.held_out.size(), docs.size());
  int kjv = 0;
  std::set<std::string> held;
  for (const CorpusDocument& d : split.held_out) {
    kjv += d.key.rfind("kjv:", 0) == 0;
    held.insert(d.key);
  }
  EXPECT_EQ(kjv, 10);
  for (const CorpusDocument& d : split.train) EXPECT_EQ(held.count(d.key), 0u) << d.key;
  // Neither the documents' order nor another part changes which documents are held out.
  std::vector<CorpusDocument> shuffled(docs.rbegin(), docs.rend());
  std::vector<CorpusDocument> kjv_only(docs.begin(), docs.begin() + 500);
  std::set<std::string> held_shuffled, held_kjv_only;
  for (const CorpusDocument& d : train::split_corpus(shuffled, 0.02).held_out) held_shuffled.insert(d.key);
  for (const CorpusDocument& d : train::split_corpus(kjv_only, 0.02).held_out) held_kjv_only.insert(d.key);
  EXPECT_EQ(held_shuffled, held);
  for (const std::string& k : held_kjv_only) EXPECT_EQ(held.count(k), 1u) << k;
  EXPECT_EQ(held_kjv_only.size(), 10u);
  // Training documents stay in corpus order.
  EXPECT_TRUE(std::is_sorted(split.train.begin(), split.train.begin() + 100,
                             [](const CorpusDocument& a, const CorpusDocument& b) {
                               return std::stoi(a.key.substr(4)) < std::stoi(b.key.substr(4));
                             }));
  EXPECT_TRUE(train::split_corpus(docs, 0).held_out.empty());
  EXPECT_THROW(train::split_corpus(docs, 1.0), Error);
}

TEST(Corpus, TokenStreamFramesDocumentsWithBosAndEos) {
  const std::string path = test::temp_path("corpus-vocab.gguf");
  const train::TrainingVocabulary v = sample_vocabulary(synthetic_documents(50), path);
  EXPECT_EQ(v.mask_id, kTrainedMaskId);
  const std::vector<CorpusDocument> docs = {{"a:0", "let there be light.\n"}, {"a:1", "literal <eos> stays text\n"}};
  const std::vector<int32_t> stream = train::corpus_token_stream(docs, *v.tokenizer);
  const std::vector<int32_t> first = v.tokenizer->encode(docs[0].text, false, false);
  ASSERT_GT(stream.size(), first.size() + 4);
  EXPECT_EQ(stream[0], 2);  // <bos>
  EXPECT_TRUE(std::equal(first.begin(), first.end(), stream.begin() + 1));
  EXPECT_EQ(stream[first.size() + 1], 1);  // <eos>
  EXPECT_EQ(stream[first.size() + 2], 2);
  EXPECT_EQ(stream.back(), 1);
  EXPECT_EQ(std::count(stream.begin(), stream.end(), 1), 2);  // the literal "<eos>" is not the token
  EXPECT_EQ(v.tokenizer->decode(stream), docs[0].text + docs[1].text);
  std::remove(path.c_str());
}

// Bytes per token of a split: every document encoded alone, without <bos>/<eos>.
TEST(Corpus, TokenizationMeasureCountsDocumentsBytesAndTokens) {
  const std::string path = test::temp_path("corpus-measure-vocab.gguf");
  const train::TrainingVocabulary v = sample_vocabulary(synthetic_documents(50), path);
  const std::vector<CorpusDocument> docs = {{"a:0", "let there be light.\n"}, {"a:1", "literal <eos> stays text\n"}};
  const train::TokenizationMeasure m = train::measure_tokenization(docs, *v.tokenizer);
  EXPECT_EQ(m.documents, 2);
  EXPECT_EQ(m.bytes, int64_t(docs[0].text.size() + docs[1].text.size()));
  EXPECT_EQ(m.tokens, int64_t(v.tokenizer->encode(docs[0].text, false, false).size() +
                              v.tokenizer->encode(docs[1].text, false, false).size()));
  EXPECT_DOUBLE_EQ(m.bytes_per_token(), double(m.bytes) / double(m.tokens));
  EXPECT_EQ(train::measure_tokenization({}, *v.tokenizer).bytes_per_token(), 0.0);
  std::remove(path.c_str());
}

// canvas tokenizer train's library half: the vocabulary is learned from the training split only, measured
// on both splits as measure_tokenization measures them, and its GGUF keys say how it was made.
TEST(Corpus, TokenizerTrainedOnTheTrainingSplit) {
  test::TempDir dir;
  const std::string corpus = dir.path("corpus.txt");
  {
    std::ofstream out(corpus);
    for (const CorpusDocument& d : synthetic_documents(60)) out << d.text << "\n";
  }
  BpeTrainOptions o;
  o.vocab_size = 300;
  const train::CorpusTokenizer t = train::train_corpus_tokenizer(corpus, 0.1, o);
  EXPECT_EQ(int64_t(t.vocab.tokens.size()), 300);
  const train::CorpusSplit split = train::split_corpus(train::load_corpus(corpus), 0.1);
  EXPECT_EQ(t.training_documents, int64_t(split.train.size()));
  const HfTokenizer tokenizer = HfTokenizer::from_vocab(t.vocab);
  EXPECT_EQ(t.train.tokens, train::measure_tokenization(split.train, tokenizer).tokens);
  EXPECT_EQ(t.held_out.documents, int64_t(split.held_out.size()));
  EXPECT_GT(t.held_out.documents, 0);
  EXPECT_GT(t.stats.merges, 0);
  ASSERT_EQ(t.metadata.size(), 4u);
  EXPECT_EQ(t.metadata[0].first, "canvas.tokenizer.corpus");
  EXPECT_EQ(t.metadata[0].second.to_string(), "\"" + corpus + "\"");
  EXPECT_EQ(t.metadata[1].second.to_string(), "\"0.1\"");
}

TEST(Corpus, SourceTrainsOnTrainingDocumentsAndValidatesOnHeldOut) {
  const std::vector<CorpusDocument> docs = synthetic_documents(400);
  const std::string path = test::temp_path("corpus-source-vocab.gguf");
  const train::TrainingVocabulary v = sample_vocabulary(docs, path);
  const auto source = train::make_corpus_source(docs, v, 32, 0.05, 1000);
  EXPECT_EQ(source->vocab_size(), 320);
  EXPECT_EQ(source->mask_token(), kTrainedMaskId);
  EXPECT_EQ(source->eos_token(), 1);
  EXPECT_EQ(source->sequence_length(), 32);
  const train::CorpusSplit split = train::split_corpus(docs, 0.05);
  const std::vector<int32_t> held = train::corpus_token_stream(split.held_out, *v.tokenizer);
  const std::vector<int32_t> trained = train::corpus_token_stream(split.train, *v.tokenizer);
  ASSERT_EQ(source->validation().size(), held.size() / 32);
  for (size_t i = 0; i < source->validation().size(); ++i)
    EXPECT_TRUE(std::equal(held.begin() + int64_t(i * 32), held.begin() + int64_t(i * 32 + 32),
                           source->validation()[i].tokens.begin()))
        << i;
  Rng rng(5);
  for (int i = 0; i < 20; ++i) {
    const train::Example e = source->sample(rng);
    ASSERT_EQ(e.tokens.size(), 32u);
    EXPECT_NE(std::search(trained.begin(), trained.end(), e.tokens.begin(), e.tokens.end()), trained.end());
  }
  bool has_mask = false;
  for (const auto& [key, value] : source->tokenizer_metadata(true)) has_mask |= key == "tokenizer.ggml.mask_token_id";
  EXPECT_TRUE(has_mask);
  for (const auto& [key, value] : source->tokenizer_metadata(false)) EXPECT_NE(key, "tokenizer.ggml.mask_token_id");
  EXPECT_THROW(train::make_corpus_source(docs, v, 100000, 0.05, 10), Error);  // sequences longer than the text
  std::remove(path.c_str());
}

TEST(Train, TokenizedCorpusRunSavesTheTokenizersVocabulary) {
  const std::vector<CorpusDocument> docs = synthetic_documents(200);
  const std::string dir = test::temp_path("corpus-run"), text = test::temp_path("corpus-run.txt");
  const std::string vocab = test::temp_path("corpus-run-vocab.gguf");
  std::system(("rm -rf " + dir).c_str());
  {
    std::ofstream out(text);
    for (const CorpusDocument& d : docs) out << d.text << "\n";  // paragraphs
  }
  sample_vocabulary(docs, vocab);
  for (const char* objective : {"masked", "uniform"}) {
    const std::string config = "task = text\nobjective = " + std::string(objective) +
                               "\nlayers = 1\nhidden = 32\nheads = 2\nkv_heads = 2\nffn = 64\nseq_len = 32\n"
                               "block_length = 8\ntext_corpus = " + text + "\ntokenizer = " + vocab +
                               "\nval_fraction = 0.05\neval_examples = 4\nbatch_size = 2\nsteps = 2\n"
                               "eval_every = 2\ncheckpoint_every = 2\nthreads = 1\n";
    const std::string out = dir + "-" + objective;
    std::system(("rm -rf " + out).c_str());
    train::run_training(train::parse_run_config(config, "corpus.cfg"), out, nullptr);
    const auto file = GgufFile::open(out + "/model.gguf");
    EXPECT_EQ(file->get_string("tokenizer.ggml.model", ""), "gemma4");
    EXPECT_EQ(int64_t(file->get_string_array("tokenizer.ggml.tokens").size()), 320);
    EXPECT_EQ(file->get_int("tokenizer.ggml.mask_token_id", -1), std::string(objective) == "masked" ? 4 : -1);
    const Model m = Model::load(out + "/model.gguf");
    EXPECT_EQ(m.config.vocab, 320);
    EXPECT_EQ(m.config.eos_token, 1);
    // The validation accuracy counts tokens, not bytes.
    EXPECT_NE(test::read_text(out + "/train.csv").find("token_accuracy"), std::string::npos);
    std::system(("rm -rf " + out).c_str());
  }
  std::remove(text.c_str());
  std::remove(vocab.c_str());
}


// A run that takes its vocabulary from a model (init_from / model_config) and names a corpus (kjv) holds
// out the same chapters, as the same token windows, as a run with `tokenizer = FILE`: stage 2 of a recipe
// never trains on what stage 1 held out.
TEST(TextTask, NamedCorpusWithModelTokenizerHoldsOutTheSameChapters) {
  const std::string tokenizer = test::source_path("models/tokenizer-kjv.gguf");
  const std::string common = "task = text\ntext_corpus = kjv\nseq_len = 64\neval_examples = 16\n";
  const train::RunConfig named = train::parse_run_config(common + "tokenizer = " + tokenizer + "\n", "a.cfg");
  const train::RunConfig from_model = train::parse_run_config(common, "b.cfg");
  train::TaskContext context;
  context.objective = "ar";
  context.eval_examples = 16;
  const auto a = named.task_module->make_source(context);
  context.model_tokenizer = tokenizer;
  context.model_vocab = 8192;
  const auto b = from_model.task_module->make_source(context);
  ASSERT_EQ(a->validation().size(), 16u);
  ASSERT_EQ(b->validation().size(), a->validation().size());
  for (size_t i = 0; i < a->validation().size(); ++i)
    EXPECT_EQ(b->validation()[i].tokens, a->validation()[i].tokens) << "validation window " << i;
  EXPECT_EQ(b->vocab_size(), 8192);
}

}  // namespace
}  // namespace canvas
