// Timing forward passes to fit the cost model used for routing.
#include "decode/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/cache_dir.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/output_file.h"
#include "core/timer.h"
#include "decode/verify.h"

namespace canvas {

namespace {
double time_pass(const Model& model, ThreadPool* pool, int64_t rows) {
  const ModelConfig& c = model.config;
  KvCache cache(c, rows);
  std::vector<int32_t> tokens(size_t(rows), std::max<int32_t>(0, c.bos_token));
  std::vector<int32_t> groups(size_t(rows), 0);
  std::vector<float> logits(size_t(c.vocab));
  ForwardRequest req;
  req.tokens = tokens.data();
  req.n = rows;
  req.groups = groups.data();
  req.logit_rows = {int32_t(rows - 1)};
  req.logits = logits.data();
  forward(model, cache, req, pool);  // warm-up: first-touch of buffers and weights
  // The median: one slow repeat (another process on the cores) or one lucky one does not move it, so
  // restarts measure the same line and route the same way.
  std::vector<double> times;
  for (int repeat = 0; repeat < CostModel::kMeasureRepeats; ++repeat) {
    const double t0 = now_ms();
    forward(model, cache, req, pool);
    times.push_back(now_ms() - t0);
  }
  std::nth_element(times.begin(), times.begin() + std::ptrdiff_t(times.size() / 2), times.end());
  return times[times.size() / 2];
}
}  // namespace

CostModel CostModel::measure(const Model& model, ThreadPool* pool, int64_t rows) {
  rows = std::max<int64_t>(2, std::min(rows, model.config.context_length > 0 ? model.config.context_length : rows));
  return measure(model, pool, std::vector<int64_t>{1, std::max<int64_t>(2, rows / 2), rows});
}

CostModel CostModel::measure(const Model& model, ThreadPool* pool, std::vector<int64_t> rows) {
  const int64_t context = model.config.context_length;
  for (int64_t& r : rows) r = std::max<int64_t>(1, context > 0 ? std::min(r, context) : r);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  check(rows.size() >= 2, "the cost model needs passes of two sizes at least");
  CostModel cost;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const int64_t r : rows) {
    const double t = time_pass(model, pool, r), x = double(r);
    cost.passes.emplace_back(r, t);
    sx += x, sy += t, sxx += x * x, sxy += x * t;
  }
  const double n = double(rows.size()), denominator = n * sxx - sx * sx;
  cost.per_row_ms = std::max(0.0, denominator > 0 ? (n * sxy - sx * sy) / denominator : 0.0);
  cost.fixed_ms = std::max(0.0, (sy - cost.per_row_ms * sx) / n);
  return cost;
}

double CostModel::pass_ms(double rows) const {
  if (passes.size() < 2) return fixed_ms + per_row_ms * rows;
  if (rows <= double(passes.front().first)) return passes.front().second;
  for (size_t i = 1; i < passes.size(); ++i) {
    const auto [r0, t0] = passes[i - 1];
    const auto [r1, t1] = passes[i];
    if (rows <= double(r1)) return t0 + (t1 - t0) * (rows - double(r0)) / double(r1 - r0);
  }
  return passes.back().second + per_row_ms * (rows - double(passes.back().first));  // past the last: the line's slope
}

bool CostModel::timed() const {
  if (passes.empty()) return fixed_ms + per_row_ms > 0;
  return std::all_of(passes.begin(), passes.end(), [](const auto& pass) { return pass.second > 0; });
}

void CostModel::take_pass_times(const CostModel& timed) {
  fixed_ms = timed.fixed_ms;
  per_row_ms = timed.per_row_ms;
  passes = timed.passes;
}

void VerifyAcceptance::add(const std::vector<int64_t>& cycles) {
  if (cycles.size() < 2) return;
  std::vector<int64_t>& mine = cycles_keeping[int64_t(cycles.size()) - 1];
  mine.resize(cycles.size(), 0);
  int64_t total = 0;
  for (size_t j = 0; j < cycles.size(); ++j) total += (mine[j] += cycles[j]);
  if (total > kMaxCycles)
    for (int64_t& c : mine) c /= 2;
}

