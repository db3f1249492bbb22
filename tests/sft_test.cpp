// Instruction tuning from the corpus (train/sft.h): chat examples in the Gemma 4 format, their prompts
// never scored, held-out chapters kept out of training, book names, determinism, the `sft` key, a run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/rng.h"
#include "io/hf_tokenizer.h"
#include "test_util.h"
#include "train/corpus.h"
#include "train/objectives.h"
#include "train/sft.h"
#include "train/task.h"
#include "train/trainer.h"

namespace canvas {
namespace {

using train::ChatTurn;
using train::CorpusDocument;

const std::string kTokenizer = test::source_path("models/tokenizer-kjv.gguf");

const train::TrainingVocabulary& kjv_vocabulary() {
  static const train::TrainingVocabulary v = train::load_training_vocabulary(kTokenizer);
  return v;
}

// Synthetic KJV chapters whose every verse names its chapter ("Ge7 verse 3 ..."), so the chapter a text
// came from can be read off it. Real book abbreviations, chapters 1..n of each.
std::vector<CorpusDocument> tagged_chapters() {
  std::vector<CorpusDocument> docs;
  const char* words[] = {"and", "the", "LORD", "said", "unto", "Moses", "behold", "light", "waters", "day"};
  Rng rng(3);
  for (const char* book : {"Ge", "Exo", "1Sm", "Psa", "Mat", "Rev"})
    for (int chapter = 1; chapter <= 25; ++chapter) {
      const std::string key = std::string(book) + std::to_string(chapter);
      std::string text;
      for (int verse = 1; verse <= 3 + int(rng.below(5)); ++verse) {
        text += key + " verse " + std::to_string(verse);
        for (int w = 0; w < 4 + int(rng.below(6)); ++w) text += std::string(" ") + words[rng.below(10)];
        text += ".\n";
      }
      docs.push_back({"kjv:" + key, text});
    }
  return docs;
}

// The chapter tags ("Ge7") a text holds.
std::set<std::string> tags_in(const std::string& text, const std::vector<CorpusDocument>& docs) {
  std::set<std::string> tags;
  std::istringstream in(text);
  std::string word, previous;
  std::set<std::string> keys;
  for (const CorpusDocument& d : docs) keys.insert(d.key.substr(4));
  while (in >> word) {
    if (word == "verse" && keys.count(previous)) tags.insert(previous);
    previous = word;
  }
  return tags;
}

// The decoded text of a chat example, specials included.
std::string text_of(const train::Example& e) {
  return kjv_vocabulary().tokenizer->decode(e.tokens, true);
}

TEST(Sft, BookNamesAreThePlainEnglishNames) {
  EXPECT_EQ(train::kjv_book_name("Ge"), "Genesis");
  EXPECT_EQ(train::kjv_book_name("1Sm"), "1 Samuel");
  EXPECT_EQ(train::kjv_book_name("SSol"), "Song of Solomon");
  EXPECT_EQ(train::kjv_book_name("Phmn"), "Philemon");
  EXPECT_EQ(train::kjv_book_name("3Jn"), "3 John");
  EXPECT_EQ(train::kjv_book_name("Rev"), "Revelation");
  EXPECT_EQ(train::kjv_book_name("Gen"), "");
  // Every abbreviation `bible` prints has a name (the whole Bible, as the corpus loads it).
  std::set<std::string> books;
  for (const CorpusDocument& d : train::load_corpus("kjv")) {
    const std::string reference = d.key.substr(4);
    const std::string abbreviation = reference.substr(0, reference.find_last_not_of("0123456789") + 1);
    EXPECT_NE(train::kjv_book_name(abbreviation), "") << d.key;
    books.insert(train::kjv_book_name(abbreviation));
  }
  EXPECT_EQ(books.size(), 66u);
}

TEST(Sft, BookQuestionsAnswerTheVersesBook) {
  // Known verses, each alone in its chapter so every question about it must name its book.
  const std::vector<CorpusDocument> docs = train::kjv_documents(
      "Ge1:1 In the beginning God created the heaven and the earth.\n"
      "1Sm17:50 So David prevailed over the Philistine with a sling and with a stone.\n"
      "Psa23:1 The LORD is my shepherd; I shall not want.\n"
      "John11:35 Jesus wept.\n"
      "Rev22:21 The grace of our Lord Jesus Christ be with you all. Amen.\n");
  const std::map<std::string, std::string> book_of = {
      {"In the beginning God created the heaven and the earth.", "Genesis"},
      {"So David prevailed over the Philistine with a sling and with a stone.", "1 Samuel"},
      {"The LORD is my shepherd; I shall not want.", "Psalms"},
      {"Jesus wept.", "John"},
      {"The grace of our Lord Jesus Christ be with you all. Amen.", "Revelation"}};
  const train::KjvChatTasks tasks(docs);
  EXPECT_EQ(tasks.chapter_count(), 5u);
  Rng rng(1);
  std::set<std::string> answered;
  for (int i = 0; i < 400; ++i) {
    const ChatTurn t = tasks.draw(rng);
    // One-verse chapters allow only `book` and `continue` turns.
    bool matched = false;
    for (const auto& [verse, book] : book_of) {
      if (t.request.size() < verse.size() || t.request.compare(t.request.size() - verse.size(), verse.size(), verse))
        continue;
      EXPECT_EQ(t.answer, book) << t.request;
      answered.insert(book);
      matched = true;
    }
    if (!matched) {
      EXPECT_NE(t.request.find("verse"), std::string::npos) << t.request;  // a `continue` turn
    }
  }
  EXPECT_EQ(answered.size(), 5u);
  EXPECT_THROW(train::KjvChatTasks(std::vector<CorpusDocument>{{"kjv:Gen1", "In the beginning.\n"}}), Error);  // not an abbreviation
  EXPECT_THROW(train::KjvChatTasks(std::vector<CorpusDocument>{{"fortunes:a:0", "No Bible here.\n"}}), Error);
}

TEST(Sft, ExamplesAreInTheGemma4ChatFormat) {
  const HfTokenizer& tok = *kjv_vocabulary().tokenizer;
  ASSERT_EQ(tok.token_id("<|turn>"), 105);
  ASSERT_EQ(tok.token_id("<turn|>"), 106);
  const ChatTurn turn{"What comes after: In the beginning God created the heaven and the earth.",
                      "And the earth was without form, and void."};
  train::Example e;
  ASSERT_TRUE(train::chat_example(turn, tok, 96, e));
  ASSERT_EQ(e.tokens.size(), 96u);
  // The prompt is what `canvas chat` sends for this request, token for token.
  const std::string prompt = "<bos><|turn>user\n" + turn.request + "<turn|>\n<|turn>model\n";
  EXPECT_EQ(train::gemma4_chat_prompt(turn.request), prompt);
  const std::vector<int32_t> chat_ids = tok.encode(prompt, false, true);
  ASSERT_EQ(e.prompt_len, int64_t(chat_ids.size()));
  EXPECT_TRUE(std::equal(chat_ids.begin(), chat_ids.end(), e.tokens.begin()));
  EXPECT_EQ(e.tokens[0], 2);
  EXPECT_EQ(e.tokens[1], 105);
  EXPECT_EQ(std::count(e.tokens.begin(), e.tokens.begin() + e.prompt_len, 105), 2);
  EXPECT_EQ(std::count(e.tokens.begin(), e.tokens.begin() + e.prompt_len, 106), 1);
  // Then the answer, the end of the model's turn, and padding to the end.
  const std::vector<int32_t> answer = tok.encode(turn.answer, false, false);
  EXPECT_TRUE(std::equal(answer.begin(), answer.end(), e.tokens.begin() + e.prompt_len));
  const size_t end = size_t(e.prompt_len) + answer.size();
  EXPECT_EQ(e.tokens[end], 106);
  const int32_t pad = train::chat_pad_id(tok);
  EXPECT_EQ(pad, tok.pad_id() >= 0 ? tok.pad_id() : 1);
  for (size_t i = end + 1; i < e.tokens.size(); ++i) EXPECT_EQ(e.tokens[i], pad) << i;
  EXPECT_EQ(text_of(e).substr(0, prompt.size() + turn.answer.size() + 7), prompt + turn.answer + "<turn|>");
  // Too long for the sequence: cut, and said so.
  train::Example cut;
  EXPECT_FALSE(train::chat_example(turn, tok, int64_t(end), cut));
  EXPECT_EQ(cut.tokens.size(), end);
  EXPECT_EQ(std::count(cut.tokens.begin(), cut.tokens.end(), 106), 1);
}

TEST(Sft, PromptsAreNeverScoredAndTheEndIs) {
  const std::vector<CorpusDocument> docs = tagged_chapters();
  const auto& v = kjv_vocabulary();
  const auto source = train::make_sft_source(train::make_corpus_source(docs, v, 64, 0.1, 4), docs, {}, v.tokenizer,
                                             1.0, 0);
  Rng rng(9);
  std::vector<train::Example> batch;
  for (int i = 0; i < 8; ++i) batch.push_back(source->sample(rng));
  for (const train::Example& e : batch) ASSERT_GT(e.prompt_len, 10);
  train::UniformStateOptions o;
  o.block_length = 16;
  o.vocab = v.tokenizer->vocab_size();
  o.decoder_view = true;
  int64_t scored_end = 0, scored_pad = 0;
  for (int draw = 0; draw < 20; ++draw) {
    const train::ObjectiveBatch ob = train::uniform_state_batch(batch, o, rng);
    const int64_t L = ob.input.length;
    for (int64_t s = 0; s < ob.input.n_sequences; ++s) {
      const train::Example& e = batch[size_t(s)];
      for (int64_t row = s * L; row < (s + 1) * L; ++row) {
        if (!(ob.weights[size_t(row)] > 0)) continue;
        // Block rows predict their own position, encoder rows the next one.
        const int64_t target = ob.input.positions[size_t(row)] + (ob.input.decoder[size_t(row)] ? 0 : 1);
        EXPECT_GE(target, e.prompt_len);
        EXPECT_EQ(ob.targets[size_t(row)], e.tokens[size_t(target)]);
        scored_end += ob.targets[size_t(row)] == 106;
        scored_pad += ob.targets[size_t(row)] == train::chat_pad_id(*v.tokenizer);
      }
    }
  }
  EXPECT_GT(scored_end, 0);  // <turn|> is learnt
  EXPECT_GT(scored_pad, 0);  // and so is the empty canvas after it
  // Masked diffusion: no prompt token is ever masked.
  const train::ObjectiveBatch mb = train::masked_diffusion_batch(batch, 4, 1e-3f, rng);
  for (size_t s = 0; s < batch.size(); ++s)
    for (int64_t i = 0; i < batch[s].prompt_len; ++i) {
      EXPECT_EQ(mb.input.tokens[s * 64 + size_t(i)], batch[s].tokens[size_t(i)]);
      EXPECT_EQ(mb.weights[s * 64 + size_t(i)], 0.f);
    }
}

TEST(Sft, HeldOutChaptersNeverAppearInTrainingChatExamples) {
  const std::vector<CorpusDocument> docs = tagged_chapters();
  const auto& v = kjv_vocabulary();
  const train::CorpusSplit split = train::split_corpus(docs, 0.2);
  ASSERT_GE(split.held_out.size(), 20u);
  std::set<std::string> held;
  for (const CorpusDocument& d : split.held_out) held.insert(d.key.substr(4));
  const auto source = train::make_sft_source(train::make_corpus_source(docs, v, 96, 0.2, 8), split.train,
                                             split.held_out, v.tokenizer, 0.5, 6);
  Rng rng(2);
  int chat = 0;
  std::set<std::string> seen;
  for (int i = 0; i < 600; ++i) {
    const train::Example e = source->sample(rng);
    if (e.prompt_len == 0) continue;  // a plain window
    ++chat;
    for (const std::string& tag : tags_in(text_of(e), docs)) {
      ASSERT_EQ(held.count(tag), 0u) << tag << " in " << text_of(e);
      seen.insert(tag);
    }
  }
  EXPECT_GT(chat, 200);
  EXPECT_LT(chat, 400);  // about half
  EXPECT_GT(seen.size(), 50u);
  // Validation: the plain held-out windows, then chat examples from held-out chapters only.
  const auto& val = source->validation();
  ASSERT_EQ(val.size(), 8u + 6u);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(val[i].prompt_len, 0);
  for (size_t i = 8; i < val.size(); ++i) {
    EXPECT_GT(val[i].prompt_len, 0);
    const std::set<std::string> tags = tags_in(text_of(val[i]), docs);
    EXPECT_FALSE(tags.empty()) << text_of(val[i]);
    for (const std::string& tag : tags) EXPECT_EQ(held.count(tag), 1u) << tag;
  }
}

// Through the text task, on the whole Bible: chat examples from training chapters only, validation chat
// examples after the plain windows, and the metrics split between them.
TEST(Sft, TheTextTaskKeepsHeldOutChaptersOutOfTraining) {
  const std::unique_ptr<train::Task> task = train::make_task("text", "x.cfg");
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"text_corpus", "kjv"}, {"tokenizer", kTokenizer}, {"seq_len", "128"}, {"sft", "1"}})
    ASSERT_TRUE(task->set(key, value, "x.cfg"));
  task->finish("uniform", "x.cfg");
  train::TaskContext context;
  context.objective = "uniform";
  context.eval_examples = 10;
  const auto source = task->make_source(context);
  // Held-out verses that no training chapter also has (long ones, so no training verse holds them).
  const std::vector<CorpusDocument> bible = train::load_corpus("kjv");
  const train::CorpusSplit split = train::split_corpus(bible, 0.02);
  std::set<std::string> trained;
  for (const CorpusDocument& d : split.train) {
    std::istringstream in(d.text);
    for (std::string verse; std::getline(in, verse);) trained.insert(verse);
  }
  std::vector<std::string> held;
  for (const CorpusDocument& d : split.held_out) {
    std::istringstream in(d.text);
    for (std::string verse; std::getline(in, verse);)
      if (verse.size() >= 60 && !trained.count(verse)) held.push_back(verse);
  }
  ASSERT_GT(held.size(), 200u);
  Rng rng(6);
  for (int i = 0; i < 1500; ++i) {
    const train::Example e = source->sample(rng);
    ASSERT_GT(e.prompt_len, 0);  // sft = 1: every example is a chat example
    const std::string text = text_of(e);
    for (const std::string& verse : held) ASSERT_EQ(text.find(verse), std::string::npos) << text;
  }
  // Validation: the plain windows, then sft x eval_examples chat examples, which do use held-out verses.
  const auto& val = source->validation();
  ASSERT_EQ(val.size(), 20u);
  int with_held_out = 0;
  for (size_t i = 0; i < val.size(); ++i) {
    EXPECT_EQ(val[i].prompt_len > 0, i >= 10) << i;
    if (i < 10) continue;
    const std::string text = text_of(val[i]);
    with_held_out += std::any_of(held.begin(), held.end(), [&](const std::string& v) { return text.find(v) != std::string::npos; });
  }
  EXPECT_GT(with_held_out, 0);
  // token_accuracy counts the plain windows, chat_accuracy the chat answers without their padding.
  ASSERT_EQ(task->metric_names(), (std::vector<std::string>{"token_accuracy", "chat_accuracy"}));
  const int32_t pad = train::chat_pad_id(*kjv_vocabulary().tokenizer);
  std::vector<train::ScoredSequence> scored(20);
  for (size_t i = 0; i < 10; ++i) scored[i] = {{5, 6}, {5, 6}};  // plain: all right
  for (size_t i = 10; i < 20; ++i) scored[i] = {{7, 8, 106, 9, pad, pad}, {7, 0, 106, 0, pad, 3}};  // half the answer
  const std::vector<train::TaskMetric> m = task->validation_metrics(scored);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_DOUBLE_EQ(m[0].value, 1.0);
  EXPECT_DOUBLE_EQ(m[1].value, 0.5);
}

