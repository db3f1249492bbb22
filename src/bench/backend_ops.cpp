// bench/backend_ops.h: the conformance cases, one small random model per family and storage type, one pass
// per row count; the cases are the calls that pass of the model's definition makes, each run on the backend
// under test and on the reference with the same inputs.
#include "bench/backend_ops.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <span>

#include "bench/synthetic.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/cpu_executor.h"
#include "model/placement.h"
#include "model/tensors.h"
#include "model/transformer.h"

namespace canvas::bench {
namespace {

const int64_t kRowCounts[] = {1, 8, 9, 16, 64, 65, 256};
const DType kTypes[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0};

// The models: a llama-family one whose widths are not multiples of 16 where the kernels allow it (vocabulary
// 330, 3 query heads on 1 KV head, Q/K/V biases), LLaDA-MoE's experts, and DiffusionGemma's layer (sliding
// and full layers, K = V on the full ones, q/k norms, the decoder).
std::vector<SyntheticShape> shapes() {
  SyntheticShape llama = find_synthetic_shape("llada:tiny");
  llama.name = "llama-96";
  ModelConfig& c = llama.config;
  c.hidden = 96;
  c.n_heads = 3;
  c.n_kv_heads = 1;
  c.head_dim = 32;
  c.ffn = 160;
  c.vocab = 330;
  c.qkv_bias = true;
  c.rope.head_dim = c.rope.rot_dims = 32;
  c.layer_attention.clear();
  return {llama, find_synthetic_shape("llada-moe:tiny"), find_synthetic_shape("diffusion-gemma:tiny")};
}

// One side of a case: its own caches, requests and logits, and the executor over them.
struct Side {
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<KvCache*> cache_ptrs;
  std::vector<ForwardRequest> requests;
  std::vector<float> logits;
  ForwardPlan plan;
  std::unique_ptr<Executor> ex;
};

// The inputs both sides share.
struct PassInputs {
  int64_t rows = 0;
  bool decoder = false;
  std::vector<int32_t> tokens, groups;
  std::vector<float> self_cond;  // [rows x vocab] previous logits (decoder passes)
  int64_t prefix = 0;            // cached positions before the rows
  std::vector<float> prefix_kv;  // their K/V, every layer, as written into each side's cache
};

std::vector<float> random_values(int64_t n, Rng& rng, float scale = 1.f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = float(rng.normal()) * scale;
  return v;
}

PassInputs make_inputs(const ModelConfig& c, int64_t rows, bool decoder, uint64_t seed) {
  Rng rng(seed);
  PassInputs in;
  in.rows = rows;
  in.decoder = decoder;
  in.prefix = decoder ? 5 : 0;
  for (int64_t i = 0; i < rows; ++i) {
    in.tokens.push_back(int32_t(rng.next() % uint64_t(c.vocab)));
    in.groups.push_back(int32_t(i / 8));  // blocks of 8: a block sees itself and the blocks before it
  }
  if (decoder) in.self_cond = random_values(rows * c.vocab, rng, 3.f);
  return in;
}

Side make_side(const Model& model, const PassInputs& in, const std::function<std::unique_ptr<Executor>(Side&)>& make) {
  const ModelConfig& c = model.config;
  Side side;
  side.caches.push_back(std::make_unique<KvCache>(c, in.prefix + in.rows + 1));
  KvCache& cache = *side.caches.back();
  // The cached prefix: the same pseudo-random K/V on both sides (a function of position and layer).
  for (int64_t l = 0; l < c.n_layers; ++l) {
    Rng rng(uint64_t(1000 + l));
    const int64_t width = cache.head_stride(l) * c.attention_of(l).n_kv_heads;
    for (int64_t j = 0; j < width; ++j) {
      const float k = float(rng.normal()), v = float(rng.normal());
      cache.keys(l)[j] = k;
      cache.values(l)[j] = v;
    }
  }
  for (int64_t p = 0; p < cache.capacity(); ++p) cache.groups()[p] = 0;
  side.cache_ptrs.push_back(&cache);
  ForwardRequest r;
  r.tokens = in.tokens.data();
  r.n = in.rows;
  r.pos0 = in.prefix;
  r.groups = in.groups.data();
  r.decoder = in.decoder;
  if (in.decoder) r.self_cond = in.self_cond.data();
  for (int64_t i = 0; i < in.rows; ++i) r.logit_rows.push_back(int32_t(i));
  side.logits.assign(size_t(in.rows * c.vocab), 0.f);
  r.logits = side.logits.data();
  side.requests.push_back(std::move(r));
  side.plan = plan_forward(model, side.cache_ptrs, side.requests);
  side.ex = make(side);
  return side;
}

// The slots op reads and the slots it writes, as primitive_info says.
std::vector<Slot> slots_read(const Op& op) {
  std::vector<Slot> slots(op.in.begin(), op.in.begin() + op.info().reads);
  if (op.info().reads_out) slots.push_back(op.out);
  std::sort(slots.begin(), slots.end());
  slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
  return slots;
}
std::vector<Slot> slots_written(const Op& op) {
  std::vector<Slot> slots;
  if (op.info().writes_out) slots.push_back(op.out);
  for (const Product& p : op.products) slots.push_back(p.out);
  return slots;
}

// A primitive's case: one call of the model's own definition, with the shapes of the slots it read when a
// whole pass made it. Those slots are set to the same random values on both sides; the slots it writes,
// and the logits, are compared afterwards.
struct OpCase {
  std::string what;               // the call, e.g. "slot 6 blk.0.attn_output.weight layer 0 (sliding)"
  Op op;                          // its products are `products`, bound where the case runs
  std::vector<Product> products;  // matmul
  struct Input {
    Slot slot;
    int64_t rows, width;
  };
  std::vector<Input> inputs;
};

// Runs a pass on the executor it wraps and keeps its calls as cases: one per primitive, weight (a product's
// roles; another primitive's: whether it has one), size, attention kind of its layer and shapes read (a
// call of another layer, or of another norm weight of the same width, is the same case again).
class CaseRecorder final : public Executor {
 public:
  CaseRecorder(Executor& inner, const ModelConfig& c) : inner_(inner), c_(c) {}
  std::vector<OpCase> cases;

