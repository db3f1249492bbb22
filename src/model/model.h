// A transformer bound to its weights, and its forward pass over new tokens against a KV cache.
#pragma once
#include <array>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/tensors.h"
#include "ops/lm_head.h"
#include "ops/table_product.h"

namespace canvas {

class GgufFile;
class SafetensorsModel;

struct LayerWeights {
  TensorView attn_norm, wq, wk, wv, wo;  // wv.data == nullptr when V comes from wk (value_from_key)
  TensorView bq, bk, bv;  // data == nullptr when absent
  TensorView ffn_norm;
  TensorView gate, up, down;                       // dense MLP
  TensorView router, gate_exps, up_exps, down_exps;  // MoE
  // Gemma 4 (LayerStyle::Gemma4): q/k norms over a head, the norms after attention and around the
  // two MLPs, the router's input scale and per-expert output scale, experts' fused [gate; up] matrices.
  TensorView q_norm, k_norm, post_attn_norm, post_ffn_norm, post_ffn_norm_1, pre_ffn_norm_2, post_ffn_norm_2;
  TensorView router_scale, per_expert_scale, gate_up_exps;
  float layer_scalar_encoder = 1, layer_scalar_decoder = 1;  // multiply the whole layer output
};

// The self-conditioning MLP: DiffusionGemma's decoder-only one (config.has_decoder), or that of canvas's
// own models (config.self_conditioning), stored as self_cond.norm.weight [hidden],
// self_cond.gate.weight and self_cond.up.weight [hidden, ffn], self_cond.down.weight [ffn, hidden].
struct SelfConditioningWeights {
  TensorView pre_norm, gate, up, down;
};

struct Model;
struct ForwardRequest;
class PrimitiveBackend;  // model/placement.h

// A checked batch of forward requests (plan_forward): the batch's only metadata, worked out once per pass
// and read by every executor (the CPU's, a backend's). Rows of all requests are stacked; "row" below is
// a row of the whole batch, "request" an index into the requests.
struct ForwardPlan {
  // [requests + 1]: request s holds rows [row0[s], row0[s + 1]).
  std::vector<int64_t> row0;
  // [n]: each row's position (RoPE, learned positions, the causal and window masks).
  std::vector<int32_t> pos;
  // [n] where each row's K/V are stored, when some request is a tree (ForwardRequest::tree_parents);
  // empty otherwise (a row's K/V are stored at its position).
  std::vector<int32_t> slots;
  // [requests]: the end of the cache keys the request's rows read. Encoder: key_end as given (default
  // pos0 + n); decoder: pos0 (the cached prefix; the canvas's own keys follow, canvas_keys).
  std::vector<int64_t> key_ends;
  // [n], when config.sliding_window > 0 (empty otherwise): the first key position a row sees on sliding
  // layers, sliding_window_start of its anchor: an encoder row's own position, a decoder row's canvas's
  // first position (pos0; the decoder's rows see their whole canvas). May be negative (no key is cut).
  std::vector<int32_t> window_start;
  // [AttentionKind][request]: the first cache position the request's rows read on layers of that kind.
  // Full layers: 0. Sliding layers: 0 for an encoder request (its rows are cut per row by window_start),
  // max(0, window_start) for a decoder request (the cache's last sliding_window - 1 positions before its
  // canvas). A request reads cache keys [first_key, key_ends), then its canvas_keys.
  std::array<std::vector<int64_t>, 2> first_key;
  // [requests]: the canvas keys a decoder request reads after the cache's: its kept canvas K/V's capacity
  // (ForwardRequest::canvas_kv), else its n rows; 0 for an encoder request.
  std::vector<int64_t> canvas_keys;
  // [AttentionKind][n], when some request is a tree (empty otherwise): each row's visible rows of its tree
  // (bit a: the row stored at slot pos0 + a; the row itself and its ancestors), on sliding layers without
  // the ancestors before its window_start; 0 for rows of requests that are not trees.
  std::array<std::vector<uint64_t>, 2> tree_bits;
  // The Head slot (Executor::head_rows): the logit rows of the requests with plain logits first (in request
  // order), then those of the fused-head requests (ForwardRequest::head_stats).
  std::vector<int64_t> head_order;  // the requests in that order (each once, with or without logit rows)
  std::vector<int64_t> head_row0;   // [requests]: the request's first row in the Head slot
  std::vector<int32_t> head_rows;   // [Head rows]: the batch row each Head row copies
  int64_t plain_head_rows = 0;      // Head's first rows: those of requests without the fused head
  // The requests that take a self-conditioning input (self_cond or self_cond_soft), in order; the Soft
  // slot stacks their rows (conditioned_rows in all).
  std::vector<int64_t> conditioned;
  int64_t conditioned_rows = 0;
  int64_t n = 0;  // rows of the whole batch
  int32_t slot(int64_t row) const { return slots.empty() ? pos[size_t(row)] : slots[size_t(row)]; }
  int64_t first_key_of(int64_t request, AttentionKind kind) const {
    return first_key[size_t(kind)][size_t(request)];
  }
  // Row `row`'s tree bits on layers of `kind` (a tree request's rows only).
  const uint64_t* tree_bits_of(int64_t row, AttentionKind kind) const {
    return tree_bits[size_t(kind)].data() + row;
  }
};

// The first key position a row whose sliding window is anchored at `anchor` sees on sliding layers: an
// encoder row's position, or a decoder canvas's first position, minus sliding_window - 1.
inline int32_t sliding_window_start(const ModelConfig& c, int64_t anchor) {
  return int32_t(anchor - c.sliding_window + 1);
}

struct Model {
  ModelConfig config;
  // Where forward passes run: null for the CPU's executor alone; otherwise a backend of primitives
  // (model/placement.h; e.g. the CUDA backend, --device cuda): the passes run on its executor and the
  // CPU's, each primitive where it is supported, the same definition (model/transformer.h) either way.
  std::shared_ptr<PrimitiveBackend> primitives;
  std::shared_ptr<GgufFile> file;                  // the GGUF the weights map (null for safetensors)
  std::shared_ptr<SafetensorsModel> safetensors;   // the safetensors checkpoint (null for GGUF)
  // f32 copies of small tensors whose stored type the kernels do not take (e.g. bf16 norms), made once
  // at load; shared so that copies of a Model keep them alive.
  std::shared_ptr<std::deque<std::vector<float>>> converted;
  TensorView token_embd, output_norm, output;
  TensorView position_embd;  // optional learned absolute positions [hidden, n_positions] (GPT-2 style)
  std::vector<LayerWeights> layers;
  SelfConditioningWeights self_conditioning;
  // The token embedding transposed to f32 [hidden rows x vocab columns], so that the self-conditioning
  // soft embedding softmax(logits) @ E is one f32 matmul per pass (prepare_embedding_columns; absent for
  // models without self-conditioning or whose table would exceed kMaxEmbeddingColumnsBytes: those
  // multiply with E's rows as stored, ops/table_product.h, and rebuild nothing per pass). Valid only
  // while token_embd.data == embedding_columns_of: a model whose embedding is swapped does not use it.
  std::shared_ptr<const std::vector<float>> embedding_columns;
  // A quantised table too large for that: E^T in int8 (ops/table_product.h), so that the soft embedding
  // runs on the integer kernels; 34 / 32 bytes per table element (784 MiB at 262,144 x 2,816).
  std::shared_ptr<const Int8TableColumns> embedding_int8_columns;
  const void* embedding_columns_of = nullptr;  // the token_embd.data both were made from