TEST(Sft, ExamplesDependOnlyOnTheSeed) {
  const std::vector<CorpusDocument> docs = tagged_chapters();
  const auto& v = kjv_vocabulary();
  const train::CorpusSplit split = train::split_corpus(docs, 0.1);
  auto make = [&] {
    return train::make_sft_source(train::make_corpus_source(docs, v, 96, 0.1, 4), split.train, split.held_out,
                                  v.tokenizer, 0.7, 3);
  };
  const auto a = make(), b = make();
  auto draws = [](const train::DataSource& s, uint64_t seed) {
    Rng rng(seed);
    std::vector<std::vector<int32_t>> out;
    for (int i = 0; i < 30; ++i) {
      const train::Example e = s.sample(rng);
      out.push_back(e.tokens);
      out.back().push_back(int32_t(e.prompt_len));
    }
    return out;
  };
  EXPECT_EQ(draws(*a, 4), draws(*b, 4));
  EXPECT_NE(draws(*a, 4), draws(*a, 5));
  ASSERT_EQ(a->validation().size(), b->validation().size());
  for (size_t i = 0; i < a->validation().size(); ++i) EXPECT_EQ(a->validation()[i].tokens, b->validation()[i].tokens);
  // The turns themselves: kinds and phrasings vary, and all four kinds come up.
  const train::KjvChatTasks tasks(split.train);
  Rng r1(8), r2(8);
  std::set<std::string> openings;
  for (int i = 0; i < 200; ++i) {
    const ChatTurn t1 = tasks.draw(r1), t2 = tasks.draw(r2);
    ASSERT_EQ(t1.request, t2.request);
    ASSERT_EQ(t1.answer, t2.answer);
    openings.insert(t1.request.substr(0, 12));
  }
  EXPECT_GE(openings.size(), 12u);  // 4 kinds x 3 phrasings
}

