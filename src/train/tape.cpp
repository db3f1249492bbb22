// The tape and its ops: each forward, then its backward right below it.
#include "train/tape.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>

#include "core/error.h"
#include "ops/gemm.h"
#include "ops/matmul.h"

namespace canvas::train {

// ---- Parameter ---------------------------------------------------------------------------------

Parameter::Parameter(std::string name_, std::vector<int64_t> shape_)
    : name(std::move(name_)), shape(std::move(shape_)) {
  check(!shape.empty() && shape.size() <= 3, "parameter '" + name + "': expected 1 to 3 dimensions");
  int64_t n = 1;
  for (int64_t d : shape) {
    check(d > 0, "parameter '" + name + "': dimensions must be positive");
    n *= d;
  }
  value.assign(size_t(n), 0.f);
}

int64_t Parameter::rows() const {
  int64_t r = 1;
  for (size_t i = 1; i < shape.size(); ++i) r *= shape[i];
  return r;
}

float* Parameter::grad_data() {
  if (grad.size() != value.size()) grad.assign(value.size(), 0.f);
  return grad.data();
}

void Parameter::zero_grad() {
  std::fill(grad.begin(), grad.end(), 0.f);
}

TensorView Parameter::view() const {
  TensorView v;
  v.name = name;
  v.type = DType::F32;
  v.n_dims = int(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) v.ne[i] = shape[i];
  v.data = value.data();
  return v;
}

TensorView Parameter::matrix_view(int64_t i) const {
  check(shape.size() >= 2, "parameter '" + name + "' is not a matrix");
  check(i >= 0 && i < matrices(), "parameter '" + name + "': matrix " + std::to_string(i) + " out of range");
  return view().matrix(i);
}

// ---- buffer cache --------------------------------------------------------------------------------
namespace {

// Large float buffers are recycled: fresh multi-megabyte allocations come from mmap and pay a page
// fault per 4 KiB on first touch, which made a step of the Sudoku model 2.5x slower than the math.
class BufferCache {
 public:
  static BufferCache& instance() {
    static BufferCache* cache = new BufferCache;  // never destroyed: tapes may outlive static destructors
    return *cache;
  }
  // A buffer of n floats, zeroed unless the caller overwrites every element anyway.
  FloatBuffer take(size_t n, bool zeroed) {
    FloatBuffer v;
    if (n >= kMinCached) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.lower_bound(n);
      if (it != free_.end() && it->first <= 2 * n) {  // never hand a huge buffer to a small request
        v = std::move(it->second);
        bytes_ -= it->first * sizeof(float);
        free_.erase(it);
      }
    }
    v.resize(n);  // within capacity for a cached buffer: no reallocation; new elements uninitialised
    if (zeroed) std::fill(v.begin(), v.end(), 0.f);
    return v;
  }
  void give(FloatBuffer&& v) {
    const size_t capacity = v.capacity();
    if (capacity < kMinCached) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (bytes_ + capacity * sizeof(float) > kMaxBytes) return;  // v is freed
    bytes_ += capacity * sizeof(float);
    free_.emplace(capacity, std::move(v));
  }

 private:
  static constexpr size_t kMinCached = 16384;           // floats (64 KiB); smaller ones malloc serves well
  static constexpr size_t kMaxBytes = size_t(8) << 30;  // cache at most 8 GiB of idle buffers
  std::mutex mutex_;
  std::multimap<size_t, FloatBuffer> free_;  // by capacity
  size_t bytes_ = 0;
};

FloatBuffer take_buffer(size_t n, bool zeroed = true) {
  return BufferCache::instance().take(n, zeroed);
}
void give_buffer(FloatBuffer&& v) {
  BufferCache::instance().give(std::move(v));
}

// A temporary for an op (zeroed unless `overwritten` says every element will be written), returned to
// the cache when it goes out of scope.
struct Scratch {
  explicit Scratch(int64_t n, bool overwritten = false) : v(take_buffer(size_t(n), !overwritten)) {}
  ~Scratch() { give_buffer(std::move(v)); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* data() { return v.data(); }
  FloatBuffer v;
};

}  // namespace

// ---- Tape --------------------------------------------------------------------------------------

Tape::Node& Tape::node(Var v) {
  check(v.id >= 0 && v.id < int32_t(nodes_.size()), "tape: invalid variable " + std::to_string(v.id));
  return nodes_[size_t(v.id)];
}
const Tape::Node& Tape::node(Var v) const {
  check(v.id >= 0 && v.id < int32_t(nodes_.size()), "tape: invalid variable " + std::to_string(v.id));
  return nodes_[size_t(v.id)];
}

Var Tape::make(int64_t rows, int64_t cols, bool requires_grad, bool overwritten) {
  check(rows >= 0 && cols >= 0, "tape: negative shape");
  Node n;
  n.rows = rows;
  n.cols = cols;
  n.value = take_buffer(size_t(rows * cols), !overwritten);
  n.requires_grad = requires_grad && grad_enabled_;
  nodes_.push_back(std::move(n));
  return Var{int32_t(nodes_.size() - 1)};
}

Var Tape::input(int64_t rows, int64_t cols, const float* data, bool requires_grad) {
  Var v = make(rows, cols, requires_grad);
  if (data) std::memcpy(value(v), data, size_t(rows * cols) * sizeof(float));
  return v;
}

float* Tape::grad(Var v) {
  Node& n = node(v);
  if (n.grad.empty()) n.grad = take_buffer(n.value.size());
  return n.grad.data();
}

float* Tape::grad_for_overwrite(Var v) {
  Node& n = node(v);
  check(n.grad.empty(), "tape: grad_for_overwrite on a gradient that already holds values");
  n.grad = take_buffer(n.value.size(), /*zeroed=*/false);
  return n.grad.data();
}

void Tape::backward(Var loss) {
  check(grad_enabled_, "tape: backward on a tape recorded with gradients disabled");
  check(size(loss) == 1, "tape: backward needs a 1 x 1 loss, got " + std::to_string(rows(loss)) + " x " +
                             std::to_string(cols(loss)));
  grad(loss)[0] = 1.f;
  for (auto it = backward_.rbegin(); it != backward_.rend(); ++it) (*it)();
}

void Tape::clear() {
  backward_.clear();
  for (Node& n : nodes_) {
    give_buffer(std::move(n.value));
    give_buffer(std::move(n.grad));
  }
  nodes_.clear();
}

// ---- helpers -----------------------------------------------------------------------------------
namespace {

std::string dims(const Tape& t, Var v) {
  return "[" + std::to_string(t.rows(v)) + ", " + std::to_string(t.cols(v)) + "]";
}

void add_into(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

// Adds src into v's gradient; the first gradient to reach v is copied in instead of added to zeros.
void accumulate_grad(Tape& tape, Var v, const float* src, int64_t n) {
  if (tape.has_grad(v)) {
    add_into(tape.grad(v), src, n);
  } else {
    std::memcpy(tape.grad_for_overwrite(v), src, size_t(n) * sizeof(float));
  }
}

// dst [cols, rows] = src^T, src rows of `cols` floats at stride ld. Large ones are split over the pool
// by source rows (each chunk writes its own columns of dst).
void transpose(const float* src, int64_t rows, int64_t cols, int64_t ld, float* dst,
               ThreadPool* pool = nullptr) {
  // A strip of kStrip source columns at a time, all rows of the range down it: the reads walk the
  // source once, and the writes are kStrip sequential streams (dst rows), so neither side jumps across
  // pages per element (row-major blocks wrote one element per dst row, rows * 4 bytes apart).
  constexpr int64_t kStrip = 16;
  parallel_for(rows * cols >= (int64_t(1) << 16) ? pool : nullptr, rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t c0 = 0; c0 < cols; c0 += kStrip) {
      const int64_t c1 = std::min(cols, c0 + kStrip);
      for (int64_t r = begin; r < end; ++r) {
        const float* s = src + r * ld;
        for (int64_t c = c0; c < c1; ++c) dst[c * rows + r] = s[c];
      }
    }
  });
}

// A dense f32 matrix as matmul weights: `rows` outputs, each a dot over `cols` inputs.
TensorView f32_matrix(const float* data, int64_t rows, int64_t cols) {
  TensorView v;
  v.type = DType::F32;
  v.ne = {cols, rows, 1, 1};
  v.n_dims = 2;
  v.data = data;
  return v;
}

// y [m, n] = x [m, k] b^T where b is [n, k]: the one product shape canvas::matmul offers.
void product_abt(const float* x, int64_t m, int64_t k, const float* b, int64_t n, float* y,
                 ThreadPool* pool) {
  matmul(f32_matrix(b, n, k), x, k, m, y, n, pool);
}

constexpr int64_t kRowGrain = 16;

}  // namespace