  // A directory (or its config.json) is a Hugging Face safetensors checkpoint (Gemma 4 /
  // DiffusionGemma, or LLaDA / LLaDA-MoE / Dream / Qwen2 / Llama in their published layouts,
  // docs/formats.md); anything else is read as GGUF. Checks every tensor's presence, dtype and shape
  // against the config.
  static Model load(const std::string& path);
  static Model load_gguf(const std::string& path);
  // As load_gguf, but every view points at the file's bytes as stored (no rearranging for the matmul
  // kernels): for exporters that copy tensors out.
  static Model load_gguf_as_stored(const std::string& path);
  static Model load_safetensors(const std::string& path);  // a directory or its config.json
  int64_t parameter_count() const;
  int64_t weight_bytes() const;
};

// One forward pass: n new tokens at positions pos0 .. pos0+n-1. Their K/V are written into the cache
// at those positions (with their visibility groups); attention then reads keys [0, key_end), which may
// include positions beyond the new tokens (already filled, e.g. a stale suffix). Key j is visible to a
// new token iff cache.group[j] <= that token's group.
//
// Decoder mode (config.has_decoder, DiffusionGemma): the n tokens are a canvas at positions pos0 ..
// pos0+n-1 right after the cached prefix [0, pos0). It attends bidirectionally to the visible cache (full
// layers: all of it; sliding layers: its last sliding_window - 1 positions) and to the whole canvas,
// and never writes the cache (groups and key_end are not used). Its input goes through the
// self-conditioning MLP, fed the previous step's logits (self_cond, or zeros when null).
struct ForwardRequest {
  const int32_t* tokens = nullptr;
  int64_t n = 0;
  int64_t pos0 = 0;
  const int32_t* groups = nullptr;  // [n]
  int64_t key_end = 0;              // 0: pos0 + n
  // Encoder mode only: explicit, strictly increasing positions of the n tokens (null: pos0 .. pos0+n-1).
  // Lets a pass recompute a scattered subset of a canvas while the other positions' K/V stay in the
  // cache as an earlier pass left them (key_end must then be given).
  const int32_t* positions = nullptr;
  // Encoder mode only, a tree of tokens (draft-and-verify's tree of drafts): [n] each row's parent row
  // (< the row) or -1. Row i is at position pos0 + its depth (0 for a row without a parent) and its K/V
  // (and group) are stored at slot pos0 + i; it sees the cache's keys before pos0 by the group rule and,
  // of the n new rows, itself and its ancestors. So every row computes exactly what a causal pass over
  // its path alone computes. At most 64 rows; no explicit positions; key_end pos0 + n. The CPU's executor
  // only (a backend of primitives refuses it).
  const int32_t* tree_parents = nullptr;
  // Rows (indices into the n new tokens) whose logits are wanted, in this order; empty: none.
  std::vector<int32_t> logit_rows;
  float* logits = nullptr;          // [logit_rows.size()][vocab]
  // Fused head (ops/lm_head.h): when non-null, the logit rows are reduced by lm_head_stream into
  // [logit_rows.size()] statistics instead of being written to `logits` (which may then be null), so no
  // [rows x vocab] array exists. `head` gives the temperature, the noise seed and the row ids of the
  // Gumbel sample (row_ids: [logit_rows.size()], chosen by the caller); its softcap is ignored, the
  // model's own logit soft-cap applies.
  HeadRowStats* head_stats = nullptr;
  HeadStreamOptions head;
  // With head_stats, optionally [logit_rows.size()][hidden]: softmax(logit / T) @ E (E = the tied
  // embedding, unscaled), the input self_cond_soft takes. Needs a tied head.
  float* soft_embedding_out = nullptr;
  bool decoder = false;
  // [n][vocab] previous step's logits; null: zeros. Decoder passes, and any pass of a model with
  // config.self_conditioning (there without the decoder's input norm; zeros leave the input unchanged).
  const float* self_cond = nullptr;
  // [n][hidden] instead of self_cond: softmax(prev) @ E already computed (e.g. soft_embedding_out of the
  // previous step), which is what self_cond's logits are reduced to first. Same use, same rules; at
  // most one of the two.
  const float* self_cond_soft = nullptr;
  // Decoder passes only (compute-aware decoding, approximate): the K/V of the whole canvas kept across
  // passes in a KvCache of its own (capacity = canvas length, positions = canvas rows). The n tokens are
  // the canvas rows canvas_rows[0..n) (strictly increasing; null: rows 0..n-1, then n must be the whole
  // canvas), at positions pos0 + row. Their K/V are written into canvas_kv; attention reads the visible
  // cache and every canvas row's K/V as the last pass computing that row left them. A pass over every
  // row gives exactly what the same pass without canvas_kv gives.
  KvCache* canvas_kv = nullptr;
  const int32_t* canvas_rows = nullptr;
};

void forward(const Model& model, KvCache& cache, const ForwardRequest& request, ThreadPool* pool);

// Several independent passes in one: request i runs against caches[i] (its own sequence), and every
// row-wise step (embeddings, norms, the Q/K/V, output and MLP/MoE matmuls, the head) runs once over the
// rows of all requests stacked, so the weights stream through memory once per batch instead of once per
// request. Only attention is per request. Each request's logits, cache writes and statistics are bit for
// bit what forward() gives for it alone on the CPU (matmul and attention rows do not depend on the other
// rows; another device's products may round differently with the number of rows they multiply).
// Encoder and decoder requests may share a batch; requests attend in order, layer by layer, so a decoder
// request over the same cache as an earlier encoder request of the batch sees the K/V that request writes
// (one pass that extends the cache and drafts after it, as draft-and-verify's overlapped cycle does).
// forward() is this with one request.
void forward_batch(const Model& model, std::span<KvCache* const> caches, std::span<const ForwardRequest> requests,
                   ThreadPool* pool);

// The attention geometry of a layer: heads, KV heads, head dim and the q.k scale (the config's, or
// 1/sqrt(head_dim)).
AttentionShape attention_shape(const ModelConfig& c, const LayerAttention& la);

// Checks a batch of requests against the model and their caches (throws Error naming what is wrong)
// and lays out its rows: what every backend's forward starts from.
ForwardPlan plan_forward(const Model& model, std::span<KvCache* const> caches, std::span<const ForwardRequest> requests);

// The bound tensor a description of model_tensors(model.config) names (model/tensors.h): the weight's
// view, or a one-value f32 view of a layer scalar (the encoder's equals the decoder's when the file has
// none); an empty view (data null) for a tensor the model lacks.
TensorView model_weight(const Model& model, const TensorSpec& spec);
// Where the tensor of `role` (of `layer`, -1 for global roles) lives in a Model, for binders: the loaders
// and the synthetic bench models. Null for the layer scalars, which are floats (LayerWeights).
TensorView* weight_slot(Model& m, TensorRole role, int64_t layer);
// The same, for readers.
const TensorView* weight_slot(const Model& m, TensorRole role, int64_t layer);

// Builds model.embedding_columns when the model reads self-conditioning logits (a decoder or canvas's own
// self-conditioning) and the f32 table fits kMaxEmbeddingColumnsBytes, else model.embedding_int8_columns
// when the table is quantised (an f32 / f16 / bf16 table keeps the exact product with its rows as stored);
// the load functions and the synthetic builder call it once the weights are final.
constexpr int64_t kMaxEmbeddingColumnsBytes = int64_t(256) << 20;
void prepare_embedding_columns(Model& model, ThreadPool* pool);

// Rearranges the model's Q4_0 / Q8_0 matrices into the layout the AVX-512 kernels read fastest
// (ops/matmul.h, interleave_for_matmul: the results stay bit for bit the same): in place, or for a
// matrix whose rows are not a multiple of 16 into a padded copy the model owns (`converted`); views
// that share bytes (a tied head) follow. `writable` gives a view's bytes as writable memory. Model::load_gguf does this;
// builders of in-memory models call it themselves.
void interleave_weights(Model& model, const std::function<uint8_t*(const TensorView&)>& writable, ThreadPool* pool);

}  // namespace canvas
