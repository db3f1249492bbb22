// Uniform-state diffusion decoding bound to a Model: DiffusionGemma (encoder + decoder with
// self-conditioning) and canvas's own uniform-state models. The prompt and each committed canvas go
// through the causal encoder into the KV cache; canvases are denoised by the entropy-bound sampler with
// bidirectional decoder passes over [cache ; canvas].
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "decode/entropy_bound.h"
#include "decode/prefix_cache.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace canvas {

// A model and its KV cache as the sampler sees them (DiffusionModelHooks). Two kinds of model:
//  - config.has_decoder (DiffusionGemma): decode is a decoder-mode forward (ForwardRequest::decoder),
//    bidirectional over [cache ; canvas], fed the previous step's logits through the self-conditioning
//    MLP (zeros when there are none); it never writes the cache.
//  - other uniform-state models (canvas's own): decode is an ordinary forward with the whole canvas in
//    one visibility group; its K/V land in the cache rows just past the committed tokens, where no
//    committed row can see them and the next encode overwrites them. Those trained with
//    self-conditioning (config.self_conditioning) get the previous step's logits through their
//    self-conditioning MLP; the others ignore them.
// encode appends tokens to the cache with the causal encoder (one visibility group per position).
class UniformStateSession {
 public:
  // capacity: the most positions the cache holds ([prompt ; committed canvases ; one canvas]).
  UniformStateSession(const Model& model, int64_t capacity, ThreadPool* pool);
  // The same over a cache kept elsewhere (a PrefixCache) whose first `tokens` already hold their K/V.
  UniformStateSession(const Model& model, KvCache& cache, std::vector<int32_t> tokens, ThreadPool* pool);

  void encode(const std::vector<int32_t>& tokens);
  // Writes [canvas.size() x vocab] logits into `logits` (resized). self_cond: [canvas.size() x vocab]
  // previous step's temperature-scaled logits, or nullptr.
  void decode(const std::vector<int32_t>& canvas, const std::vector<float>* self_cond, std::vector<float>& logits);
  // The same pass with the fused streaming head (DiffusionModelHooks::decode_stream): per-position
  // HeadRowStats at head.temperature with head's noise seed and row ids (stats resized to canvas.size())
  // and, for models with a self-conditioning input, the soft embedding softmax(logits / T) @ E
  // ([canvas.size() x hidden], resized; left empty otherwise). self_cond_soft: the previous step's soft
  // embedding, or nullptr. Needs a head tied to the embedding when the soft embedding is wanted.
  void decode_stream(const std::vector<int32_t>& canvas, const std::vector<float>* self_cond_soft,
                     const HeadStreamOptions& head, std::vector<HeadRowStats>& stats,
                     std::vector<float>& soft_embedding);
  // Compute-aware decoding (DiffusionModelHooks::decode_rows): the rows `rows` of the canvas only
  // (logits resized to [rows x vocab]; self_cond: those rows' previous logits, or nullptr), the other
  // rows' K/V as their last pass left them: a decoder model keeps the canvas's K/V in a store of its
  // own (ForwardRequest::canvas_kv), other models in the cache rows past the committed tokens. An empty
  // `rows` is a pass over the whole canvas (as decode) that restarts those K/V.
  void decode_rows(const std::vector<int32_t>& canvas, const std::vector<int32_t>& rows,
                   const std::vector<float>* self_cond, std::vector<float>& logits);
  int64_t cached() const { return cached_; }  // committed positions in the cache
  const std::vector<int32_t>& cached_tokens() const { return cached_tokens_; }  // their tokens
  int64_t capacity() const { return cache_.capacity(); }
  // Hooks calling this session's decode, decode_stream and encode; the session must outlive them.
  DiffusionModelHooks hooks();
  // Runs the session's passes through this instead of forward() (DecodeCallbacks::forward; empty: forward()).
  void set_forward(ForwardFn run) {
    forward_ = std::move(run);
  }

 private:
  ForwardRequest canvas_request(const std::vector<int32_t>& canvas);
  void run(const ForwardRequest& req);  // through forward_ when set, else forward()
  // Sizes logits to the request's rows, hands over self_cond (checked) and runs the pass.
  void run_for_logits(ForwardRequest& req, const std::vector<float>* self_cond, std::vector<float>& logits);
  bool self_conditioned() const;  // the model reads the previous step's distribution

  const Model& model_;
  std::unique_ptr<KvCache> own_cache_;
  KvCache& cache_;
  ThreadPool* pool_;
  int64_t cached_ = 0;
  std::vector<int32_t> cached_tokens_;
  std::vector<int32_t> groups_;
  std::unique_ptr<KvCache> canvas_kv_;  // decode_rows on a decoder model: the canvas's K/V
  std::vector<int32_t> row_tokens_, row_positions_;
  ForwardFn forward_;
};

// A pass over a canvas after the first `cached` positions, every row's logits wanted: a decoder-mode pass
// (DiffusionGemma: bidirectional over the cache and the canvas, never writing the cache), or for a model
// without a decoder one visibility group holding the whole canvas (its K/V land in the rows past `cached`).
// `groups` holds the group ids the request points to. The caller sets logits, self_cond, and so on.
ForwardRequest canvas_forward_request(const ModelConfig& config, const std::vector<int32_t>& canvas, int64_t cached,
                                      std::vector<int32_t>& groups);

// Cache positions generate_uniform_state needs: the prompt and every canvas it may decode.
int64_t uniform_state_capacity(int64_t prompt_tokens, const EntropyBoundParams& params);

// Encodes the prompt, then generates with generate_entropy_bound() through a UniformStateSession.
// Throws Error when the prompt is empty or prompt + canvases exceed the model's context length.
// prompt_ms covers the prompt's encoder pass; decode_ms the rest. With a prefix_cache, the prompt's leading
// tokens found there are not encoded again, and the run leaves its encoded tokens' K/V there.
EntropyBoundResult generate_uniform_state(const Model& model, const std::vector<int32_t>& prompt,
                                          const EntropyBoundParams& params, ThreadPool* pool,
                                          const DecodeCallbacks& callbacks = {}, PrefixCache* prefix_cache = nullptr);

}  // namespace canvas
