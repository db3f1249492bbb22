// Draft-and-verify decoding: decoder, lookup or datastore drafts, one causal pass verifies, AR's text exactly.
#include "decode/verify.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <queue>

#include "core/error.h"
#include "core/rng.h"
#include "core/timer.h"
#include "decode/lookup_draft.h"
#include "decode/uniform_state.h"
#include "model/kv_cache.h"

namespace canvas {

bool supports_verify(const ModelConfig& c) { return c.uniform_state; }

namespace {

// The causal rows of `tokens` at positions pos0.. (each sees the cache before it and itself), logits of
// every row.
void causal_pass(const Model& model, KvCache& cache, const std::vector<int32_t>& tokens, int64_t pos0,
                 std::vector<float>& logits, ThreadPool* pool, const DecodeCallbacks& callbacks) {
  const int64_t n = int64_t(tokens.size());
  std::vector<int32_t> groups(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) groups[size_t(i)] = int32_t(pos0 + i);
  logits.resize(size_t(n) * size_t(model.config.vocab));
  ForwardRequest req;
  req.tokens = tokens.data();
  req.n = n;
  req.pos0 = pos0;
  req.groups = groups.data();
  req.logit_rows.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) req.logit_rows[size_t(i)] = int32_t(i);
  req.logits = logits.data();
  run_forward(callbacks, model, cache, req, pool);
}

// A draft pass over `canvas` after the first `cached` positions: the decoder (bidirectional over cache and
// canvas, never writing the cache) or, for a model without one, a pass with the whole canvas in one
// visibility group (its K/V land past the cached rows, where the verifying pass overwrites them).
void draft_pass(const Model& model, KvCache& cache, const std::vector<int32_t>& canvas, int64_t cached,
                const std::vector<float>* self_cond, std::vector<float>& logits, ThreadPool* pool,
                const DecodeCallbacks& callbacks) {
  const ModelConfig& c = model.config;
  std::vector<int32_t> groups;
  ForwardRequest req = canvas_forward_request(c, canvas, cached, groups);
  logits.resize(canvas.size() * size_t(c.vocab));
  req.logits = logits.data();
  if (self_cond && (c.has_decoder || c.self_conditioning)) req.self_cond = self_cond->data();
  run_forward(callbacks, model, cache, req, pool);
}

// Where a cycle's drafts come from.
enum class Source { Decoder, Lookup, Datastore };

// softmax(row / T) in double.
std::vector<double> softmax(const float* row, int64_t vocab, double T) {
  std::vector<double> p(static_cast<size_t>(vocab));
  double top = -INFINITY, total = 0;
  for (int64_t j = 0; j < vocab; ++j) top = std::max(top, double(row[j]) / T);
  for (int64_t j = 0; j < vocab; ++j) total += p[size_t(j)] = std::exp(double(row[j]) / T - top);
  for (double& x : p) x /= total;
  return p;
}

// One draw from a distribution (inverse CDF with uniform u).
int32_t draw(const std::vector<double>& p, double u) {
  double total = 0;
  for (double x : p) total += x;
  double cum = 0;
  int32_t last = 0;
  for (size_t j = 0; j < p.size(); ++j) {
    if (p[j] <= 0) continue;
    last = int32_t(j);
    cum += p[j] / total;
    if (cum > u) return int32_t(j);
  }
  return last;
}

}  // namespace