TEST(Sft, TheSftKeyIsRangeCheckedAndDefinesTheRun) {
  const std::string base = "task = text\ntext_corpus = kjv\ntokenizer = " + kTokenizer + "\n";
  for (const char* value : {"-0.1", "1.5", "nan", "inf", "half", ""}) {
    try {
      train::parse_run_config(base + "sft = " + value + "\n", "x.cfg");
      ADD_FAILURE() << "sft = " << value << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("x.cfg:4: sft"), std::string::npos) << e.what();
    }
  }
  const std::string off = train::run_identity(train::parse_run_config(base, "x.cfg"));
  // Off (the default) is not listed, so runs made before the key resume.
  EXPECT_EQ(train::run_identity(train::parse_run_config(base + "sft = 0\n", "x.cfg")), off);
  EXPECT_EQ(off.find("\nsft = "), std::string::npos);
  const std::string half = train::run_identity(train::parse_run_config(base + "sft = 0.5\n", "x.cfg"));
  EXPECT_NE(half.find("sft = 0.5\n"), std::string::npos);
  EXPECT_NE(train::run_identity(train::parse_run_config(base + "sft = 1\n", "x.cfg")), half);
  // Chat examples come from the Bible.
  try {
    train::parse_run_config("task = text\ntext_corpus = bible\nsft = 0.5\n", "x.cfg");
    ADD_FAILURE() << "sft with the byte-level bible corpus was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("includes kjv"), std::string::npos) << e.what();
  }
  EXPECT_THROW(train::parse_run_config("task = text\ntext_corpus = fortunes\nsft = 0.5\n", "x.cfg"), Error);
}