// ---- embedding ---------------------------------------------------------------------------------

Var embedding(Tape& tape, Parameter& table, const std::vector<int32_t>& ids, float scale) {
  const int64_t n = int64_t(ids.size()), width = table.cols(), vocab = table.rows();
  for (int32_t id : ids)
    check(id >= 0 && id < vocab, "embedding '" + table.name + "': id " + std::to_string(id) +
                                     " is outside the table's " + std::to_string(vocab) + " rows");
  Var y = tape.make(n, width, table.trainable, /*overwritten=*/true);
  float* out = tape.value(y);
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(out + i * width, table.value.data() + ids[size_t(i)] * width, size_t(width) * sizeof(float));
    if (scale != 1.f)
      for (int64_t j = 0; j < width; ++j) out[i * width + j] *= scale;
  }
  if (!tape.requires_grad(y)) return y;
  Parameter* tp = &table;
  tape.record([&tape, y, tp, ids, scale, n, width] {
    if (!tape.has_grad(y)) return;
    // Scatter-add in token order: repeated ids accumulate deterministically.
    const float* dy = tape.grad_or_null(y);
    float* dt = tp->grad_data();
    for (int64_t i = 0; i < n; ++i) {
      float* row = dt + ids[size_t(i)] * width;
      for (int64_t j = 0; j < width; ++j) row[j] += scale * dy[i * width + j];
    }
  });
  return y;
}

Var soft_embedding(Tape& tape, Var weights, Parameter& table, float scale) {
  const int64_t m = tape.rows(weights), vocab = table.rows(), width = table.cols();
  check(table.shape.size() == 2 && tape.cols(weights) == vocab,
        "soft_embedding '" + table.name + "': weights " + dims(tape, weights) + " do not match the table's " +
            std::to_string(vocab) + " rows");
  ThreadPool* pool = tape.pool();
  Var y = tape.make(m, width, tape.requires_grad(weights) || table.trainable, /*overwritten=*/true);
  {
    Scratch tt(width * vocab, /*overwritten=*/true);  // T^T [width, vocab]: y = weights (T^T)^T
    transpose(table.value.data(), vocab, width, width, tt.data(), pool);
    product_abt(tape.value(weights), m, vocab, tt.data(), width, tape.value(y), pool);
  }
  if (scale != 1.f)
    for (int64_t i = 0; i < m * width; ++i) tape.value(y)[i] *= scale;
  if (!tape.requires_grad(y)) return y;
  Parameter* tp = &table;
  tape.record([&tape, weights, y, tp, scale, m, vocab, width] {
    if (!tape.has_grad(y)) return;
    ThreadPool* pool = tape.pool();
    Scratch dy(m * width, /*overwritten=*/true);
    const float* g = tape.grad_or_null(y);
    for (int64_t i = 0; i < m * width; ++i) dy.data()[i] = g[i] * scale;
    if (tape.requires_grad(weights)) {
      // dWeights [m, vocab] = dY [m, width] T^T, T [vocab, width] as stored.
      Scratch dw(m * vocab, /*overwritten=*/true);
      product_abt(dy.data(), m, width, tp->value.data(), vocab, dw.data(), pool);
      add_into(tape.grad(weights), dw.data(), m * vocab);
    }
    if (tp->trainable) {
      // dT [vocab, width] = weights^T [vocab, m] dY [m, width] = weights^T (dY^T)^T.
      Scratch wt(vocab * m, true), dyt(width * m, true), dt(vocab * width, true);
      transpose(tape.value(weights), m, vocab, vocab, wt.data(), pool);
      transpose(dy.data(), m, width, width, dyt.data(), pool);
      product_abt(wt.data(), vocab, m, dyt.data(), width, dt.data(), pool);
      add_into(tp->grad_data(), dt.data(), vocab * width);
    }
  });
  return y;
}

// ---- linear ------------------------------------------------------------------------------------