VerifyResult generate_verify(const Model& model, const std::vector<int32_t>& prompt, const VerifyParams& params,
                             ThreadPool* pool, const DecodeCallbacks& callbacks) {
  const ModelConfig& c = model.config;
  check(supports_verify(c), "--mode verify needs a model with a diffusion decoder and a causal path on the same "
                            "weights (DiffusionGemma, or a uniform-state model); '" + c.arch + "' has not");
  const int64_t P = int64_t(prompt.size()), N = params.max_new_tokens, K = params.draft_length;
  check(P >= 1, "draft-and-verify decoding needs a non-empty prompt");
  check(N > 0, "the number of tokens to generate must be positive");
  check(K >= 1 && K <= 1024, "--draft-length must be between 1 and 1024");
  check(params.draft_steps >= 1 && params.draft_steps <= 64, "--draft-steps must be between 1 and 64");
  check(std::isfinite(params.draft_temperature) && params.draft_temperature > 0, "the draft temperature must be > 0");
  check(!params.overlap || c.has_decoder,
        "--overlap needs a decoder that reads the KV cache without writing it (DiffusionGemma); '" + c.arch +
            "' drafts through its causal path");
  check(!params.overlap || params.draft_steps == 1, "--overlap drafts in one decoder pass: --draft-steps must be 1");
  check(params.draft_lookup >= 0 && params.draft_lookup <= 64, "--draft-lookup must be between 0 and 64");
  check(params.draft_lookup == 0 || (params.lookup_length >= 1 && params.lookup_length <= 1024),
        "--draft-lookup-length must be between 1 and 1024");
  check(!params.datastore || (params.datastore_length >= 1 && params.datastore_length <= 1024),
        "--draft-datastore-length must be between 1 and 1024");
  check(params.draft_tree >= 0 && params.draft_tree <= 63, "--draft-tree must be between 0 and 63");
  check(params.draft_tree == 0 || (params.tree.depth >= 1 && params.tree.depth <= 63),
        "--draft-tree-depth must be between 1 and 63");
  check(params.draft_tree == 0 || !model.primitives,
        "--draft-tree verifies a tree of drafts on the CPU only (--device cpu)");
  // A lookup or datastore draft's most tokens.
  const int64_t KL = std::max(params.draft_lookup > 0 ? params.lookup_length : 0,
                              params.datastore ? params.datastore_length : 0);
  const int64_t V = c.vocab;
  const bool sampled = params.sampling.temperature > 0.f;
  std::unique_ptr<KvCache> own;
  int64_t reused = 0;
  const int64_t positions = P + N + std::max({K, KL, params.draft_tree}) + 2;
  KvCache& cache = params.prefix_cache ? params.prefix_cache->acquire(model, prompt, positions, &reused)
                                       : *(own = std::make_unique<KvCache>(c, positions));
  Rng rng(params.sampling.seed);                       // the verifier's draws (as generate_ar's)
  Rng draft_rng(params.sampling.seed ^ 0x9e3779b97f4a7c15ull);  // the drafter's noise and proposals
  VerifyResult result;
  VerifyStats& stats = result.stats;
  stats.draft_length = K;
  stats.overlap = params.overlap;
  stats.draft_lookup = params.draft_lookup;
  stats.datastore = params.datastore != nullptr;
  stats.draft_tree = params.draft_tree;
  stats.cycles_keeping.assign(size_t(K + 1), 0);
  result.prompt_tokens = P;
  std::vector<int32_t> tokens(prompt), generated, recent;
  auto is_stop = [&](int32_t t) {
    return params.stop_ids.empty() ? t == c.eos_token
                                   : std::find(params.stop_ids.begin(), params.stop_ids.end(), t) != params.stop_ids.end();
  };
  // What the next token's penalties read: the repetition penalty's window and the tokens generated so far.
  auto history = [&]() -> TokenHistory {
    TokenHistory h{nullptr, &generated};
    if (params.sampling.repeat_penalty == 1.f) return h;
    const int64_t from = std::max<int64_t>(0, int64_t(tokens.size()) - params.sampling.repeat_last_n);
    recent.assign(tokens.begin() + from, tokens.end());
    h.recent = &recent;
    return h;
  };
  bool done = false;
  // Commits t, drawn from the verifier's `row` (or the draft it checked).
  auto commit = [&](int32_t t, const float* row) {
    tokens.push_back(t);
    generated.push_back(t);
    if (callbacks.on_logprob)
      callbacks.on_logprob(int64_t(generated.size()) - 1, token_logprob(row, V, t, callbacks.logprobs_top));
    done = (params.stop_at_eos && is_stop(t)) || int64_t(generated.size()) >= N;
  };

  std::vector<int32_t> canvas;  // [the last generated token ; the drafts] of the cycle being verified
  // Sampling: each draft's proposal distribution; empty for a lookup draft (a point mass on the draft).
  std::vector<std::vector<double>> proposal;
  // Row i of `rows` is AR's distribution after canvas[0..i]: keeps the longest agreeing prefix of the k
  // drafts canvas[1..k] and commits AR's own token after it (or after all k). Returns the drafts kept.
  auto check_drafts = [&](const float* rows, int64_t k) -> int64_t {
    int64_t kept = 0;
    for (int64_t i = 0; i <= k && !done; ++i) {
      const float* row = rows + size_t(i) * size_t(V);
      if (i == k) {  // every draft kept: AR's next token comes free
        commit(choose_token(row, V, params.sampling, rng, history(), P + int64_t(generated.size())).token, row);
        break;
      }
      const int32_t d = canvas[size_t(i + 1)];
      if (!sampled) {
        const int32_t t = choose_token(row, V, params.sampling, rng, history(), P + int64_t(generated.size())).token;
        commit(t, row);
        if (t != d) break;
        ++kept;
        continue;
      }
      // Speculative rejection sampling: keep d with probability min(1, p(d) / q(d)); otherwise draw from
      // the residual max(0, p - q), renormalised. The kept or drawn token is distributed as p exactly. A
      // lookup draft's q is a point mass on d: kept with probability p(d), else drawn from p without d.
      const float* shaped = penalized_row(row, V, params.sampling, history());
      std::vector<double> p = sampling_distribution(shaped, V, params.sampling);
      const std::vector<double>& q = proposal[size_t(i)];
      if (rng.uniform() * (q.empty() ? 1.0 : q[size_t(d)]) < p[size_t(d)]) {
        commit(d, row);
        ++kept;
        continue;
      }
      if (q.empty()) {
        p[size_t(d)] = 0;
      } else {
        for (int64_t j = 0; j < V; ++j) p[size_t(j)] = std::max(0.0, p[size_t(j)] - q[size_t(j)]);
      }
      commit(draw(p, rng.uniform()), row);
      break;
    }
    return kept;
  };
  // The drafts canvas[1..k] from the decoder's rows for them: greedy (argmax), or drawn from
  // softmax(row / draft_temperature), kept as the proposal.
  auto take_drafts = [&](const float* rows, int64_t k) {
    if (sampled) proposal.assign(size_t(k), {});
    for (int64_t i = 1; i <= k; ++i) {
      const float* row = rows + size_t(i - 1) * size_t(V);
      if (sampled) {
        proposal[size_t(i - 1)] = softmax(row, V, params.draft_temperature);
        canvas[size_t(i)] = draw(proposal[size_t(i - 1)], draft_rng.uniform());
      } else {
        canvas[size_t(i)] = int32_t(std::max_element(row, row + V) - row);
      }
    }
  };
  // A draft without a decoder pass for the next cycle (at most `remaining` tokens): the context's own
  // lookup draft, else the datastore's; canvas = [last token ; draft], each draft a point-mass proposal.
  // Returns where it came from (Source::Decoder: neither has one).
  auto take_lookup = [&](int64_t remaining) {
    std::vector<int32_t> draft;
    Source source = Source::Lookup;
    if (params.draft_lookup > 0 && remaining > 0)
      // n-grams down to two tokens: a single token's earlier successor is kept less often than the decoder's
      // draft (docs/experiments.md, 2026-12-07).
      draft = lookup_draft(tokens, params.draft_lookup, std::min<int64_t>(2, params.draft_lookup),
                           std::min(params.lookup_length, remaining));
    if (draft.empty() && params.datastore && remaining > 0) {
      draft = params.datastore->draft(tokens, std::min(params.datastore_length, remaining), params.datastore_draft);
      source = Source::Datastore;
    }
    if (draft.empty()) return Source::Decoder;
    canvas.assign(1, generated.back());
    canvas.insert(canvas.end(), draft.begin(), draft.end());
    if (sampled) proposal.assign(draft.size(), {});
    ++(source == Source::Lookup ? stats.lookup_cycles : stats.datastore_cycles);
    (source == Source::Lookup ? stats.lookup_drafted : stats.datastore_drafted) += int64_t(draft.size());
    return source;
  };
  // A StepEvent once a cycle's drafts are taken: the tokens committed since the last one, and the region
  // shown as the generated tokens followed by the k drafts about to be verified (final_end between them).
  int64_t reported = 0;
  std::vector<int32_t> shown;
  auto report = [&](int64_t k) {
    if (!callbacks.on_step || (reported == int64_t(generated.size()) && k == 0)) return;
    StepEvent event;
    event.step = stats.cycles;
    event.passes = result.passes;
    shown = generated;
    if (k > 0) shown.insert(shown.end(), canvas.begin() + 1, canvas.begin() + 1 + k);  // (none: canvas may be empty)
    event.canvas = &shown;
    event.final_end = int64_t(generated.size());
    for (int64_t i = reported; i < int64_t(generated.size()); ++i) event.committed.push_back(i);
    event.confidence.assign(event.committed.size(), 1.f);
    reported = int64_t(generated.size());
    callbacks.on_step(event);
  };

  const double t0 = now_ms();
  double t_first = t0;
  std::vector<float> logits, draft_logits, self_cond;
  const std::vector<int32_t> prompt_rows(prompt.begin() + reused, prompt.end());
  int64_t cached = P;  // positions whose K/V are final; the last generated token is not among them yet
  // The decoder's draft of k tokens: [last token ; k noise tokens], the last token held fixed, refined by
  // draft_steps passes of its own.
  auto decoder_draft = [&](int64_t k) {
    canvas.assign(size_t(k + 1), 0);
    canvas[0] = generated.back();
    for (int64_t i = 1; i <= k; ++i) canvas[size_t(i)] = int32_t(draft_rng.below(uint64_t(V)));
    for (int64_t s = 0; s < params.draft_steps; ++s) {
      draft_pass(model, cache, canvas, cached, s == 0 ? nullptr : &self_cond, draft_logits, pool, callbacks);
      ++result.passes;
      result.rows_computed += k + 1;
      if (s + 1 == params.draft_steps) {
        take_drafts(&draft_logits[size_t(V)], k);
        break;
      }
      for (int64_t i = 1; i <= k; ++i) {
        const float* row = &draft_logits[size_t(i) * size_t(V)];
        canvas[size_t(i)] = int32_t(std::max_element(row, row + V) - row);
      }
      self_cond.resize(draft_logits.size());
      for (size_t j = 0; j < draft_logits.size(); ++j) self_cond[j] = draft_logits[j] / params.draft_temperature;
    }
  };
  // A cycle's verdict on its k drafts from `rows` (AR's, after canvas[0..i]): kept, committed, counted.
  auto finish_cycle = [&](const float* rows, int64_t k, Source source) {
    ++result.encoder_passes;
    ++stats.cycles;
    const int64_t kept = check_drafts(rows, k);
    stats.accepted += kept;
    if (source == Source::Lookup) stats.lookup_accepted += kept;
    else if (source == Source::Datastore) stats.datastore_accepted += kept;
    else if (k == K) ++stats.cycles_keeping[size_t(kept)];  // the decoder's acceptance only
    cached += 1 + kept;  // the last token and the kept drafts; the token committed last is next cycle's first
    return kept;
  };
  // A tree cycle (VerifyParams::draft_tree): `tree` verified in one pass whose rows are [last token ; the
  // tree's tokens]; the kept path's K/V moved to the positions it stands for.
  DraftTree tree;
  std::vector<int32_t> tree_rows, tree_parents, tree_groups, path;
  std::vector<std::vector<int32_t>> children;
  auto verify_tree = [&]() {
    const int64_t n = tree.size() + 1;
    tree_rows.assign(1, generated.back());
    tree_rows.insert(tree_rows.end(), tree.tokens.begin(), tree.tokens.end());
    tree_parents.assign(1, -1);
    tree_groups.assign(1, int32_t(cached));
    children.assign(size_t(n), {});
    for (int64_t i = 1; i < n; ++i) {
      const int32_t parent = tree.parents[size_t(i - 1)] + 1;
      tree_parents.push_back(parent);
      tree_groups.push_back(tree_groups[size_t(parent)] + 1);
      children[size_t(parent)].push_back(int32_t(i));
    }
    // Shown: the best path (each node's first child).
    canvas.assign(1, generated.back());
    for (int32_t r = 0; !children[size_t(r)].empty();) canvas.push_back(tree_rows[size_t(r = children[size_t(r)][0])]);
    report(int64_t(canvas.size()) - 1);
    stats.drafted += n - 1;
    stats.tree_drafted += n - 1;
    ForwardRequest req;
    req.tokens = tree_rows.data();
    req.n = n;
    req.pos0 = cached;
    req.groups = tree_groups.data();
    req.tree_parents = tree_parents.data();
    for (int64_t i = 0; i < n; ++i) req.logit_rows.push_back(int32_t(i));
    logits.resize(size_t(n) * size_t(V));
    req.logits = logits.data();
    run_forward(callbacks, model, cache, req, pool);
    ++result.passes;
    ++result.encoder_passes;
    ++stats.cycles;
    ++stats.tree_cycles;
    result.rows_computed += n;
    // From the root down: AR's token after each node (greedy), or drawn with the node's children as
    // point-mass proposals tried in turn; the walk goes on while that token is a child's.
    path.clear();
    for (int32_t node = 0; !done;) {
      const float* row = &logits[size_t(node) * size_t(V)];
      int32_t t = -1;
      if (!sampled) {
        t = choose_token(row, V, params.sampling, rng, history(), P + int64_t(generated.size())).token;
      } else {
        std::vector<double> p = sampling_distribution(penalized_row(row, V, params.sampling, history()), V, params.sampling);
        double rest = 1;  // p's mass not yet removed
        for (int32_t child : children[size_t(node)]) {
          const int32_t d = tree_rows[size_t(child)];
          if (rng.uniform() * rest < p[size_t(d)]) {
            t = d;
            break;
          }
          rest -= p[size_t(d)];
          p[size_t(d)] = 0;
        }
        if (t < 0) t = draw(p, rng.uniform());
      }
      commit(t, row);
      const auto& next = children[size_t(node)];
      const auto it = std::find_if(next.begin(), next.end(), [&](int32_t c) { return tree_rows[size_t(c)] == t; });
      if (it == next.end()) break;
      path.push_back(node = *it);
    }
    const int64_t kept = int64_t(path.size());
    for (int64_t d = 1; d <= kept; ++d) cache.copy_position(cached + path[size_t(d - 1)], cached + d);
    stats.accepted += kept;
    stats.tree_accepted += kept;
    cached += 1 + kept;
  };
  // The tree of drafts after the context (lookup and datastore sources), verified; false (nothing run) when
  // it is empty.
  auto tree_cycle = [&]() {
    DraftTreeParams tp = params.tree;
    tp.budget = params.draft_tree;
    tp.depth = std::min(tp.depth, N - int64_t(generated.size()));
    tree = draft_tree(tokens, params.datastore, tp);
    if (tree.size() == 0) return false;
    verify_tree();
    return true;
  };
  // The decoder's tree over its k draft rows: best first by the product of its tokens' probabilities (each
  // position's softmax taken alone), each node's children the next position's kDecoderBranches likeliest
  // tokens: the decoder's own second guesses where it is unsure. Point-mass proposals, as the other trees.
  constexpr int64_t kDecoderBranches = 3;
  std::vector<std::vector<std::pair<double, int32_t>>> top;  // [position]: the likeliest tokens, best first
  auto decoder_tree = [&](const float* rows, int64_t k) {
    top.assign(size_t(k), {});
    for (int64_t i = 0; i < k; ++i) {
      const float* row = rows + size_t(i) * size_t(V);
      const std::vector<double> p = softmax(row, V, 1.0);
      for (int32_t t : top_k(row, V, kDecoderBranches)) top[size_t(i)].push_back({p[size_t(t)], t});
    }
    struct Open {
      double score;
      int32_t parent, depth, branch;
      bool operator<(const Open& o) const { return score < o.score; }
    };
    std::priority_queue<Open> open;
    for (int32_t b = 0; b < int32_t(top[0].size()); ++b) open.push({top[0][size_t(b)].first, -1, 0, b});
    tree.tokens.clear();
    tree.parents.clear();
    while (!open.empty() && tree.size() < params.draft_tree) {
      const Open o = open.top();
      open.pop();
      const int32_t node = int32_t(tree.size());
      tree.tokens.push_back(top[size_t(o.depth)][size_t(o.branch)].second);
      tree.parents.push_back(o.parent);
      if (o.depth + 1 < k)
        for (int32_t b = 0; b < int32_t(top[size_t(o.depth + 1)].size()); ++b)
          open.push({o.score * top[size_t(o.depth + 1)][size_t(b)].first, node, o.depth + 1, b});
    }
  };
  if (params.overlap) {
    // Each pass: the causal rows (the prompt, then [last token ; drafts]) and, for every number j of
    // drafts that may be kept, a decoder canvas after them: noise over AR's token at j + 1 and the k
    // positions after it. The pass leaves AR's rows and every candidate's drafts; the kept count picks one.
    struct Candidate {
      std::vector<int32_t> tokens;
      std::vector<float> logits;
    };
    std::vector<Candidate> candidates;
    std::vector<ForwardRequest> requests;
    std::vector<int32_t> groups;
    // One overlapped pass over `rows` at pos0.., with candidates after each of its last `options` rows.
    auto pass = [&](const std::vector<int32_t>& rows, int64_t pos0, int64_t options, int64_t logit_from) {
      const int64_t n = int64_t(rows.size());
      groups.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) groups[size_t(i)] = int32_t(pos0 + i);
      requests.assign(1, ForwardRequest{});
      ForwardRequest& enc = requests[0];
      enc.tokens = rows.data();
      enc.n = n;
      enc.pos0 = pos0;
      enc.groups = groups.data();
      for (int64_t i = logit_from; i < n; ++i) enc.logit_rows.push_back(int32_t(i));
      logits.resize(enc.logit_rows.size() * size_t(V));
      enc.logits = logits.data();
      candidates.resize(size_t(options));
      for (int64_t j = 0; j < options; ++j) {
        // j of this pass's drafts kept: j + 1 tokens committed, AR's last at position pos0 + n - options + j + 1,
        // and k drafts may follow it.
        const int64_t k = std::min<int64_t>(K, N - int64_t(generated.size()) - j - 1);
        Candidate& cand = candidates[size_t(j)];
        cand.tokens.clear();
        if (k <= 0) continue;
        for (int64_t i = 0; i <= k; ++i) cand.tokens.push_back(int32_t(draft_rng.below(uint64_t(V))));
        cand.logits.resize(size_t(k) * size_t(V));
        ForwardRequest dec;
        dec.tokens = cand.tokens.data();
        dec.n = k + 1;
        dec.pos0 = pos0 + n - options + j + 1;
        dec.decoder = true;
        for (int64_t i = 1; i <= k; ++i) dec.logit_rows.push_back(int32_t(i));
        dec.logits = cand.logits.data();
        requests.push_back(dec);
      }
      run_forward(callbacks, model, cache, std::span<const ForwardRequest>(requests), pool);
      ++result.passes;
      for (size_t r = 1; r < requests.size(); ++r) result.rows_computed += requests[r].n;
    };
    // The prompt's pass: AR's first token, and the drafts after it.
    pass(prompt_rows, reused, 1, int64_t(prompt_rows.size()) - 1);
    t_first = now_ms();
    commit(choose_token(logits.data(), V, params.sampling, rng, history(), P).token, logits.data());
    int64_t kept = 0;
    while (!done) {
      if (params.draft_tree > 0 && tree_cycle()) {
        candidates.clear();  // the tree's pass drafted nothing for the decoder
        if (!done && callbacks.should_stop && callbacks.should_stop()) break;
        continue;
      }
      const int64_t remaining = N - int64_t(generated.size());
      const Source source = take_lookup(remaining);
      const bool looked = source != Source::Decoder;
      int64_t k = looked ? int64_t(canvas.size()) - 1 : std::min(K, remaining);
      if (!looked && kept < int64_t(candidates.size())) {
        const Candidate& next = candidates[size_t(kept)];
        k = int64_t(next.tokens.size()) - 1;
        if (k <= 0) break;  // (only when N is reached, which ends the loop first)
        canvas.assign(size_t(k + 1), 0);
        canvas[0] = generated.back();
        take_drafts(next.logits.data(), k);
      } else if (!looked) {
        decoder_draft(k);  // after a lookup cycle, whose pass drafted nothing
      }
      report(k);
      stats.drafted += k;
      // A lookup (or datastore) cycle's pass verifies only (no candidates): in a loop the next cycle most
      // likely drafts by lookup too, and where it does not, a decoder pass of its own drafts it.
      pass(canvas, cached, looked ? 0 : k + 1, 0);
      result.rows_computed += k + 1;
      kept = finish_cycle(logits.data(), k, source);
      if (!done && callbacks.should_stop && callbacks.should_stop()) break;
    }
  } else {
    causal_pass(model, cache, prompt_rows, reused, logits, pool, callbacks);
    ++result.passes;
    t_first = now_ms();
    const float* first_row = &logits[size_t(P - 1 - reused) * size_t(V)];
    commit(choose_token(first_row, V, params.sampling, rng, history(), P).token, first_row);
    while (!done) {
      if (params.draft_tree > 0 && tree_cycle()) {
        if (!done && callbacks.should_stop && callbacks.should_stop()) break;
        continue;
      }
      const int64_t remaining = N - int64_t(generated.size());
      const Source source = take_lookup(remaining);
      const int64_t k = source != Source::Decoder ? int64_t(canvas.size()) - 1 : std::min(K, remaining);
      if (source == Source::Decoder) decoder_draft(k);
      if (source == Source::Decoder && params.draft_tree > 0) {  // the decoder's own tree
        decoder_tree(&draft_logits[size_t(V)], k);
        ++stats.decoder_tree_cycles;
        verify_tree();
        if (!done && callbacks.should_stop && callbacks.should_stop()) break;
        continue;
      }
      report(k);
      stats.drafted += k;
      // Verify: one causal pass over [last token ; draft]; row i is AR's distribution after canvas[0..i].
      causal_pass(model, cache, canvas, cached, logits, pool, callbacks);
      ++result.passes;
      result.rows_computed += k + 1;
      finish_cycle(logits.data(), k, source);
      if (!done && callbacks.should_stop && callbacks.should_stop()) break;
    }
  }
  report(0);
  result.prompt_ms = t_first - t0;
  result.decode_ms = now_ms() - t_first;
  result.tokens = generated;
  result.cached_prompt_tokens = reused;
  if (params.prefix_cache) params.prefix_cache->keep(std::vector<int32_t>(tokens.begin(), tokens.begin() + cached));
  return result;
}

}  // namespace canvas