TEST(Train, SftRunTrainsOnChatExamplesAndReportsChatAccuracy) {
  const std::string out = test::temp_path("sft-run");
  std::system(("rm -rf " + out).c_str());
  const std::string config = "task = text\nobjective = uniform\nself_conditioning = true\nlayers = 1\nhidden = 32\n"
                             "heads = 2\nkv_heads = 2\nffn = 64\nseq_len = 96\nblock_length = 16\n"
                             "text_corpus = kjv\ntokenizer = " + kTokenizer +
                             "\nsft = 0.5\neval_examples = 4\nbatch_size = 2\nsteps = 2\neval_every = 2\n"
                             "checkpoint_every = 2\nthreads = 1\n";
  train::run_training(train::parse_run_config(config, "sft.cfg"), out, nullptr);
  const std::string csv = test::read_text(out + "/train.csv");
  const std::string header = csv.substr(0, csv.find('\n'));
  EXPECT_NE(header.find("token_accuracy,chat_accuracy"), std::string::npos) << header;
  // The last line has the validation values: a finite loss and both accuracies.
  std::istringstream lines(csv);
  std::string line, last;
  while (std::getline(lines, line))
    if (!line.empty()) last = line;
  EXPECT_EQ(std::count(last.begin(), last.end(), ','), std::count(header.begin(), header.end(), ',')) << last;
  EXPECT_EQ(last.find("nan"), std::string::npos) << last;
  ASSERT_TRUE(std::filesystem::exists(out + "/model.gguf"));
  // Stage 3 of the recipe: from a model (its own tokenizer then makes the chat examples), as
  // configs/text-dg-chat.cfg does.
  const std::string tuned = out + "-tuned";
  std::system(("rm -rf " + tuned).c_str());
  train::run_training(
      train::parse_run_config("task = text\nobjective = uniform\nself_conditioning = true\ninit_from = " + out +
                                  "/model.gguf\nseq_len = 96\nblock_length = 16\ntext_corpus = kjv\nsft = 0.7\n"
                                  "eval_examples = 2\nbatch_size = 2\nsteps = 1\neval_every = 1\nthreads = 1\n",
                              "chat.cfg"),
      tuned, nullptr);
  EXPECT_NE(test::read_text(tuned + "/train.csv").find("chat_accuracy"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(tuned + "/model.gguf"));
  std::system(("rm -rf " + out + " " + tuned).c_str());
}

}  // namespace
}  // namespace canvas

