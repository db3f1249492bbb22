// Reverse-mode autograd for training: a tape of f32 matrices and the transformer's ops, each op's
// backward written next to its forward (tape.cpp), forwards sharing the inference kernels.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "model/config.h"
#include "ops/ops.h"

namespace canvas::train {

// A persistent trainable tensor. It lives outside any tape (a tape only points at it) and its shape is
// in ggml order, as in GGUF: shape[0] is the contiguous dimension, the rest count rows; a 3-D shape
// [k, n, E] is a stack of E matrices of n rows (the experts of an MoE layer).
struct Parameter {
  std::string name;            // the GGUF tensor name, e.g. "blk.0.attn_q.weight"
  std::vector<int64_t> shape;  // ggml order, 1 to 3 dims
  std::vector<float> value;
  std::vector<float> grad;  // empty until a backward pass accumulates into it (then same size)
  bool trainable = true;    // false: backward passes leave grad alone

  Parameter() = default;
  Parameter(std::string name, std::vector<int64_t> shape);

  int64_t cols() const { return shape.empty() ? 0 : shape[0]; }
  int64_t rows() const;  // product of shape[1..]
  int64_t size() const { return int64_t(value.size()); }
  int64_t matrices() const { return shape.size() > 2 ? shape[2] : 1; }
  int64_t matrix_rows() const { return shape.size() > 1 ? shape[1] : 1; }
  // The gradient buffer, allocated zeroed on first use.
  float* grad_data();
  void zero_grad();
  // An F32 view of the value under this parameter's name and shape (for matmul and GgufWriter).
  TensorView view() const;
  // Matrix i of a stack (shape[2] index) as a 2-D view.
  TensorView matrix_view(int64_t i) const;
};

// The float storage of tape nodes: a vector whose resize leaves new elements uninitialised (its
// allocator default-initialises), so a buffer an op overwrites is never zeroed first.
template <class T>
struct UninitializedAllocator : std::allocator<T> {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <class U>
  UninitializedAllocator(const UninitializedAllocator<U>&) {}
  template <class U, class... A>
  void construct(U* p, A&&... args) {
    if constexpr (sizeof...(A) == 0) {
      ::new (static_cast<void*>(p)) U;
    } else {
      ::new (static_cast<void*>(p)) U(std::forward<A>(args)...);
    }
  }
  friend bool operator==(const UninitializedAllocator&, const UninitializedAllocator&) { return true; }
};
using FloatBuffer = std::vector<float, UninitializedAllocator<float>>;

// A node of a tape: an index, meaningful only with the tape that made it.
struct Var {
  int32_t id = -1;
  bool valid() const { return id >= 0; }
};

// The record of one forward pass: every intermediate value (row-major [rows, cols] f32 matrices) and,
// in order, the closures that push gradients from an op's output back to its inputs and parameters.
class Tape {
 public:
  explicit Tape(ThreadPool* pool = nullptr) : pool_(pool) {}
  ~Tape() { clear(); }
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  ThreadPool* pool() const { return pool_; }

  // With gradients disabled (evaluation), no node requires a gradient and ops record no backward.
  void set_grad_enabled(bool enabled) { grad_enabled_ = enabled; }
  bool grad_enabled() const { return grad_enabled_; }

  // A leaf: data (or zeros when null) copied in. requires_grad: backward computes its gradient.
  Var input(int64_t rows, int64_t cols, const float* data = nullptr, bool requires_grad = false);
  // A new node for an op's output, zeroed unless `overwritten` (requires_grad is ignored while gradients
  // are disabled).
  Var make(int64_t rows, int64_t cols, bool requires_grad, bool overwritten = false);

