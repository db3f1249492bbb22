// Training tasks: what a run learns (its data source, its own config keys, the metadata its models
// carry and its validation metrics) behind one interface, registered by name (`task = NAME`).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/gguf.h"
#include "train/data.h"

namespace canvas::train {

// What the generic part of a run tells its task when it builds the data.
struct TaskContext {
  std::string objective;      // masked | uniform | ar
  uint64_t seed = 1;          // the run's seed
  int64_t eval_examples = 0;  // validation set size
  // The model file a run starts from or takes its architecture from (init_from / model_config) when its
  // vocabulary is not canvas's bytes: text is tokenized with its tokenizer unless the task names its
  // own. Empty otherwise. Its vocabulary size, mask and end-of-sequence ids come with it.
  std::string model_tokenizer;
  int32_t model_vocab = 0, model_mask_token = -1, model_eos_token = -1;
};

// One validation sequence as the trainer scored it: the targets at its scored positions and the
// model's most likely token there.
struct ScoredSequence {
  std::vector<int32_t> targets, predicted;
};

struct TaskMetric {
  std::string name;  // a CSV column name: lower case, no commas
  double value = 0;
};

class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  // Takes `key = value` when key is one of the task's keys and returns true; false when it is not.
  // A bad value throws Error naming `where` (file:line) and the key.
  virtual bool set(const std::string& key, const std::string& value, const std::string& where) = 0;
  // Called once after the whole config: defaults that depend on the objective, checks across keys.
  virtual void finish(const std::string& objective, const std::string& origin) = 0;
  // Every key of the task with its effective value, in a fixed order. All of them define the run
  // (they change its data), so they are part of the resume identity.
  virtual std::vector<std::pair<std::string, std::string>> settings() const = 0;
  virtual std::unique_ptr<DataSource> make_source(const TaskContext& context) const = 0;
  // Extra GGUF metadata for the models the run writes (e.g. how a Sudoku model lays out its tokens).
  virtual std::vector<std::pair<std::string, GgufValue>> model_metadata() const { return {}; }
  // Names of the metrics validation_metrics returns, in order (train.csv columns).
  virtual std::vector<std::string> metric_names() const = 0;
  virtual std::vector<TaskMetric> validation_metrics(const std::vector<ScoredSequence>& scored) const = 0;
};

using TaskFactory = std::function<std::unique_ptr<Task>()>;
// Adds (or replaces) a task; the built-in one is `text` (`sudoku` is registered from above:
// sudoku/sudoku_task.h).
void register_task(const std::string& name, TaskFactory factory);
// A fresh task of that name with its defaults; an unknown name is an error listing the known ones.
std::unique_ptr<Task> make_task(const std::string& name, const std::string& where);
std::vector<std::string> task_names();

// Config values with their range checks, shared by the generic keys and the tasks' keys. Errors name
// `where` and `key`; numbers that do not fit (overflow, "nan", "inf") are refused, never truncated.
int64_t config_int(const std::string& value, const std::string& where, const std::string& key, int64_t lo,
                   int64_t hi);
// lo_open / hi_open: the bound itself is excluded.
double config_number(const std::string& value, const std::string& where, const std::string& key, double lo,
                     double hi, bool lo_open = false, bool hi_open = false);
bool config_bool(const std::string& value, const std::string& where, const std::string& key);
// Without leading and trailing blanks.
std::string config_trim(const std::string& s);
// "a, b,c" -> {"a", "b", "c"}; empty items stay (callers decide whether they are errors).
std::vector<std::string> config_list(const std::string& value);
// How settings print a number: the shortest text that reads back as the same value.
std::string format_setting(double value);
std::string format_setting(float value);

// Accuracy at the scored positions (fraction of targets predicted) over all sequences.
double scored_accuracy(const std::vector<ScoredSequence>& scored);

}  // namespace canvas::train