Var linear(Tape& tape, Var x, Parameter& w, int64_t matrix) {
  const TensorView wv = w.matrix_view(matrix);
  const int64_t m = tape.rows(x), k = wv.cols(), n = wv.rows();
  check(tape.cols(x) == k,
        "linear '" + w.name + "': input " + dims(tape, x) + " does not match weight " + wv.shape_string());
  Var y = tape.make(m, n, tape.requires_grad(x) || w.trainable, /*overwritten=*/true);
  {
    // y = x W^T through ops/gemm.h with W^T [k, n] as its row-major B (a transpose of n k floats for
    // 2 m n k FLOPs): the same packed kernel as the backward products.
    Scratch wt(n * k, /*overwritten=*/true);
    transpose(w.value.data() + matrix * n * k, n, k, k, wt.data(), tape.pool());
    gemm(m, n, k, tape.value(x), k, 1, wt.data(), n, tape.value(y), n, false, tape.pool());
  }
  if (!tape.requires_grad(y)) return y;
  Parameter* wp = &w;
  tape.record([&tape, x, y, wp, matrix, m, k, n] {
    if (!tape.has_grad(y)) return;
    ThreadPool* pool = tape.pool();
    const float* dy = tape.grad_or_null(y);
    const float* weights = wp->value.data() + matrix * n * k;
    // Both products read their operands in place (ops/gemm.h) and add into the gradients.
    if (tape.requires_grad(x)) {
      // dX [m, k] (+)= dY [m, n] W [n, k]; written, not added, when dX has no gradient yet.
      const bool add = tape.has_grad(x);
      gemm(m, k, n, dy, n, 1, weights, k, add ? tape.grad(x) : tape.grad_for_overwrite(x), k, add, pool);
    }
    if (wp->trainable) {
      // dW [n, k] += dY^T [n, m] X [m, k]: dY read transposed (row stride 1, column stride n).
      gemm(n, k, m, dy, 1, n, tape.value(x), k, wp->grad_data() + matrix * n * k, k, true, pool);
    }
  });
  return y;
}

// ---- add, bias ---------------------------------------------------------------------------------

Var add(Tape& tape, Var a, Var b) {
  check(tape.rows(a) == tape.rows(b) && tape.cols(a) == tape.cols(b),
        "add: shapes " + dims(tape, a) + " and " + dims(tape, b) + " differ");
  const int64_t n = tape.size(a);
  Var y = tape.make(tape.rows(a), tape.cols(a), tape.requires_grad(a) || tape.requires_grad(b), /*overwritten=*/true);
  const float *av = tape.value(a), *bv = tape.value(b);
  float* out = tape.value(y);
  for (int64_t i = 0; i < n; ++i) out[i] = av[i] + bv[i];
  if (!tape.requires_grad(y)) return y;
  tape.record([&tape, a, b, y, n] {
    if (!tape.has_grad(y)) return;
    const float* dy = tape.grad_or_null(y);
    if (tape.requires_grad(a)) accumulate_grad(tape, a, dy, n);
    if (tape.requires_grad(b)) accumulate_grad(tape, b, dy, n);
  });
  return y;
}

Var add_bias(Tape& tape, Var x, Parameter& bias) {
  const int64_t rows = tape.rows(x), width = tape.cols(x);
  check(bias.size() == width, "add_bias '" + bias.name + "': " + std::to_string(bias.size()) +
                                  " values for rows of " + std::to_string(width));
  Var y = tape.make(rows, width, tape.requires_grad(x) || bias.trainable, /*overwritten=*/true);
  const float* xv = tape.value(x);
  const float* b = bias.value.data();
  float* out = tape.value(y);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < width; ++i) out[r * width + i] = xv[r * width + i] + b[i];
  if (!tape.requires_grad(y)) return y;
  Parameter* bp = &bias;
  tape.record([&tape, x, y, bp, rows, width] {
    if (!tape.has_grad(y)) return;
    const float* dy = tape.grad_or_null(y);
    if (tape.requires_grad(x)) accumulate_grad(tape, x, dy, rows * width);
    if (bp->trainable) {
      float* db = bp->grad_data();
      for (int64_t r = 0; r < rows; ++r) add_into(db, dy + r * width, width);
    }
  });
  return y;
}

// ---- RMSNorm -----------------------------------------------------------------------------------

Var rms_norm(Tape& tape, Var x, Parameter* weight, float eps) {
  const int64_t rows = tape.rows(x), width = tape.cols(x);
  if (weight)
    check(weight->size() == width, "rms_norm '" + weight->name + "': " + std::to_string(weight->size()) +
                                       " weights for rows of " + std::to_string(width));
  const bool train_weight = weight && weight->trainable;
  Var y = tape.make(rows, width, tape.requires_grad(x) || train_weight, /*overwritten=*/true);
  const float* xv = tape.value(x);
  float* out = tape.value(y);
  const float* w = weight ? weight->value.data() : nullptr;
  parallel_for(tape.pool(), rows, kRowGrain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) canvas::rms_norm(xv + r * width, w, width, eps, out + r * width);
  });
  if (!tape.requires_grad(y)) return y;
  tape.record([&tape, x, y, weight, eps, rows, width] {
    if (!tape.has_grad(y)) return;
    // y = x r w with r = (mean(x^2) + eps)^(-1/2):
    //   dx_i = r g_i - x_i r^3 mean_j(g_j x_j), g = dy * w;   dw_i += sum over rows dy_i x_i r.
    const float* dy = tape.grad_or_null(y);
    const float* xv = tape.value(x);
    const float* w = weight ? weight->value.data() : nullptr;
    std::vector<double> inv_rms(static_cast<size_t>(rows));
    float* dx = tape.requires_grad(x) ? tape.grad(x) : nullptr;
    parallel_for(tape.pool(), rows, kRowGrain, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* xr = xv + r * width;
        const float* gr = dy + r * width;
        double sum_sq = 0, dot = 0;
        for (int64_t i = 0; i < width; ++i) {
          sum_sq += double(xr[i]) * xr[i];
          dot += double(gr[i]) * (w ? w[i] : 1.f) * xr[i];
        }
        const double s = 1.0 / std::sqrt(sum_sq / double(width) + eps);
        inv_rms[size_t(r)] = s;
        if (!dx) continue;
        const double c = s * s * s * dot / double(width);
        for (int64_t i = 0; i < width; ++i)
          dx[r * width + i] += float(s * gr[i] * (w ? w[i] : 1.f) - c * xr[i]);
      }
    });
    if (weight && weight->trainable) {
      float* dw = weight->grad_data();
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < width; ++i)
          dw[i] += float(dy[r * width + i] * xv[r * width + i] * inv_rms[size_t(r)]);
    }
  });
  return y;
}

// ---- RoPE --------------------------------------------------------------------------------------

