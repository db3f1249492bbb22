// convert --to hf into a folder that holds an older checkpoint: the folder ends entirely old (after a failed
// write, with no partial files anywhere) or entirely new, never a mix of the two.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "gguf_copy.h"
#include "dead_pid.h"
#include "test_util.h"

namespace canvas {
namespace {

namespace fs = std::filesystem;

std::set<std::string> names_in(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename().string());
  return names;
}

// An older checkpoint: its own weights, config and tokenizer, and a stale shard index.
void write_old_checkpoint(const std::string& dir) {
  fs::create_directories(dir);
  for (const char* name : {"model.safetensors", "config.json", "tokenizer.json", "model.safetensors.index.json"})
    std::ofstream(dir + "/" + name) << "old " << name;
}

TEST(ConvertToHf, FailedWriteLeavesTheOldCheckpointWhole) {
  test::TempDir tmp;
  const std::string out = tmp.path("ckpt");
  write_old_checkpoint(out);
  // A tokenizer canvas cannot write as tokenizer.json: the export fails after the weights and config.
  const std::string bad = test::gguf_with_keys(tmp, "bad-tokenizer.gguf", test::fixture("tiny-llada.gguf"),
                                               {{"tokenizer.ggml.pre", GgufValue::string("no-such-pre")}});
  const auto r = test::run_canvas("convert --in " + bad + " --out " + out + " --to hf");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("no-such-pre"), std::string::npos) << r.output;
  EXPECT_EQ(names_in(out), (std::set<std::string>{"config.json", "model.safetensors", "model.safetensors.index.json",
                                                  "tokenizer.json"}));
  EXPECT_EQ(test::read_text(out + "/model.safetensors"), "old model.safetensors");
  EXPECT_EQ(test::read_text(out + "/config.json"), "old config.json");
  // No partial folder beside it.
  EXPECT_EQ(names_in(tmp.path("")), (std::set<std::string>{"ckpt", "bad-tokenizer.gguf"}));
}

TEST(ConvertToHf, SuccessReplacesTheOldCheckpointWhole) {
  test::TempDir tmp;
  const std::string out = tmp.path("ckpt");
  write_old_checkpoint(out);
  const auto r = test::run_canvas("convert --in " + test::fixture("tiny-llada.gguf") + " --out " + out + "/ --to hf");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The stale shard index is gone with the rest of the old checkpoint.
  EXPECT_EQ(names_in(out), (std::set<std::string>{"config.json", "model.safetensors", "tokenizer.json"}));
  EXPECT_NE(test::read_text(out + "/config.json").find("\"architectures\""), std::string::npos);
  EXPECT_EQ(names_in(tmp.path("")), (std::set<std::string>{"ckpt"}));
  // A new folder, and an empty one, are written too.
  for (const std::string& fresh : {tmp.path("new/deeper"), tmp.path("empty")}) {
    if (fresh == tmp.path("empty")) fs::create_directories(fresh);
    const auto again = test::run_canvas("convert --in " + test::fixture("tiny-llada.gguf") + " --out " + fresh + " --to hf");
    ASSERT_EQ(again.exit_code, 0) << again.output;
    EXPECT_EQ(names_in(fresh), (std::set<std::string>{"config.json", "model.safetensors", "tokenizer.json"}));
  }
}

// A folder that holds more than a checkpoint (a model card, a .git folder) is refused before anything is
// written: replacing the folder whole would take those files with it.
TEST(ConvertToHf, FolderWithOtherFilesIsRefused) {
  test::TempDir tmp;
  const std::string out = tmp.path("ckpt");
  write_old_checkpoint(out);
  std::ofstream(out + "/README.md") << "my notes";
  fs::create_directories(out + "/.git");
  const auto r = test::run_canvas("convert --in " + test::fixture("tiny-llada.gguf") + " --out " + out + " --to hf");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(out + " holds files that are not part of a Hugging Face checkpoint (.git, README.md)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(test::read_text(out + "/README.md"), "my notes");
  EXPECT_EQ(test::read_text(out + "/config.json"), "old config.json");
  EXPECT_EQ(names_in(tmp.path("")), (std::set<std::string>{"ckpt"}));
}

// Issue 61 K: a convert --to hf killed mid-write left DIR.canvas-partial-PID (a whole checkpoint) beside the
// target, run after run. The next run removes those whose process is gone, and only those.
TEST(ConvertToHf, PartialFoldersOfKilledRunsAreRemoved) {
  test::TempDir tmp;
  const std::string out = tmp.path("ckpt");
  const pid_t dead = test::dead_pid();
  ASSERT_GT(dead, 0);
  const std::string leftover = out + ".canvas-partial-" + std::to_string(dead);
  const std::string alive = out + ".canvas-partial-" + std::to_string(getpid());  // a run still writing
  const std::string other = tmp.path("other.canvas-partial-" + std::to_string(dead));  // another target's
  for (const std::string& folder : {leftover, alive, other}) write_old_checkpoint(folder);
  const auto r = test::run_canvas("convert --in " + test::fixture("tiny-llada.gguf") + " --out " + out + " --to hf");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(names_in(tmp.path("")),
            (std::set<std::string>{"ckpt", fs::path(alive).filename().string(), fs::path(other).filename().string()}));
}

}  // namespace
}  // namespace canvas