int64_t VerifyAcceptance::cycles(int64_t k) const {
  int64_t total = 0;
  for (auto it = cycles_keeping.lower_bound(k); it != cycles_keeping.end(); ++it)
    for (const int64_t c : it->second) total += c;
  return total;
}

double VerifyAcceptance::tokens_per_cycle(int64_t k) const {
  double kept = 0;
  int64_t total = 0;
  for (auto it = cycles_keeping.lower_bound(k); it != cycles_keeping.end(); ++it)
    for (size_t j = 0; j < it->second.size(); ++j) {
      kept += double(std::min<int64_t>(int64_t(j), k)) * double(it->second[j]);
      total += it->second[j];
    }
  return 1.0 + (total > 0 ? kept / double(total) : 0.0);
}

namespace {
// The cost model in `text`, when it is one (an object with a key and a pass line).
std::optional<nlohmann::json> parse_cost_model(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("key") || !j["key"].is_string() || !j.contains("fixed_ms") ||
      !j["fixed_ms"].is_number())
    return std::nullopt;
  return j;
}

// The bytes of the regular file at `path` (not a link), at most CostModel::kMaxFileBytes; "why" says why not.
std::optional<std::string> read_cost_file(const std::string& path, std::string* why) {
  std::error_code ec;
  const auto status = std::filesystem::symlink_status(path, ec);
  if (ec || status.type() == std::filesystem::file_type::not_found) return std::nullopt;
  if (status.type() == std::filesystem::file_type::symlink) {
    *why = "it is a link (canvas writes its cost model only to a file it made)";
    return std::nullopt;
  }
  if (status.type() != std::filesystem::file_type::regular) {
    *why = "it is not a regular file";
    return std::nullopt;
  }
  const auto size = std::filesystem::file_size(path, ec);
  if (ec || size > uint64_t(CostModel::kMaxFileBytes)) {
    *why = "it is larger than a cost model (" + std::to_string(CostModel::kMaxFileBytes) + " bytes at most)";
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  std::string bytes(size_t(size), '\0');
  if (!in.read(bytes.data(), std::streamsize(size))) {
    *why = "it cannot be read";
    return std::nullopt;
  }
  return bytes;
}
}  // namespace

std::string CostModel::save(const std::string& path, const std::string& key) const {
  std::string why;
  std::error_code ec;
  if (std::filesystem::symlink_status(path, ec).type() != std::filesystem::file_type::not_found) {
    const std::optional<std::string> bytes = read_cost_file(path, &why);
    if (bytes && !parse_cost_model(*bytes)) why = "it is not a cost-model file";
    if (!bytes && why.empty()) why = "it cannot be read";
    if (!why.empty()) return path + ": not written: " + why;
  }
  nlohmann::json j = {{"key", key}, {"fixed_ms", fixed_ms}, {"per_row_ms", per_row_ms}};
  j["passes"] = nlohmann::json::array();
  for (const auto& [rows, ms] : passes) j["passes"].push_back({rows, ms});
  j["verify_cycles_keeping"] = nlohmann::json::object();
  for (const auto& [k, cycles] : acceptance.cycles_keeping) j["verify_cycles_keeping"][std::to_string(k)] = cycles;
  j["observed_ms_per_token"] = nlohmann::json::object();
  for (const auto& [setting, o] : observed) j["observed_ms_per_token"][setting] = {o.ms_per_token, o.runs};
  try {
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    write_file(path, j.dump(2) + "\n", FileOwner::Canvas);
  } catch (const Error& e) {
    return std::string("not written: ") + e.what();
  }
  return "";
}