Var rope(Tape& tape, Var x, int n_heads, const std::vector<int32_t>& positions, const RopeParams& p) {
  const int64_t rows = tape.rows(x);
  check(n_heads > 0 && tape.cols(x) == int64_t(n_heads) * p.head_dim,
        "rope: input " + dims(tape, x) + " is not " + std::to_string(n_heads) + " heads of " +
            std::to_string(p.head_dim));
  check(int64_t(positions.size()) == rows,
        "rope: " + std::to_string(positions.size()) + " positions for " + std::to_string(rows) + " rows");
  Var y = tape.make(rows, tape.cols(x), tape.requires_grad(x), /*overwritten=*/true);
  std::memcpy(tape.value(y), tape.value(x), size_t(tape.size(x)) * sizeof(float));
  canvas::rope(tape.value(y), rows, n_heads, positions.data(), p);
  if (!tape.requires_grad(y)) return y;
  // The rotation at angle a is orthogonal; its transpose is the rotation at -a, i.e. at position -pos.
  std::vector<int32_t> negated(positions.size());
  for (size_t r = 0; r < positions.size(); ++r) {
    check(positions[r] != std::numeric_limits<int32_t>::min(), "rope: position out of range");
    negated[r] = -positions[r];
  }
  tape.record([&tape, x, y, n_heads, negated, p, rows] {
    if (!tape.has_grad(y)) return;
    Scratch g(tape.size(y));
    std::copy(tape.grad_or_null(y), tape.grad_or_null(y) + tape.size(y), g.data());
    canvas::rope(g.data(), rows, n_heads, negated.data(), p);
    add_into(tape.grad(x), g.data(), tape.size(x));
  });
  return y;
}

// ---- attention ---------------------------------------------------------------------------------
namespace {

// Raw q.k products [T, T] of one head -> probabilities in place: scale (and soft-cap), hidden keys to
// -inf, then the vectorised row softmax. Key j is hidden from query i when its group is later
// (groups[j] > groups[i]) or, with a sliding window, when its position is before the query's window start
// (key_pos[j] < window_start[i]). Key i is always visible to query i, so no row is empty.
void attention_probabilities(float* s, int64_t T, const int32_t* groups, const int32_t* key_pos,
                             const int32_t* window_start, const AttentionShape& shape) {
  for (int64_t i = 0; i < T; ++i) {
    float* p = s + i * T;
    if (shape.softcap > 0) {
      for (int64_t j = 0; j < T; ++j) p[j] = shape.softcap * std::tanh(p[j] * shape.scale / shape.softcap);
    } else {
      for (int64_t j = 0; j < T; ++j) p[j] *= shape.scale;
    }
    if (groups)
      for (int64_t j = 0; j < T; ++j)
        if (groups[j] > groups[i]) p[j] = -std::numeric_limits<float>::infinity();
    if (window_start)
      for (int64_t j = 0; j < T; ++j)
        if (key_pos[j] < window_start[i]) p[j] = -std::numeric_limits<float>::infinity();
    canvas::softmax(p, T, p);
  }
}

// One kv head of one sequence transposed: dst [head_dim, T] from rows of ld floats.
void transpose_head(const float* src, int64_t ld, int64_t T, int64_t head_dim, float* dst) {
  for (int64_t i = 0; i < T; ++i)
    for (int64_t d = 0; d < head_dim; ++d) dst[d * T + i] = src[i * ld + d];
}

struct AttentionScratch {
  std::vector<float> kt, vt, probs, dprobs, raw;
  void size_for(int64_t length, int64_t head_dim) {
    for (auto* b : {&kt, &vt}) b->resize(size_t(length * head_dim));
    for (auto* b : {&probs, &dprobs, &raw}) b->resize(size_t(length * length));
  }
};

}  // namespace