namespace canvas {
namespace {

// Not a check: how long chat examples are under the shipped tokenizer (docs/experiments.md). Run with
// --gtest_also_run_disabled_tests --gtest_filter=SftStats.*
TEST(SftStats, DISABLED_ChatTurnLengths) {
  const HfTokenizer& tok = *kjv_vocabulary().tokenizer;
  const train::KjvChatTasks tasks(train::load_corpus("kjv"));
  Rng rng(1);
  const int n = 20000;
  int fit = 0, fit_short_prompt = 0;
  int64_t longest_prompt = 0;
  for (int i = 0; i < n; ++i) {
    train::Example e;
    train::chat_example(tasks.draw(rng), tok, 1024, e);
    const int64_t length = std::find(e.tokens.begin() + e.prompt_len, e.tokens.end(), 106) - e.tokens.begin() + 1;
    longest_prompt = std::max(longest_prompt, e.prompt_len);
    fit += length <= 128;
    fit_short_prompt += length <= 128 && e.prompt_len <= 64;
  }
  std::printf("%d turns: %.1f%% fit in 128 tokens, %.1f%% of those with a prompt of at most 64; longest prompt %lld\n",
              n, 100.0 * fit / n, 100.0 * fit_short_prompt / fit, (long long)longest_prompt);
}

}  // namespace
}  // namespace canvas