  void run(const Op& op) override {
    std::vector<OpCase::Input> inputs;
    std::vector<int64_t> key = {int64_t(op.primitive), op.size,
                                op.layer >= 0 ? int64_t(c_.attention_of(op.layer).kind) : -1};
    if (op.products.empty()) key.push_back(op.weight.present());
    for (const Product& p : op.products) key.push_back(int64_t(p.weight.role));
    std::vector<float> values;
    for (Slot s : slots_read(op)) {
      int64_t rows = 0, width = 0;
      inner_.read_slot(s, values, rows, width);
      inputs.push_back({s, rows, width});
      key.insert(key.end(), {rows, width});
    }
    if (std::find(seen_.begin(), seen_.end(), key) == seen_.end()) {
      seen_.push_back(std::move(key));
      cases.push_back({describe(op), op, {op.products.begin(), op.products.end()}, std::move(inputs)});
    }
    inner_.run(op);
  }
  void read_slot(Slot s, std::vector<float>& data, int64_t& rows, int64_t& width) override {
    inner_.read_slot(s, data, rows, width);
  }
  void write_slot(Slot s, const float* data, int64_t rows, int64_t width) override {
    inner_.write_slot(s, data, rows, width);
  }

 private:
  // Its weights by their GGUF names, and its layer's attention.
  std::string describe(const Op& op) const {
    std::vector<WeightRef> weights;
    for (const Product& p : op.products) weights.push_back(p.weight);
    if (op.products.empty() && op.weight.present()) weights.push_back(op.weight);
    std::string what;
    for (Slot s : slots_written(op)) what += (what.empty() ? "slot " : " ") + std::to_string(int(s));
    for (const WeightRef& w : weights)
      for (const TensorSpec& spec : model_tensors(c_))
        if (spec.role == w.role && spec.layer == w.layer) what += (what.empty() ? "" : " ") + spec.gguf;
    if (op.layer < 0) return what;
    const LayerAttention la = c_.attention_of(op.layer);
    return what + (what.empty() ? "" : " ") + "layer " + std::to_string(op.layer) +
           (la.kind == AttentionKind::Sliding ? " (sliding)" : "") + (la.value_from_key ? " (K = V)" : "");
  }
  Executor& inner_;
  const ModelConfig& c_;
  std::vector<std::vector<int64_t>> seen_;
};

// Largest |a - b| relative to the largest |b| (the reference), and where.
struct Mismatch {
  double relative = 0;
  int64_t at = -1;
};
Mismatch compare(const std::vector<float>& a, const std::vector<float>& b) {
  Mismatch e;
  if (a.size() != b.size()) {
    e.relative = INFINITY;
    return e;
  }
  double scale = 1e-6;
  for (float x : b) scale = std::max(scale, double(std::fabs(x)));
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::isfinite(a[i]) && std::isfinite(b[i]) ? std::fabs(double(a[i]) - double(b[i])) / scale
                     : (std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i]            ? 0
                                                                                         : INFINITY;
    if (d > e.relative) {
      e.relative = d;
      e.at = int64_t(i);
    }
  }
  return e;
}

BackendFactory primitive_backend(const BackendOpsOptions& options) {
  if (options.backend == "partial") return [](const Model&) { return make_partial_backend(); };
  if (options.backend == "cuda") {
    check(options.cuda != nullptr, "canvas_backend_ops: no CUDA backend was given (canvas_backend_ops --backend cuda "
                                   "loads the CUDA module)");
    return options.cuda;
  }
  throw Error("canvas_backend_ops: unknown backend '" + options.backend + "' (cpu, partial, cuda)");
}

}  // namespace