// Every product is an ops/gemm.h call on the interleaved [rows, heads * head_dim] layout in place (row
// strides q_width / kv_width, operands read transposed through strides where needed): no per-head
// copies. One work item per (sequence, kv head); items write disjoint outputs, so results do not depend
// on the thread count.
Var attention(Tape& tape, Var q, Var k, Var v, const AttentionShape& shape, const SequenceLayout& layout) {
  const int64_t n_heads = shape.n_heads, n_kv = shape.n_kv_heads, hd = shape.head_dim;
  const int64_t T = layout.length, S = layout.n_sequences, rows = layout.rows();
  check(n_heads > 0 && n_kv > 0 && n_heads % n_kv == 0 && hd > 0,
        "attention: bad head counts " + std::to_string(n_heads) + "/" + std::to_string(n_kv) +
            " or head_dim " + std::to_string(hd));
  check(T > 0 && S > 0, "attention: empty sequence layout");
  check(tape.rows(q) == rows && tape.rows(k) == rows && tape.rows(v) == rows,
        "attention: " + std::to_string(S) + " sequences of " + std::to_string(T) + " need " +
            std::to_string(rows) + " rows; q, k, v are " + dims(tape, q) + ", " + dims(tape, k) + ", " +
            dims(tape, v));
  check(tape.cols(q) == n_heads * hd && tape.cols(k) == n_kv * hd && tape.cols(v) == n_kv * hd,
        "attention: q, k, v widths " + dims(tape, q) + ", " + dims(tape, k) + ", " + dims(tape, v) +
            " do not match the head shape");
  check(
      layout.groups.empty() || int64_t(layout.groups.size()) == rows,
      "attention: " + std::to_string(layout.groups.size()) + " groups for " + std::to_string(rows) + " rows");
  check(layout.window_start.empty() ||
            (int64_t(layout.window_start.size()) == rows && int64_t(layout.positions.size()) == rows),
        "attention: a sliding window needs positions and window starts for all " + std::to_string(rows) + " rows");
  const int64_t group = n_heads / n_kv, q_width = n_heads * hd, kv_width = n_kv * hd;
  const bool needs_grad = tape.requires_grad(q) || tape.requires_grad(k) || tape.requires_grad(v);
  Var out = tape.make(rows, q_width, needs_grad, /*overwritten=*/true);
  auto groups = std::make_shared<std::vector<int32_t>>(layout.groups);
  // Sliding window: key positions and each query's first visible position (both empty: none).
  auto window = std::make_shared<std::pair<std::vector<int32_t>, std::vector<int32_t>>>(
      layout.window_start.empty() ? std::vector<int32_t>{} : layout.positions, layout.window_start);

  // Forward: S = Q K^T (K transposed once per kv head), P = softmax(S), O = P V written in place.
  {
    const float *qv = tape.value(q), *kv = tape.value(k), *vv = tape.value(v);
    float* ov = tape.value(out);
    parallel_for(tape.pool(), S * n_kv, 1, [&](int64_t begin, int64_t end) {
      thread_local AttentionScratch w;
      w.size_for(T, hd);
      for (int64_t item = begin; item < end; ++item) {
        const int64_t s = item / n_kv, kvh = item % n_kv, row0 = s * T;
        const int32_t* g = groups->empty() ? nullptr : groups->data() + row0;
        const int32_t* key_pos = window->second.empty() ? nullptr : window->first.data() + row0;
        const int32_t* start = window->second.empty() ? nullptr : window->second.data() + row0;
        transpose_head(kv + row0 * kv_width + kvh * hd, kv_width, T, hd, w.kt.data());
        for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
          gemm(T, T, hd, qv + row0 * q_width + h * hd, q_width, 1, w.kt.data(), T, w.probs.data(), T, false, nullptr);
          attention_probabilities(w.probs.data(), T, g, key_pos, start, shape);
          gemm(T, hd, T, w.probs.data(), T, 1, vv + row0 * kv_width + kvh * hd, kv_width,
               ov + row0 * q_width + h * hd, q_width, false, nullptr);
        }
      }
    });
  }
  if (!tape.requires_grad(out)) return out;

  tape.record([&tape, q, k, v, out, shape, groups, window, S, T, n_kv, hd, group, q_width, kv_width] {
    if (!tape.has_grad(out)) return;
    // With P = softmax(score), dScore = P * (dP - rowsum(dO * O)), dP = dO V^T; through the soft-cap
    // d raw = dScore (1 - tanh^2), and raw = scale q.k. Then dQ = G K, dK = G^T Q, dV = P^T dO.
    // P is recomputed (only O is kept), so memory stays O(rows * width), not O(length^2).
    const float *qv = tape.value(q), *kv = tape.value(k), *vv = tape.value(v), *ov = tape.value(out);
    const float* dov = tape.grad_or_null(out);
    float* dqv = tape.requires_grad(q) ? tape.grad(q) : nullptr;
    float* dkv = tape.requires_grad(k) ? tape.grad(k) : nullptr;
    float* dvv = tape.requires_grad(v) ? tape.grad(v) : nullptr;
    parallel_for(tape.pool(), S * n_kv, 1, [&](int64_t begin, int64_t end) {
      thread_local AttentionScratch w;
      w.size_for(T, hd);
      for (int64_t item = begin; item < end; ++item) {
        const int64_t s = item / n_kv, kvh = item % n_kv, row0 = s * T;
        const int32_t* g = groups->empty() ? nullptr : groups->data() + row0;
        const int32_t* key_pos = window->second.empty() ? nullptr : window->first.data() + row0;
        const int32_t* start = window->second.empty() ? nullptr : window->second.data() + row0;
        const float* k_head = kv + row0 * kv_width + kvh * hd;
        const float* v_head = vv + row0 * kv_width + kvh * hd;
        transpose_head(k_head, kv_width, T, hd, w.kt.data());
        transpose_head(v_head, kv_width, T, hd, w.vt.data());
        for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
          const float* q_head = qv + row0 * q_width + h * hd;
          const float* o_head = ov + row0 * q_width + h * hd;
          const float* do_head = dov + row0 * q_width + h * hd;
          gemm(T, T, hd, q_head, q_width, 1, w.kt.data(), T, w.probs.data(), T, false, nullptr);
          // Keep the raw dots for the soft-cap derivative before turning them into probabilities.
          if (shape.softcap > 0) std::copy(w.probs.begin(), w.probs.end(), w.raw.begin());
          attention_probabilities(w.probs.data(), T, g, key_pos, start, shape);
          gemm(T, T, hd, do_head, q_width, 1, w.vt.data(), T, w.dprobs.data(), T, false, nullptr);  // dP = dO V^T
          float* gr = w.dprobs.data();  // becomes G = d(q.k), in place
          const float* p = w.probs.data();
          for (int64_t i = 0; i < T; ++i) {
            float row_dot = 0;
            for (int64_t d = 0; d < hd; ++d) row_dot += do_head[i * q_width + d] * o_head[i * q_width + d];
            float* gi = gr + i * T;
            const float* pi = p + i * T;
            if (shape.softcap > 0) {
              for (int64_t j = 0; j < T; ++j) {
                const float t = std::tanh(w.raw[size_t(i * T + j)] * shape.scale / shape.softcap);
                gi[j] = pi[j] * (gi[j] - row_dot) * (1.f - t * t) * shape.scale;
              }
            } else {
              for (int64_t j = 0; j < T; ++j) gi[j] = pi[j] * (gi[j] - row_dot) * shape.scale;
            }
          }
          if (dqv)  // dQ += G K
            gemm(T, hd, T, gr, T, 1, k_head, kv_width, dqv + row0 * q_width + h * hd, q_width, true, nullptr);
          if (dkv)  // dK += G^T Q (G read transposed)
            gemm(T, hd, T, gr, 1, T, q_head, q_width, dkv + row0 * kv_width + kvh * hd, kv_width, true, nullptr);
          if (dvv)  // dV += P^T dO
            gemm(T, hd, T, p, 1, T, do_head, q_width, dvv + row0 * kv_width + kvh * hd, kv_width, true, nullptr);
        }
      }
    });
  });
  return out;
}

// ---- gated activations -------------------------------------------------------------------------

Var gated_activation(Tape& tape, Var gate, Var up, Activation activation) {
  check(tape.rows(gate) == tape.rows(up) && tape.cols(gate) == tape.cols(up),
        "gated_activation: gate " + dims(tape, gate) + " and up " + dims(tape, up) + " differ");
  const int64_t n = tape.size(gate);
  Var y = tape.make(tape.rows(gate), tape.cols(gate), tape.requires_grad(gate) || tape.requires_grad(up),
                    /*overwritten=*/true);
  {
    const float *gv = tape.value(gate), *uv = tape.value(up);
    float* yv = tape.value(y);
    parallel_for(tape.pool(), n, 1 << 14, [&](int64_t i0, int64_t i1) {  // elementwise: same bits at any split
      if (activation == Activation::Silu) {
        canvas::swiglu(gv + i0, uv + i0, i1 - i0, yv + i0);
      } else {
        canvas::geglu(gv + i0, uv + i0, i1 - i0, yv + i0);
      }
    });
  }
  if (!tape.requires_grad(y)) return y;
  tape.record([&tape, gate, up, y, n, activation] {
    if (!tape.has_grad(y)) return;
    const float *dy = tape.grad_or_null(y), *gv = tape.value(gate), *uv = tape.value(up);
    // A gradient nothing has reached yet is written instead of added to zeros (not when gate and up are
    // one node: both products then add into the one buffer).
    const bool distinct = gate.id != up.id;
    const bool dg_fresh = distinct && tape.requires_grad(gate) && !tape.has_grad(gate);
    const bool du_fresh = distinct && tape.requires_grad(up) && !tape.has_grad(up);
    float* dg = !tape.requires_grad(gate) ? nullptr : dg_fresh ? tape.grad_for_overwrite(gate) : tape.grad(gate);
    float* du = !tape.requires_grad(up) ? nullptr : du_fresh ? tape.grad_for_overwrite(up) : tape.grad(up);
    parallel_for(tape.pool(), n, 4096, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        // Both activations are x * sigmoid(z(x)): silu z = x; gelu_tanh z = 2 sqrt(2/pi) (x + 0.044715 x^3).
        const float x = gv[i];
        float z = x, dz = 1;
        if (activation == Activation::GeluTanh) {
          z = 2 * 0.7978845608f * (x + 0.044715f * x * x * x);
          dz = 2 * 0.7978845608f * (1 + 3 * 0.044715f * x * x);
        }
        const float sig = 1.f / (1.f + std::exp(-z));
        // Saturated (sig 0 or 1): the derivative is sig itself; this also keeps 0 * inf out when x^3
        // overflows a float.
        const float act = x * sig, dact = (sig == 0.f || sig == 1.f) ? sig : sig + x * sig * (1 - sig) * dz;
        if (dg) dg[i] = (dg_fresh ? 0.f : dg[i]) + dy[i] * uv[i] * dact;
        if (du) du[i] = (du_fresh ? 0.f : du[i]) + dy[i] * act;
      }
    });
  });
  return y;
}