  int64_t rows(Var v) const { return node(v).rows; }
  int64_t cols(Var v) const { return node(v).cols; }
  int64_t size(Var v) const { return node(v).rows * node(v).cols; }
  float* value(Var v) { return node(v).value.data(); }
  const float* value(Var v) const { return node(v).value.data(); }
  bool requires_grad(Var v) const { return node(v).requires_grad; }
  // True once some gradient has reached v in the current backward pass.
  bool has_grad(Var v) const { return !node(v).grad.empty(); }
  // v's gradient buffer, allocated zeroed on first use.
  float* grad(Var v);
  // v's gradient buffer, not zeroed, for a caller that writes every element of it before anything reads
  // it; only while no gradient has reached v (has_grad false).
  float* grad_for_overwrite(Var v);
  // v's gradient, or null when none reached it.
  const float* grad_or_null(Var v) const { return has_grad(v) ? node(v).grad.data() : nullptr; }

  // Registers an op's backward; backward() runs them last-recorded first.
  void record(std::function<void()> backward) { backward_.push_back(std::move(backward)); }
  // Seeds d loss / d loss = 1 (loss must be 1 x 1) and runs every recorded backward in reverse, once
  // per tape. Parameter gradients accumulate (+=) into Parameter::grad; zero them between steps.
  void backward(Var loss);
  // Forgets every node and closure (keeps the pool). Large buffers go back to a process-wide cache
  // that the next tape's nodes are taken from: a training step then reuses the previous step's memory
  // instead of page-faulting fresh allocations in (which cost more than the arithmetic).
  void clear();
  int64_t n_nodes() const { return int64_t(nodes_.size()); }

 private:
  struct Node {
    int64_t rows = 0, cols = 0;
    FloatBuffer value, grad;
    bool requires_grad = false;
  };
  Node& node(Var v);
  const Node& node(Var v) const;