std::vector<std::string> backend_ops_backends() { return {"cpu", "partial", "cuda"}; }

std::string backend_ops_list(const std::function<bool(Primitive)>& cuda_runs, const std::string& cuda_note) {
  // Which backends run each primitive: the CPU runs all of them; the others say so through supports().
  const auto partial = make_partial_backend();
  const auto shape = find_synthetic_shape("llada:tiny");
  SyntheticOptions options;
  options.type = DType::F32;
  const auto model = build_synthetic_model(shape, options, nullptr);
  KvCache cache(model->model.config, 4);
  KvCache* caches[] = {&cache};
  const int32_t token = 0;
  ForwardRequest r;
  r.tokens = &token;
  r.n = 1;
  r.groups = &token;
  const ForwardPlan plan = plan_forward(model->model, caches, std::span<const ForwardRequest>(&r, 1));
  const auto partial_ex = partial->executor(model->model, caches, std::span<const ForwardRequest>(&r, 1), plan, nullptr);
  std::string out;
  for (int i = 0; i < kPrimitives; ++i) {
    const Primitive p = Primitive(i);
    std::string line = std::string(primitive_name(p));
    line.resize(std::max<size_t>(line.size() + 1, 26), ' ');
    line += "cpu";
    if (partial_ex->supports(Op(p, Slot::Count))) line += " partial";
    if (cuda_runs && cuda_runs(p)) line += " cuda";
    out += line + "\n";
  }
  if (!cuda_note.empty()) out += cuda_note + "\n";
  return out;
}

BackendOpsResult run_backend_ops(const BackendOpsOptions& options, std::FILE* out) {
  // The cpu backend is checked against the scalar twins; another backend against the CPU's SIMD kernels,
  // bit for bit for the partial backend (the same kernels), within f16 rounding for a device.
  if (options.backend == "cpu") return run_backend_ops(options, out, BackendFactory{}, 1e-4);
  return run_backend_ops(options, out, primitive_backend(options), options.backend == "partial" ? 0.0 : 2e-2);
}