// ---- MoE routing, gather, combine --------------------------------------------------------------

Routing route_top_k(Tape& tape, Var router_logits, int64_t k, bool renormalise) {
  const int64_t rows = tape.rows(router_logits), n_experts = tape.cols(router_logits);
  check(k > 0 && k <= n_experts,
        "route_top_k: k = " + std::to_string(k) + " for " + std::to_string(n_experts) + " experts");
  Routing routing;
  routing.weights = tape.make(rows, n_experts, tape.requires_grad(router_logits));
  routing.rows_of.resize(size_t(n_experts));
  auto probs = std::make_shared<std::vector<float>>(size_t(rows * n_experts));
  auto selected = std::make_shared<std::vector<int32_t>>(size_t(rows * k));
  const float* logits = tape.value(router_logits);
  float* weights = tape.value(routing.weights);
  // The same kernels and arithmetic as the inference MoE (model.cpp), so the same experts win.
  for (int64_t r = 0; r < rows; ++r) {
    float* p = probs->data() + r * n_experts;
    canvas::softmax(logits + r * n_experts, n_experts, p);
    const std::vector<int32_t> top = top_k(p, n_experts, k);
    float total = 0;
    for (int32_t e : top) total += p[e];
    for (int64_t i = 0; i < k; ++i) {
      const int32_t e = top[size_t(i)];
      (*selected)[size_t(r * k + i)] = e;
      weights[r * n_experts + e] = renormalise ? p[e] / total : p[e];
      routing.rows_of[size_t(e)].push_back(int32_t(r));
    }
  }
  if (!tape.requires_grad(routing.weights)) return routing;
  const Var w = routing.weights;
  tape.record([&tape, router_logits, w, probs, selected, rows, n_experts, k, renormalise] {
    if (!tape.has_grad(w)) return;
    // Without renormalisation w_e = p_e on the selection S: dl_j = p_j ([j in S] dw_j - sum_S dw_e p_e).
    // With it, w is the softmax over S alone: dl_j = [j in S] w_j (dw_j - sum_S dw_e w_e), 0 off S.
    const float *dw = tape.grad_or_null(w), *wv = tape.value(w);
    float* dl = tape.grad(router_logits);
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t* sel = selected->data() + r * k;
      const float* p = probs->data() + r * n_experts;
      const float* dwr = dw + r * n_experts;
      float* dlr = dl + r * n_experts;
      if (renormalise) {
        double inner = 0;
        for (int64_t i = 0; i < k; ++i) inner += double(dwr[sel[i]]) * wv[r * n_experts + sel[i]];
        for (int64_t i = 0; i < k; ++i)
          dlr[sel[i]] += float(wv[r * n_experts + sel[i]] * (dwr[sel[i]] - inner));
      } else {
        double inner = 0;
        for (int64_t i = 0; i < k; ++i) inner += double(dwr[sel[i]]) * p[sel[i]];
        for (int64_t j = 0; j < n_experts; ++j) dlr[j] -= float(p[j] * inner);
        for (int64_t i = 0; i < k; ++i) dlr[sel[i]] += p[sel[i]] * dwr[sel[i]];
      }
    }
  });
  return routing;
}

Var gather_rows(Tape& tape, Var x, const std::vector<int32_t>& rows) {
  const int64_t n = int64_t(rows.size()), width = tape.cols(x), x_rows = tape.rows(x);
  for (int32_t r : rows)
    check(r >= 0 && r < x_rows, "gather_rows: row " + std::to_string(r) + " outside " + dims(tape, x));
  Var y = tape.make(n, width, tape.requires_grad(x), /*overwritten=*/true);
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(tape.value(y) + i * width, tape.value(x) + rows[size_t(i)] * width,
                size_t(width) * sizeof(float));
  if (!tape.requires_grad(y)) return y;
  tape.record([&tape, x, y, rows, n, width] {
    if (!tape.has_grad(y)) return;
    const float* dy = tape.grad_or_null(y);
    float* dx = tape.grad(x);
    for (int64_t i = 0; i < n; ++i) add_into(dx + rows[size_t(i)] * width, dy + i * width, width);
  });
  return y;
}

Var combine_experts(Tape& tape, const std::vector<Var>& expert_out, const Routing& routing) {
  const int64_t rows = tape.rows(routing.weights), n_experts = tape.cols(routing.weights);
  check(int64_t(expert_out.size()) == n_experts && int64_t(routing.rows_of.size()) == n_experts,
        "combine_experts: " + std::to_string(expert_out.size()) + " expert outputs for " +
            std::to_string(n_experts) + " experts");
  int64_t width = -1;
  bool needs_grad = tape.requires_grad(routing.weights);
  for (int64_t e = 0; e < n_experts; ++e) {
    const auto& rows_e = routing.rows_of[size_t(e)];
    if (rows_e.empty()) continue;
    const Var o = expert_out[size_t(e)];
    check(tape.rows(o) == int64_t(rows_e.size()), "combine_experts: expert " + std::to_string(e) +
                                                      " output " + dims(tape, o) + " for " +
                                                      std::to_string(rows_e.size()) + " rows");
    check(width < 0 || tape.cols(o) == width, "combine_experts: expert outputs differ in width");
    width = tape.cols(o);
    needs_grad = needs_grad || tape.requires_grad(o);
  }
  check(width > 0, "combine_experts: no expert received a row");
  Var y = tape.make(rows, width, needs_grad);
  float* out = tape.value(y);
  const float* wv = tape.value(routing.weights);
  // Ascending experts, as the inference MoE sums them, so each row's sum is the same float sum.
  for (int64_t e = 0; e < n_experts; ++e) {
    const auto& rows_e = routing.rows_of[size_t(e)];
    if (rows_e.empty()) continue;
    const float* o = tape.value(expert_out[size_t(e)]);
    for (size_t i = 0; i < rows_e.size(); ++i) {
      const int64_t r = rows_e[i];
      const float weight = wv[r * n_experts + e];
      for (int64_t j = 0; j < width; ++j) out[r * width + j] += weight * o[int64_t(i) * width + j];
    }
  }
  if (!tape.requires_grad(y)) return y;
  const Var weights = routing.weights;
  const auto rows_of = routing.rows_of;
  tape.record([&tape, expert_out, rows_of, weights, y, n_experts, width] {
    if (!tape.has_grad(y)) return;
    const float *dy = tape.grad_or_null(y), *wv = tape.value(weights);
    float* dw = tape.requires_grad(weights) ? tape.grad(weights) : nullptr;
    for (int64_t e = 0; e < n_experts; ++e) {
      const auto& rows_e = rows_of[size_t(e)];
      if (rows_e.empty()) continue;
      const Var o = expert_out[size_t(e)];
      const float* ov = tape.value(o);
      float* dov = tape.requires_grad(o) ? tape.grad(o) : nullptr;
      for (size_t i = 0; i < rows_e.size(); ++i) {
        const int64_t r = rows_e[i];
        const float* dyr = dy + r * width;
        const float* oi = ov + int64_t(i) * width;
        if (dov) {
          const float weight = wv[r * n_experts + e];
          for (int64_t j = 0; j < width; ++j) dov[int64_t(i) * width + j] += weight * dyr[j];
        }
        if (dw) {
          double dot = 0;
          for (int64_t j = 0; j < width; ++j) dot += double(dyr[j]) * oi[j];
          dw[r * n_experts + e] += float(dot);
        }
      }
    }
  });
  return y;
}