  ThreadPool* pool_;
  bool grad_enabled_ = true;
  std::vector<Node> nodes_;
  std::vector<std::function<void()>> backward_;
};

// ---- ops ---------------------------------------------------------------------------------------
// Every op reads its inputs' values, writes a new node and, when that node needs a gradient, records
// its backward. Results never depend on the pool's thread count (no reductions split across threads).

// Rows of `table` (a [cols, rows] parameter) for each id, times scale. Backward: scatter-add.
Var embedding(Tape& tape, Parameter& table, const std::vector<int32_t>& ids, float scale = 1.f);

// The mixture of table rows that `weights` [m, vocab] gives (e.g. probabilities): y [m, cols] =
// weights T * scale, T the [cols, vocab] table read as vocab rows. Self-conditioning's
// softmax(logits) @ E. Backward: dWeights += dY T^T * scale, dT += weights^T dY * scale.
Var soft_embedding(Tape& tape, Var weights, Parameter& table, float scale = 1.f);

// y = x W^T with W matrix `matrix` of w (shape [k, n] or [k, n, E]): x [m, k] -> y [m, n].
// Forward and backward are ops/gemm.h products. Backward: dX += dY W, dW += dY^T X.
Var linear(Tape& tape, Var x, Parameter& w, int64_t matrix = 0);

// a + b (same shape).
Var add(Tape& tape, Var a, Var b);
// x + bias on every row (bias has x's column count).
Var add_bias(Tape& tape, Var x, Parameter& bias);

// Row-wise RMSNorm: y = x / sqrt(mean(x^2) + eps) * w; weight null: no weight.
Var rms_norm(Tape& tape, Var x, Parameter* weight, float eps);

// RoPE in place semantics of canvas::rope: x rows are n_heads heads of p.head_dim; row r at
// positions[r]. Backward rotates the gradient by the opposite angle.
Var rope(Tape& tape, Var x, int n_heads, const std::vector<int32_t>& positions, const RopeParams& p);

// A batch of independent sequences laid out one after another: sequence s is rows
// [s * length, (s + 1) * length). Within a sequence key j is visible to query i iff
// groups[j] <= groups[i] (the visibility groups of canvas::AttentionMask); groups empty: all visible.
// Sliding-window layers add a second rule: key j is visible to query i only if
// positions[j] >= window_start[i] (both empty: no window), as canvas::AttentionMask's window_start.
struct SequenceLayout {
  SequenceLayout() = default;
  SequenceLayout(int64_t sequences, int64_t length_, std::vector<int32_t> groups_ = {})
      : n_sequences(sequences), length(length_), groups(std::move(groups_)) {}
  int64_t n_sequences = 0;
  int64_t length = 0;
  std::vector<int32_t> groups;  // [n_sequences * length] or empty
  std::vector<int32_t> positions;     // [n_sequences * length] or empty (only read with window_start)
  std::vector<int32_t> window_start;  // [n_sequences * length] or empty
  int64_t rows() const { return n_sequences * length; }
};

// Multi-head attention with GQA: q [rows, n_heads * head_dim], k and v [rows, n_kv_heads * head_dim]
// -> [rows, n_heads * head_dim]. Query head h reads kv head h / (n_heads / n_kv_heads). shape.scale and
// shape.softcap as in canvas::attention. Keeps only the output; backward recomputes the probabilities
// (memory stays O(rows * width), not O(length^2)).
Var attention(Tape& tape, Var q, Var k, Var v, const AttentionShape& shape, const SequenceLayout& layout);

// Gated MLP activation: act(gate) * up, act = silu (SwiGLU) or gelu_tanh (GeGLU).
Var gated_activation(Tape& tape, Var gate, Var up, Activation activation);

// MoE routing: probabilities softmax(router_logits) per row, the top-k experts per row, and their
// weights (renormalised to sum 1 when asked). weights is [rows, n_experts], zero off the selection;
// gradients flow from the weights back to the router logits.
struct Routing {
  Var weights;
  std::vector<std::vector<int32_t>> rows_of;  // [expert] -> rows routed to it, ascending
};
Routing route_top_k(Tape& tape, Var router_logits, int64_t k, bool renormalise);

// Rows of x in the given order (duplicates allowed). Backward: scatter-add.
Var gather_rows(Tape& tape, Var x, const std::vector<int32_t>& rows);

// out[r] = sum over experts e (ascending) routed to r of weights[r, e] * expert_out[e][i], where
// rows_of[e][i] == r. expert_out[e] is invalid (id -1) for an expert that got no rows.
Var combine_experts(Tape& tape, const std::vector<Var>& expert_out, const Routing& routing);

// The same values read as [rows, cols] (rows * cols must equal x's size): e.g. [n, heads * head_dim]
// as [n * heads, head_dim], so a row-wise op (rms_norm) works per head.
Var reshape(Tape& tape, Var x, int64_t rows, int64_t cols);

// x * c for a constant c.
Var scale(Tape& tape, Var x, float c);

// Columns [begin, end) of x (e.g. the gate half of a fused [gate; up] product).
Var slice_columns(Tape& tape, Var x, int64_t begin, int64_t end);

// y[r, j] = x[r, j] * s[j] with s a parameter of x's column count (e.g. the per-expert output scale).
Var scale_columns(Tape& tape, Var x, Parameter& s);

// y[r] = x[r] * (use_second[r] ? second : first), first and second one-value parameters (a layer
// scalar per view: encoder rows and decoder rows); use_second empty: every row uses first.
Var scale_rows_by_scalar(Tape& tape, Var x, Parameter& first, Parameter* second,
                         const std::vector<uint8_t>& use_second);

// x with rows[i] replaced by row i of z (rows distinct). Backward: dz = dy's rows, dx = dy elsewhere.
Var replace_rows(Tape& tape, Var x, const std::vector<int32_t>& rows, Var z);

// Logit soft-cap: cap * tanh(x / cap).
Var softcap(Tape& tape, Var x, float cap);

// Weighted cross-entropy, fused with log-softmax: loss = sum_i weights[i] * CE(logits[i], targets[i])
// / normaliser, a 1 x 1 node. Rows with weight 0 are skipped (their target is not read).
Var cross_entropy(Tape& tape, Var logits, const std::vector<int32_t>& targets,
                  const std::vector<float>& weights, float normaliser);

}  // namespace canvas::train