std::optional<CostModel> CostModel::load(const std::string& path, const std::string& key) {
  std::string why;
  const std::optional<std::string> bytes = read_cost_file(path, &why);
  if (!bytes) return std::nullopt;
  const std::optional<nlohmann::json> parsed = parse_cost_model(*bytes);
  if (!parsed) return std::nullopt;  // a damaged file is measured again (and save says why it is not replaced)
  const nlohmann::json& j = *parsed;
  try {
    if (j["key"].get<std::string>() != key) return std::nullopt;
    CostModel cost;
    cost.fixed_ms = j.value("fixed_ms", -1.0);
    cost.per_row_ms = j.value("per_row_ms", -1.0);
    if (!(std::isfinite(cost.fixed_ms) && cost.fixed_ms >= 0 && std::isfinite(cost.per_row_ms) && cost.per_row_ms >= 0))
      return std::nullopt;
    if (j.contains("passes"))
      for (const auto& p : j["passes"]) {
        const int64_t rows = p.at(0).get<int64_t>();
        const double ms = p.at(1).get<double>();
        if (rows < 1 || !(std::isfinite(ms) && ms >= 0) || (!cost.passes.empty() && rows <= cost.passes.back().first))
          return std::nullopt;
        cost.passes.emplace_back(rows, ms);
      }
    if (j.contains("verify_cycles_keeping"))
      for (const auto& [k, cycles] : j["verify_cycles_keeping"].items()) {
        std::vector<int64_t> counts = cycles.get<std::vector<int64_t>>();
        if (counts.size() != size_t(std::stoll(k)) + 1 || counts.size() > 1025 ||
            std::any_of(counts.begin(), counts.end(), [](int64_t c) { return c < 0 || c > VerifyAcceptance::kMaxCycles; }))
          return std::nullopt;
        cost.acceptance.add(counts);
      }
    if (j.contains("observed_ms_per_token"))
      for (const auto& [setting, o] : j["observed_ms_per_token"].items()) {
        const double ms = o.at(0).get<double>();
        const int64_t runs = o.at(1).get<int64_t>();
        if (!(std::isfinite(ms) && ms > 0) || runs < 1) return std::nullopt;
        cost.observed[setting] = {ms, runs};
      }
    return cost;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

double CostModel::ar_ms(int64_t tokens, int64_t load, int64_t ar_rows) const {
  return double(tokens) * pass_ms(double(load * ar_rows));
}

double CostModel::diffusion_ms(int64_t tokens, int64_t block, int64_t passes, int64_t load) const {
  const double rows = double(tokens + std::min(block, tokens)) / 2.0;
  return double(passes) * pass_ms(double(load) * rows);
}

double CostModel::uniform_ms(int64_t tokens, int64_t canvas, double passes_per_canvas, int64_t load) const {
  const int64_t canvases = (tokens + canvas - 1) / canvas;
  return double(canvases) * passes_per_canvas * pass_ms(double(load * canvas));
}

double CostModel::verify_ms(int64_t tokens, int64_t pass_rows, double tokens_per_forward, int64_t load) const {
  return double(tokens) / std::max(tokens_per_forward, 1e-3) * pass_ms(double(load * pass_rows));
}

void ModeChoice::apply(GenerationRequest& request) const {
  request.mode = mode;
  request.verify.draft_length = mode == DecodeMode::Verify ? draft_length : 0;
  request.verify.overlap = mode == DecodeMode::Verify && overlap;
  request.verify.draft_tree = mode == DecodeMode::Verify ? draft_tree : 0;
  request.mode_reason = reason;
}

namespace {
struct Candidate {
  int64_t k;  // 0: AR
  bool overlap;
  int64_t rows() const { return k == 0 ? 1 : Generator::verify_rows(k, overlap); }
  std::string name() const { return ar_text_setting(k == 0 ? DecodeMode::Ar : DecodeMode::Verify, k, overlap); }
};

std::vector<Candidate> candidates(bool can_overlap) {
  std::vector<Candidate> out = {{0, false}};
  for (int64_t k = 1; k <= kExploreDraftLength; ++k) out.push_back({k, false});
  if (can_overlap)
    for (int64_t k = 1; k <= kMaxOverlapDraftLength; ++k) out.push_back({k, true});
  return out;
}

// A candidate's estimated time per token from the pass times (and verify's acceptance); 0 when verify's
// acceptance at its k is not measured yet.
double estimate_ms(const CostModel& cost, const Candidate& c, int64_t load) {
  if (c.k == 0) return cost.pass_ms(double(load));
  if (cost.acceptance.cycles(c.k) < kMinAcceptanceCycles) return 0;
  const double cycle_ms = (c.overlap ? 1.0 : 2.0) * cost.pass_ms(double(load * c.rows()));
  return cycle_ms / cost.acceptance.tokens_per_cycle(c.k);
}
}  // namespace

std::string ar_text_setting(DecodeMode mode, int64_t draft_length, bool overlap, bool datastore, int64_t draft_tree) {
  if (mode == DecodeMode::Ar) return "ar";
  if (mode != DecodeMode::Verify) return "";
  if (datastore && draft_tree > 0) return "verify tree=" + std::to_string(draft_tree) + " datastore";
  return "verify k=" + std::to_string(draft_length) + (overlap ? " overlapped" : "") + (datastore ? " datastore" : "");
}

ModeChoice choose_datastore_mode(const CostModel& cost, bool trees) {
  struct Setting {
    DecodeMode mode;
    int64_t tree;
  };
  std::vector<Setting> settings = {{DecodeMode::Ar, 0}, {DecodeMode::Verify, 0}};
  for (int64_t tree : kDatastoreTrees)
    if (trees) settings.push_back({DecodeMode::Verify, tree});
  auto name = [](const Setting& s) { return ar_text_setting(s.mode, VerifyParams{}.draft_length, false, true, s.tree); };
  const Setting* best = nullptr;
  double best_ms = 0, last_ms = 0;
  ModeChoice choice;
  auto take = [&](const Setting& s) {
    choice.mode = s.mode;
    choice.draft_length = s.mode == DecodeMode::Verify ? VerifyParams{}.draft_length : 0;
    choice.draft_tree = s.tree;
  };
  char buf[320];
  for (const Setting& s : settings) {
    const auto it = cost.observed.find(name(s));
    if (it == cost.observed.end()) {
      if (best && last_ms > best_ms) break;  // the last one measured was slower than the best: no larger ones
      take(s);
      if (best)
        std::snprintf(buf, sizeof buf, "auto: %s runs to be measured (the fastest so far: %s, %.3f ms per token)",
                      name(s).c_str(), name(*best).c_str(), best_ms);
      else
        std::snprintf(buf, sizeof buf, "auto: ar runs once to be measured against verify with the datastore");
      choice.reason = buf;
      return choice;
    }
    last_ms = it->second.ms_per_token;
    if (!best || last_ms < best_ms) best = &s, best_ms = last_ms;
  }
  take(*best);
  choice.ms_per_token = best_ms;
  std::snprintf(buf, sizeof buf,
                "auto: %s is the fastest of ar and verify with the datastore on this machine (%.3f ms per token, "
                "measured; ar %.3f)",
                name(*best).c_str(), best_ms, cost.observed.at("ar").ms_per_token);
  choice.reason = buf;
  return choice;
}

void CostModel::observe(const std::string& setting, double decode_ms, int64_t tokens) {
  if (setting.empty() || tokens < 8 || !(decode_ms > 0) || !std::isfinite(decode_ms)) return;
  Observed& o = observed[setting];
  const double ms = decode_ms / double(tokens);
  o.ms_per_token = o.runs == 0 ? ms : 0.7 * o.ms_per_token + 0.3 * ms;
  ++o.runs;
}

std::vector<int64_t> ar_text_mode_rows(bool can_overlap, int64_t load) {
  std::vector<int64_t> rows;
  for (const Candidate& c : candidates(can_overlap)) rows.push_back(load * c.rows());
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

ModeChoice choose_ar_text_mode(const CostModel& cost, int64_t load, bool can_overlap) {
  load = std::max<int64_t>(1, load);
  ModeChoice choice;
  char buf[320];
  const int64_t measured = cost.acceptance.cycles(1);
  if (measured < kMinAcceptanceCycles) {
    if (load > 1) {
      std::snprintf(buf, sizeof buf, "auto: ar while verify's acceptance is unmeasured (%lld of %lld cycles) at load %lld",
                    (long long)measured, (long long)kMinAcceptanceCycles, (long long)load);
      choice.reason = buf;
      return choice;
    }
    choice.mode = DecodeMode::Verify;
    choice.draft_length = kExploreDraftLength;
    std::snprintf(buf, sizeof buf,
                  "auto: verify k=%lld writes AR's text while it measures how many drafts this model keeps (%lld of %lld "
                  "cycles measured)",
                  (long long)kExploreDraftLength, (long long)measured, (long long)kMinAcceptanceCycles);
    choice.reason = buf;
    return choice;
  }
  // AR is the reference every setting must beat: it runs once to be measured here too.
  if (load == 1 && cost.observed.find("ar") == cost.observed.end()) {
    choice.reason = "auto: ar runs once to be measured against verify on this machine";
    return choice;
  }
  // How whole runs compare with the estimates (the geometric mean of measured / estimated).
  const std::vector<Candidate> all = candidates(can_overlap);
  double log_ratio = 0;
  int64_t ratios = 0;
  for (const Candidate& c : all) {
    const auto it = cost.observed.find(c.name());
    const double estimate = estimate_ms(cost, c, 1);
    if (it != cost.observed.end() && estimate > 0) log_ratio += std::log(it->second.ms_per_token / estimate), ++ratios;
  }
  const double scale = ratios > 0 ? std::exp(log_ratio / double(ratios)) : 1.0;
  // At load 1, once kMaxExploredSettings settings have run, auto picks among them alone (a user's first runs
  // are not each another experiment).
  int64_t explored = 0;
  for (const Candidate& c : all) explored += cost.observed.count(c.name()) > 0;
  const bool settled = load == 1 && explored >= kMaxExploredSettings;
  const Candidate* best = nullptr;
  double best_ms = 0;
  bool best_measured = false;
  for (const Candidate& c : all) {
    const auto it = cost.observed.find(c.name());
    const bool measured_here = load == 1 && it != cost.observed.end();
    if (settled && !measured_here) continue;
    const double estimate = estimate_ms(cost, c, load);
    if (!measured_here && estimate <= 0) continue;
    const double ms = measured_here ? it->second.ms_per_token : estimate * scale;
    if (!(ms > 0)) continue;  // no pass times: nothing to estimate by
    if (!best || ms < best_ms) best = &c, best_ms = ms, best_measured = measured_here;
  }
  // Among measured settings the one run most often stays while it is within kSwitchMargin of the fastest, so
  // that the noise of one run does not flip the choice from run to run.
  bool kept = false;
  if (best && best_measured) {
    const Candidate* most = nullptr;
    int64_t most_runs = 0;
    for (const Candidate& c : all) {
      const auto it = cost.observed.find(c.name());
      if (it != cost.observed.end() && it->second.runs > most_runs) most = &c, most_runs = it->second.runs;
    }
    const double most_ms = most ? cost.observed.at(most->name()).ms_per_token : 0;
    if (most && most != best && most_runs > cost.observed.at(best->name()).runs &&
        most_ms <= best_ms * (1 + kSwitchMargin))
      best = most, best_ms = most_ms, kept = true;
  }
  if (!best) {
    std::snprintf(buf, sizeof buf, "auto: ar (no pass times to estimate verify by at load %lld)", (long long)load);
    choice.reason = buf;
    return choice;
  }
  choice.mode = best->k == 0 ? DecodeMode::Ar : DecodeMode::Verify;
  choice.draft_length = best->k;
  choice.overlap = best->overlap;
  choice.ms_per_token = best_ms;
  const auto ar = cost.observed.find("ar");
  const double ar_ms = load == 1 && ar != cost.observed.end() ? ar->second.ms_per_token : estimate_ms(cost, all[0], load) * scale;
  std::string load_note = load > 1 ? ", at load " + std::to_string(load) : "";
  if (kept)
    std::snprintf(buf, sizeof buf,
                  "auto: %s, run most often, stays: within %.0f%% of the fastest measured on this machine (%.3f ms "
                  "per token)",
                  best->name().c_str(), 100 * kSwitchMargin, best_ms);
  else if (best->k == 0)
    std::snprintf(buf, sizeof buf, "auto: ar is the fastest of ar and verify on this machine (%.3f ms per token, %s%s)",
                  best_ms, best_measured ? "measured" : "estimated", load_note.c_str());
  else
    std::snprintf(buf, sizeof buf,
                  "auto: %s is the fastest of ar and verify on this machine (%.3f ms per token, %s, %.2f tokens per "
                  "cycle; ar %.3f%s)",
                  best->name().c_str(), best_ms, best_measured ? "measured" : "estimated",
                  cost.acceptance.tokens_per_cycle(best->k), ar_ms, load_note.c_str());
  choice.reason = buf;
  return choice;
}

std::string CostModel::describe() const {
  char buf[200];
  std::snprintf(buf, sizeof buf, "pass = %.3f ms + %.4f ms/row; threshold decoding %.2f tokens/pass", fixed_ms,
                per_row_ms, threshold_tokens_per_forward);
  std::string out = buf;
  if (uniform_passes_per_canvas > 0) {
    std::snprintf(buf, sizeof buf, "; uniform-state %.1f passes/canvas", uniform_passes_per_canvas);
    out += buf;
  }
  if (verify_observations > 0) {
    std::snprintf(buf, sizeof buf, "; verify %.2f tokens/pass", verify_tokens_per_forward);
    out += buf;
  }
  if (const int64_t k = acceptance.longest(); k > 0) {
    std::snprintf(buf, sizeof buf, "; verify keeps %.2f tokens per cycle of %lld drafts (%lld cycles)",
                  acceptance.tokens_per_cycle(k), (long long)k, (long long)acceptance.cycles(k));
    out += buf;
  }
  return out;
}

std::string cost_model_key(const std::string& model_path, int64_t cores, const std::string& device) {
  std::error_code ec;
  const std::filesystem::path model_file = std::filesystem::absolute(model_path, ec);
  const auto size =
      std::filesystem::is_regular_file(model_file, ec) ? std::filesystem::file_size(model_file, ec) : 0;
  const auto mtime = std::filesystem::last_write_time(model_file, ec).time_since_epoch().count();
  return model_file.string() + " " + std::to_string(size) + " " + std::to_string(mtime) + " threads " +
         std::to_string(cores) + " " + simd_level_name(simd_level()) + " " + device;
}

std::string cost_model_file_for(const std::string& file, const std::string& model_id, size_t models) {
  if (models <= 1) return file;
  const std::filesystem::path path(file);
  const std::string stem = path.stem().string(), extension = path.extension().string();
  return (path.parent_path() / (stem + "." + model_id + extension)).string();
}

std::string default_cost_model_file(const std::string& key) {
  const std::string dir = user_cache_dir();
  if (dir.empty()) return "";
  char name[64];
  std::snprintf(name, sizeof name, "cost-model-%016llx.json", (unsigned long long)std::hash<std::string>{}(key));
  return (std::filesystem::path(dir) / name).string();
}

}  // namespace canvas