// ---- reshape, scales, slices, row replacement ------------------------------------------------------

Var reshape(Tape& tape, Var x, int64_t rows, int64_t cols) {
  check(rows * cols == tape.size(x), "reshape: " + dims(tape, x) + " cannot be read as [" + std::to_string(rows) +
                                         ", " + std::to_string(cols) + "]");
  Var y = tape.make(rows, cols, tape.requires_grad(x), /*overwritten=*/true);
  std::memcpy(tape.value(y), tape.value(x), size_t(tape.size(x)) * sizeof(float));
  if (!tape.requires_grad(y)) return y;
  tape.record([&tape, x, y] {
    if (!tape.has_grad(y)) return;
    add_into(tape.grad(x), tape.grad_or_null(y), tape.size(x));
  });
  return y;
}

Var scale(Tape& tape, Var x, float c) {
  const int64_t n = tape.size(x);
  Var y = tape.make(tape.rows(x), tape.cols(x), tape.requires_grad(x), /*overwritten=*/true);
  const float* xv = tape.value(x);
  float* out = tape.value(y);
  for (int64_t i = 0; i < n; ++i) out[i] = xv[i] * c;
  if (!tape.requires_grad(y)) return y;
  tape.record([&tape, x, y, n, c] {
    if (!tape.has_grad(y)) return;
    const float* dy = tape.grad_or_null(y);
    float* dx = tape.grad(x);
    for (int64_t i = 0; i < n; ++i) dx[i] += dy[i] * c;
  });
  return y;
}

Var slice_columns(Tape& tape, Var x, int64_t begin, int64_t end) {
  const int64_t rows = tape.rows(x), cols = tape.cols(x), width = end - begin;
  check(begin >= 0 && begin < end && end <= cols, "slice_columns: [" + std::to_string(begin) + ", " +
                                                      std::to_string(end) + ") outside " + dims(tape, x));
  Var y = tape.make(rows, width, tape.requires_grad(x), /*overwritten=*/true);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(tape.value(y) + r * width, tape.value(x) + r * cols + begin, size_t(width) * sizeof(float));
  if (!tape.requires_grad(y)) return y;
  tape.record([&tape, x, y, rows, cols, begin, width] {
    if (!tape.has_grad(y)) return;
    const float* dy = tape.grad_or_null(y);
    float* dx = tape.grad(x);
    for (int64_t r = 0; r < rows; ++r) add_into(dx + r * cols + begin, dy + r * width, width);
  });
  return y;
}

Var scale_columns(Tape& tape, Var x, Parameter& s) {
  const int64_t rows = tape.rows(x), cols = tape.cols(x);
  check(s.size() == cols, "scale_columns '" + s.name + "': " + std::to_string(s.size()) + " scales for " +
                              std::to_string(cols) + " columns");
  Var y = tape.make(rows, cols, tape.requires_grad(x) || s.trainable, /*overwritten=*/true);
  const float *xv = tape.value(x), *sv = s.value.data();
  float* out = tape.value(y);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) out[r * cols + j] = xv[r * cols + j] * sv[j];
  if (!tape.requires_grad(y)) return y;
  Parameter* sp = &s;
  tape.record([&tape, x, y, sp, rows, cols] {
    if (!tape.has_grad(y)) return;
    const float *dy = tape.grad_or_null(y), *xv = tape.value(x), *sv = sp->value.data();
    if (tape.requires_grad(x)) {
      float* dx = tape.grad(x);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < cols; ++j) dx[r * cols + j] += dy[r * cols + j] * sv[j];
    }
    if (sp->trainable) {
      float* ds = sp->grad_data();
      for (int64_t j = 0; j < cols; ++j) {
        double sum = 0;
        for (int64_t r = 0; r < rows; ++r) sum += double(dy[r * cols + j]) * xv[r * cols + j];
        ds[j] += float(sum);
      }
    }
  });
  return y;
}

Var scale_rows_by_scalar(Tape& tape, Var x, Parameter& first, Parameter* second,
                         const std::vector<uint8_t>& use_second) {
  const int64_t rows = tape.rows(x), cols = tape.cols(x);
  check(first.size() == 1 && (!second || second->size() == 1),
        "scale_rows_by_scalar '" + first.name + "': the scalars must hold one value each");
  check(use_second.empty() || (second && int64_t(use_second.size()) == rows),
        "scale_rows_by_scalar '" + first.name + "': " + std::to_string(use_second.size()) +
            " row choices for " + std::to_string(rows) + " rows, or no second scalar");
  auto second_of = [&use_second](int64_t r) { return !use_second.empty() && use_second[size_t(r)]; };
  Var y = tape.make(rows, cols, tape.requires_grad(x) || first.trainable || (second && second->trainable),
                    /*overwritten=*/true);
  const float* xv = tape.value(x);
  float* out = tape.value(y);
  for (int64_t r = 0; r < rows; ++r) {
    const float s = second_of(r) ? second->value[0] : first.value[0];
    for (int64_t j = 0; j < cols; ++j) out[r * cols + j] = xv[r * cols + j] * s;
  }
  if (!tape.requires_grad(y)) return y;
  Parameter* fp = &first;
  tape.record([&tape, x, y, fp, second, use_second, rows, cols] {
    if (!tape.has_grad(y)) return;
    const float *dy = tape.grad_or_null(y), *xv = tape.value(x);
    float* dx = tape.requires_grad(x) ? tape.grad(x) : nullptr;
    double sum_first = 0, sum_second = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const bool is_second = !use_second.empty() && use_second[size_t(r)];
      const float s = is_second ? second->value[0] : fp->value[0];
      double dot = 0;
      for (int64_t j = 0; j < cols; ++j) {
        if (dx) dx[r * cols + j] += dy[r * cols + j] * s;
        dot += double(dy[r * cols + j]) * xv[r * cols + j];
      }
      (is_second ? sum_second : sum_first) += dot;
    }
    if (fp->trainable) fp->grad_data()[0] += float(sum_first);
    if (second && second->trainable) second->grad_data()[0] += float(sum_second);
  });
  return y;
}

