// Instruction tuning from the King James Bible: chat examples (continue a verse, name the book, complete a
// passage, give the next verse) rendered in the Gemma 4 chat format, and a data source that mixes them
// into a corpus source's windows (`task = text`, `sft = FRACTION`).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "train/corpus.h"
#include "train/data.h"

namespace canvas {
class HfTokenizer;
}  // namespace canvas

namespace canvas::train {

// One request and its answer, as text.
struct ChatTurn {
  std::string request, answer;
};

// The book's plain English name for a `bible` abbreviation as corpus keys carry it ("Ge" -> "Genesis",
// "1Sm" -> "1 Samuel", "SSol" -> "Song of Solomon", "Rev" -> "Revelation"); "" when it is not one.
std::string kjv_book_name(const std::string& abbreviation);

// What `canvas chat` sends for one user turn in the Gemma 4 format (apps/canvas/chat.cpp):
// "<bos><|turn>user\n{request}<turn|>\n<|turn>model\n".
std::string gemma4_chat_prompt(const std::string& request);

// Chat turns drawn from KJV chapters (documents keyed "kjv:BookC", one verse per line; documents of other
// parts are ignored). Four kinds, drawn uniformly, each with three phrasings:
//   continue  "Continue this verse: <its first words>"            -> the rest of the verse
//   book      "Which book of the Bible is this verse from? <v>"  -> the book's name ("1 Samuel")
//   passage   "Complete the passage: <v k> <v k+1>"              -> verse k+2
//   next      "What comes after: <v k>"                          -> verse k+1
// Verses come from one chapter (never across chapters, so a chapter held out stays out). Everything
// drawn comes from the rng given: the same documents and rng state give the same turn.
class KjvChatTasks {
 public:
  // Throws Error when no document is a KJV chapter, or a chapter's book is not one of the 66.
  explicit KjvChatTasks(const std::vector<CorpusDocument>& documents);
  ChatTurn draw(Rng& rng) const;
  size_t chapter_count() const { return chapters_.size(); }

 private:
  struct Chapter {
    std::string book;  // full name
    std::vector<std::string> verses;
  };
  std::vector<Chapter> chapters_;
  // (chapter, verse) of every verse, so verses are drawn uniformly over the Bible, not per chapter.
  std::vector<std::pair<uint32_t, uint32_t>> verses_;
};

// Token ids of a chat example: the prompt (gemma4_chat_prompt, its special tokens parsed) is the
// example's prompt (never corrupted, never scored); then the answer, <turn|> (the end of the model's
// turn, an EOS id of the uniform-state sampler), and the tokenizer's pad id (its <eos> when it has none)
// up to seq_len. The padding is scored like the answer: a diffusion model has to learn that the canvas
// after <turn|> is empty. Throws Error when the tokenizer lacks <bos>, <|turn> or <turn|>. Returns false
// (leaving `out` cut to seq_len, the answer without its end) when the example does not fit in seq_len.
// The id that fills a chat example after its answer: the tokenizer's pad, else its <eos>.
int32_t chat_pad_id(const HfTokenizer& tokenizer);

bool chat_example(const ChatTurn& turn, const HfTokenizer& tokenizer, int64_t seq_len, Example& out);

// A data source that draws each training example as a chat example with probability `fraction` (from
// the training rng; turns that do not fit in seq_len are drawn again), else as `plain`'s window. The
// chat turns come from `train_documents`' KJV chapters only. Validation is `plain`'s, followed by
// `n_chat_val` fixed chat examples from `held_out_documents` (drawn with a fixed seed, so every run with
// the same split validates on the same ones). Vocabulary and metadata are `plain`'s.
std::unique_ptr<DataSource> make_sft_source(std::unique_ptr<DataSource> plain,
                                            const std::vector<CorpusDocument>& train_documents,
                                            const std::vector<CorpusDocument>& held_out_documents,
                                            std::shared_ptr<const HfTokenizer> tokenizer, double fraction,
                                            int64_t n_chat_val);

}  // namespace canvas::train