BackendOpsResult run_backend_ops(const BackendOpsOptions& options, std::FILE* out, const BackendFactory& make_backend,
                                 double tolerance) {
  const bool cpu = make_backend == nullptr;
  if (!options.primitive.empty()) {
    bool known = false;
    for (int i = 0; i < kPrimitives; ++i) known = known || options.primitive == primitive_name(Primitive(i));
    check(known, "canvas_backend_ops: unknown primitive '" + options.primitive + "' (--list names them)");
  }
  ThreadPool pool(0);
  BackendOpsResult result;
  for (const SyntheticShape& shape : shapes()) {
    for (DType type : kTypes) {
      SyntheticOptions so;
      so.type = type;
      so.seed = 7;
      const auto built = build_synthetic_model(shape, so, &pool);
      const Model& model = built->model;
      const ModelConfig& c = model.config;
      const std::shared_ptr<PrimitiveBackend> backend = cpu ? nullptr : make_backend(model);
      for (int decoder = 0; decoder < (c.has_decoder ? 2 : 1); ++decoder) {
        for (int64_t rows : kRowCounts) {
          const PassInputs in = make_inputs(c, rows, decoder != 0, uint64_t(rows * 31 + decoder));
          // The cases: the calls of a whole pass of the model's definition.
          Side recorded = make_side(model, in, [&](Side& s) -> std::unique_ptr<Executor> {
            return std::make_unique<CpuExecutor>(model, s.cache_ptrs, s.requests, s.plan, &pool);
          });
          CaseRecorder recorder(*recorded.ex, c);
          run_transformer(c, recorder, recorded.plan.conditioned_rows > 0);
          for (const OpCase& oc : recorder.cases) {
            Op op = oc.op;
            op.products = oc.products;
            if (!options.primitive.empty() && options.primitive != primitive_name(op.primitive)) continue;
            Side ref = make_side(model, in, [&](Side& s) -> std::unique_ptr<Executor> {
              return std::make_unique<CpuExecutor>(model, s.cache_ptrs, s.requests, s.plan, &pool,
                                                   cpu ? kReferenceKernels : kFastKernels);
            });
            Side test = make_side(model, in, [&](Side& s) -> std::unique_ptr<Executor> {
              if (cpu) return std::make_unique<CpuExecutor>(model, s.cache_ptrs, s.requests, s.plan, &pool);
              return backend->executor(model, s.cache_ptrs, s.requests, s.plan, &pool);
            });
            const std::string label = std::string(primitive_name(op.primitive)) + " " + dtype_name(type) +
                                      " " + shape.name + (decoder ? " decoder" : "") +
                                      " rows=" + std::to_string(rows) + ": " + oc.what;
            if (!test.ex->supports(op)) {
              ++result.unsupported;
              if (options.verbose) std::fprintf(out, "  --   %s (not supported)\n", label.c_str());
              continue;
            }
            ++result.cases;
            Rng rng(uint64_t(rows) * 7919 + uint64_t(op.primitive));
            for (const OpCase::Input& input : oc.inputs) {
              const std::vector<float> v = random_values(input.rows * input.width, rng);
              ref.ex->write_slot(input.slot, v.data(), input.rows, input.width);
              test.ex->write_slot(input.slot, v.data(), input.rows, input.width);
            }
            ref.ex->run(op);
            test.ex->run(op);
            Mismatch worst;
            std::string where;
            auto note = [&](const std::vector<float>& got, const std::vector<float>& want, const std::string& name,
                            int64_t width) {
              const Mismatch e = compare(got, want);
              if (where.empty() || e.relative > worst.relative) {
                worst = e;
                where = name + (e.at >= 0                ? " [row " + std::to_string(e.at / std::max<int64_t>(width, 1)) +
                                                               ", col " + std::to_string(e.at % std::max<int64_t>(width, 1)) + "]"
                                : std::isinf(e.relative) ? " (shape differs)"
                                                         : "");
              }
            };
            for (Slot s : slots_written(op)) {
              std::vector<float> got, want;
              int64_t r1 = 0, w1 = 0, r2 = 0, w2 = 0;
              test.ex->read_slot(s, got, r1, w1);
              ref.ex->read_slot(s, want, r2, w2);
              if (r1 != r2 || w1 != w2) got.clear();
              note(got, want, "slot " + std::to_string(int(s)), w2);
            }
            if (op.primitive == Primitive::Logits) note(test.logits, ref.logits, "logits", c.vocab);
            const bool failed = !(worst.relative <= tolerance);
            if (failed) ++result.failed;
            if (failed || options.verbose)
              std::fprintf(out, "%s %s: max error %.3g of the largest value (tolerance %.3g) at %s\n",
                           failed ? "FAIL" : "  ok", label.c_str(), worst.relative, tolerance, where.c_str());
          }
        }
      }
    }
  }
  std::fprintf(out, "%s: %d cases, %d failed, %d not supported by the backend (they run on the CPU)\n",
               options.backend.c_str(), result.cases, result.failed, result.unsupported);
  return result;
}

}  // namespace canvas::bench