Var replace_rows(Tape& tape, Var x, const std::vector<int32_t>& rows, Var z) {
  const int64_t n = int64_t(rows.size()), width = tape.cols(x), x_rows = tape.rows(x);
  check(tape.rows(z) == n && tape.cols(z) == width,
        "replace_rows: " + dims(tape, z) + " for " + std::to_string(n) + " rows of " + dims(tape, x));
  std::vector<uint8_t> replaced(size_t(x_rows), 0);
  for (int32_t r : rows) {
    check(r >= 0 && r < x_rows && !replaced[size_t(r)],
          "replace_rows: row " + std::to_string(r) + " outside " + dims(tape, x) + " or repeated");
    replaced[size_t(r)] = 1;
  }
  Var y = tape.make(x_rows, width, tape.requires_grad(x) || tape.requires_grad(z), /*overwritten=*/true);
  std::memcpy(tape.value(y), tape.value(x), size_t(tape.size(x)) * sizeof(float));
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(tape.value(y) + rows[size_t(i)] * width, tape.value(z) + i * width, size_t(width) * sizeof(float));
  if (!tape.requires_grad(y)) return y;
  tape.record([&tape, x, y, z, rows, replaced, n, width, x_rows] {
    if (!tape.has_grad(y)) return;
    const float* dy = tape.grad_or_null(y);
    if (tape.requires_grad(x)) {
      float* dx = tape.grad(x);
      for (int64_t r = 0; r < x_rows; ++r)
        if (!replaced[size_t(r)]) add_into(dx + r * width, dy + r * width, width);
    }
    if (tape.requires_grad(z)) {
      float* dz = tape.grad(z);
      for (int64_t i = 0; i < n; ++i) add_into(dz + i * width, dy + rows[size_t(i)] * width, width);
    }
  });
  return y;
}

// ---- soft-cap ----------------------------------------------------------------------------------

Var softcap(Tape& tape, Var x, float cap) {
  check(cap > 0, "softcap: cap must be positive");
  const int64_t n = tape.size(x);
  Var y = tape.make(tape.rows(x), tape.cols(x), tape.requires_grad(x), /*overwritten=*/true);
  const float* xv = tape.value(x);
  float* out = tape.value(y);
  parallel_for(tape.pool(), n, 1 << 14, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = cap * std::tanh(xv[i] / cap);  // as model.cpp computes it
  });
  if (!tape.requires_grad(y)) return y;
  tape.record([&tape, x, y, n, cap] {
    if (!tape.has_grad(y)) return;
    // d/dx cap tanh(x / cap) = 1 - tanh^2, with tanh = y / cap read back from the output.
    const float *dy = tape.grad_or_null(y), *yv = tape.value(y);
    float* dx = tape.grad(x);
    parallel_for(tape.pool(), n, 1 << 14, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const float t = yv[i] / cap;
        dx[i] += dy[i] * (1.f - t * t);
      }
    });
  });
  return y;
}

// ---- cross-entropy -----------------------------------------------------------------------------

Var cross_entropy(Tape& tape, Var logits, const std::vector<int32_t>& targets,
                  const std::vector<float>& weights, float normaliser) {
  const int64_t rows = tape.rows(logits), vocab = tape.cols(logits);
  check(int64_t(targets.size()) == rows && int64_t(weights.size()) == rows,
        "cross_entropy: " + std::to_string(targets.size()) + " targets and " +
            std::to_string(weights.size()) + " weights for " + std::to_string(rows) + " rows");
  check(normaliser > 0, "cross_entropy: normaliser must be positive");
  for (int64_t r = 0; r < rows; ++r)
    if (weights[size_t(r)] != 0)
      check(targets[size_t(r)] >= 0 && targets[size_t(r)] < vocab,
            "cross_entropy: target " + std::to_string(targets[size_t(r)]) + " of row " + std::to_string(r) +
                " is outside the vocabulary (size " + std::to_string(vocab) + ")");
  Var loss = tape.make(1, 1, tape.requires_grad(logits));
  auto lse = std::make_shared<std::vector<double>>(size_t(rows), 0.0);
  std::vector<double> row_loss(size_t(rows), 0.0);
  const float* x = tape.value(logits);
  parallel_for(tape.pool(), rows, kRowGrain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      if (weights[size_t(r)] == 0) continue;
      const float* xr = x + r * vocab;
      (*lse)[size_t(r)] = canvas::logsumexp(xr, vocab);
      row_loss[size_t(r)] = weights[size_t(r)] * ((*lse)[size_t(r)] - xr[targets[size_t(r)]]);
    }
  });
  double total = 0;
  for (double l : row_loss) total += l;  // in row order: independent of the thread count
  tape.value(loss)[0] = float(total / normaliser);
  if (!tape.requires_grad(loss)) return loss;
  tape.record([&tape, logits, loss, targets, weights, normaliser, lse, rows, vocab] {
    if (!tape.has_grad(loss)) return;
    const double g = tape.grad_or_null(loss)[0];
    const float* x = tape.value(logits);
    float* dx = tape.grad(logits);
    parallel_for(tape.pool(), rows, kRowGrain, [&](int64_t r0, int64_t r1) {
      std::vector<float> p(static_cast<size_t>(vocab));
      for (int64_t r = r0; r < r1; ++r) {
        if (weights[size_t(r)] == 0) continue;
        const float c = float(g * weights[size_t(r)] / normaliser);
        canvas::softmax(x + r * vocab, vocab, p.data());  // = exp(x - lse)
        float* dr = dx + r * vocab;
        for (int64_t j = 0; j < vocab; ++j) dr[j] += c * p[size_t(j)];
        dr[targets[size_t(r)]] -= c;
      }
    });
  });
  return loss;
}

}  // namespace canvas::train
