// canvas bench: machine roofs, then AR and diffusion decoding of one model over a grid of settings.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/decoder_passes.h"
#include "bench/harness.h"
#include "bench/plot.h"
#include "bench/synthetic.h"
#include "cli/options.h"
#include "cli/output_paths.h"
#include "commands.h"
#include "shipped_models.h"
#include "core/error.h"
#include "core/output_file.h"
#include "core/timer.h"
#include "decode/text_model.h"
#include "device.h"

namespace canvas::cli {
namespace {

const Command kBench{
    "bench",
    "canvas bench [-m MODEL.gguf | --synthetic ARCH:SIZE] [options]\n"
    "       canvas bench --train CONFIG [--steps N] [--warmup N] [-t T] [--json FILE]",
    R"(Measures the machine's roofs (streaming-read bandwidth; matmul GFLOP/s per weight dtype at m = 1, 8,
32, 256 rows), then decodes random prompts with the model autoregressively and by masked diffusion over
a grid of settings, round-robin (each grid point once per repeat). Prints a table of medians: prompt
and decode tokens/s, ms and tokens and rows per pass, request latency p50/p95, peak RSS, achieved GB/s
(weight bytes read / decode time) and GFLOP/s (matmul FLOPs / decode time) as fractions of the roofs
measured in the same run, and each diffusion row's decode speed over AR's ("vs AR").)",
    {
        heading("model:"),
        {"-m,--model", "FILE", "GGUF model file (default without --synthetic: the shipped text model,\n"
                                "models/text-dg.gguf)"},
        {"--synthetic", "NAME", "random weights of a real shape, built in memory (see --list)"},
        {"--type", "T", "synthetic weight type: q4_0 (default) | q8_0 | f16 | bf16 | f32"},
        {"--layers", "N", "keep only the first N layers (synthetic or file; reported)"},
        {"--list", "", "list the synthetic shapes and their sizes, then exit"},
        {"--save", "FILE.gguf",
         "write the --synthetic model (--type, --layers, --seed) as a GGUF in llama.cpp's layout\n"
         "(placeholder vocabulary of the model's size), then exit: to time it with other engines"},
        heading("\ngrid (LIST = comma-separated values):"),
        {"-p,--n-prompt", "N", "prompt tokens (random ids; default 32)"},
        {"-n,--n-gen", "N", "tokens to generate (default 64)"},
        {"--modes", "LIST", "ar, diffusion (default both); models with a decoder also self-cond, stream, verify,\n"
                            "verify-overlap"},
        {"--draft-length", "K", "--modes verify: tokens drafted per cycle (default 4)"},
        {"--cache", "LIST", "none, prefix, dual (default all three)"},
        {"--block-length", "LIST", "block lengths (default 32; clamped to -n)"},
        {"--steps", "LIST", "total denoising steps (default -n: one token per pass)"},
        {"--threshold", "LIST",
         "also run Fast-dLLM threshold decoding at these confidences (random weights\n"
         "rarely reach a threshold: expect ~1 token per pass)"},
        {"-t,--threads", "LIST", "thread counts (default: the CPUs this process may use)"},
        {"--warmup", "N", "warm-up requests per grid point (default 1)"},
        {"--repeats", "N", "measured requests per grid point (default 3)"},
        {"-s,--seed", "N", "seed of the prompt and of synthetic weights (default 0)"},
        heading("\noutput:"),
        {"--quick", "",
         "small roofs and grid (-p 8 -n 8, 0 warm-ups, 1 repeat) for tests and CI:\n"
         "the roofs are then cache rates, not DRAM roofs"},
        {"--no-roofs", "", "skip the roofs (fractions are then absent); with --device cuda, the device's floors"},
        {"--json", "FILE", "write the report as one JSON object (machine, model, settings, roofs, rows)"},
        {"--device", "NAME", kDeviceHelp},
        {"--cpu-moe", "", kCpuMoeHelp},
        {"--n-cpu-moe", "N", kNCpuMoeHelp},
        {"--profile", "",
         "with --device cuda: one more pass of each timed kind (models with a decoder) or\n"
         "request of each grid row, with per-op device timing (CUDA events, no graphs)"},
        {"--plot", "FILE.png",
         "plot decode tokens/s against tokens per pass, AR as a horizontal line\n"
         "(the masked grid, drawn by canvas itself). Models with a decoder: --json only"},
        heading("\ntraining:"),
        {"--train", "CONFIG", "time training steps of a config instead (canvas bench --train CONFIG --help)"},
    },
    R"(Numbers are medians over the repeats; on a machine shared with other work they are indicative, and
only ratios taken within one run (vs AR, fractions of roofs) compare fairly.

Models with a decoder (DiffusionGemma, e.g. --synthetic diffusion-gemma:26b-a4b --layers N) are timed
pass by pass instead of over the grid: the prompt's encoder pass (-p tokens), one decoder pass over a
canvas of --block-length tokens (default: the model's canvas length, 256 for synthetic shapes) without (--modes diffusion) and with (self-cond)
self-conditioning logits, all canvas rows' logits computed as the sampler needs, one decoder pass with
the fused streaming LM head (stream: fed the previous streamed pass's soft embedding, reducing every
row to entropies, argmax and a Gumbel sample and writing the next soft embedding, as --stream-head
decodes; no [canvas x vocab] buffer), and one AR step (ar: a one-token encoder pass after the prompt,
with its logits), each --repeats times after --warmup; medians, and the peak RSS (of the whole run:
time --modes stream alone to see its own). verify: one draft-and-verify cycle (a decoder pass and a causal
pass over --draft-length + 1 rows, default 4), turned into tokens/s for 1, 2 and all drafts kept per cycle;
verify-overlap: the one pass of an overlapped cycle (--overlap: the k + 1 causal rows and k + 1 decoder
canvases of k + 1 rows), likewise.
--modes for these models: ar, diffusion, self-cond, stream, verify, verify-overlap (default ar, diffusion,
self-cond, verify). The
closing lines turn the faster later-step pass (self-cond or stream) into tokens/s for a canvas denoised in
8, 16 and 32 passes, against AR.

--device cuda: the passes run on the GPU and are compared with its floors instead of the CPU's roofs. After
the weights' upload the bench reports the device memory in use, measures the device's streaming-read
bandwidth (a kernel reading a 4 GiB buffer, or half the free memory if less, with 16-byte loads) and the
cuBLAS GEMM rate (8192^3, f16 inputs with f32 accumulation, and f32), each timed with CUDA events (median
after a warm-up), and samples the memory in use after every timed pass (its peak). Each pass's floor is
max(bytes / read bandwidth, FLOPs / GEMM rate), from the weights' bytes in their stored type (with experts,
those the pass's rows can hit: an AR step reads its top-k, a 256-row canvas all of them) and the matmul FLOPs
(attention not counted; the f32 rate for f32 weights, the f16 rate otherwise); each pass and each tokens/s
line is reported as floor / measured ("of floor"). JSON: "device" {name, memory_total_bytes,
memory_used_bytes, memory_peak_bytes, buffers_peak_bytes (canvas's own device buffers at most, exact),
read_gbps, read_buffer_bytes, gemm_size, gemm_f16_tflops, gemm_f32_tflops}, and fraction_of_floor (with
floor_ms or floor_ms_per_pass) on every pass, row and projection. With --cpu-moe or --n-cpu-moe N the
experts of those layers run on the CPU (their time is in each pass; the floors still count their bytes as
the device's).

training (--train CONFIG): builds the data, model and AdamW of a training config (configs/*.cfg) in
memory and times --warmup (default 2) then --steps (default 5) full training steps (batch, forward,
backward, optimizer) with -t threads (default all cores), sampling the fp32 FMA roof (register-only
fused multiply-adds on every thread) before each measured step. Writes nothing to disk but --json.
Reports medians over the measured steps: train_tokens_per_second, train_gflops (model FLOPs per second:
6 x matmul weights per token x tokens for the linear layers' forward and backward, plus
12 x layers x heads x head_dim x sum of sequence_length^2 for attention's q.k and PV products forward and
backward; norms, activations, softmax, loss and optimizer not counted), fp32_roof_gflops (median of the
roof samples) and fraction_of_roof = train_gflops / fp32_roof_gflops.)"};

void list_shapes() {
  std::printf("%-18s %10s %10s  %s\n", "name", "q4_0 GiB", "q8_0 GiB", "shape");
  for (const bench::SyntheticShape& s : bench::synthetic_shapes()) {
    bench::SyntheticOptions q4, q8;
    q4.type = DType::Q4_0;
    q8.type = DType::Q8_0;
    std::printf("%-18s %10.2f %10.2f  %s\n", s.name.c_str(),
                double(bench::synthetic_model_bytes(s, q4)) / 1073741824.0,
                double(bench::synthetic_model_bytes(s, q8)) / 1073741824.0, s.description.c_str());
  }
}

// --json FILE: the report as one JSON object.
void write_json_report(const std::string& path, const nlohmann::json& json) {
  if (path.empty()) return;
  write_file(path, json.dump(2) + "\n");
  std::fprintf(stderr, "canvas bench: wrote %s\n", path.c_str());
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  for (int i = 2; i < argc; ++i)
    if (std::string(argv[i]) == "--train" || std::string(argv[i]).rfind("--train=", 0) == 0)
      return cmd_bench_train(argc, argv);
  if (print_help_if_asked(kBench, argc, argv)) return 0;
  Args args(kBench, argc, argv, 2);
  args.check_no_positional("; see canvas bench --help");
  if (args.has("list")) {
    list_shapes();
    return 0;
  }
  if (args.has("save")) {
    check(args.has("synthetic"), "--save writes a --synthetic model");
    bench::SyntheticOptions synthetic;
    synthetic.type = dtype_from_name(args.get("type", "q4_0"));
    synthetic.layers = args.get_int("layers", 0);
    synthetic.seed = uint64_t(args.get_int("seed", 0));
    const bench::SyntheticShape& shape = bench::find_synthetic_shape(args.get("synthetic", ""));
    const std::string path = args.get("save", "");
    const double t0 = now_ms();
    ThreadPool pool(0);
    bench::write_synthetic_gguf(shape, synthetic, path, &pool);
    std::fprintf(stderr, "canvas bench: wrote %s (%s, %s, %.1f s)\n", path.c_str(), shape.name.c_str(),
                 dtype_name(synthetic.type), (now_ms() - t0) / 1000);
    return 0;
  }
  const bool quick = args.has("quick");
  const auto say = [](const std::string& line) { std::fprintf(stderr, "canvas bench: %s\n", line.c_str()); };
  // Before the (possibly long) run: the files it writes at the end must not be the model it reads.
  for (const char* output : {"json", "plot"})
    check_output_is_not_input({std::string("--") + output, args.get(output, "")}, {{"-m", args.get("model", "")}});

  bench::BenchOptions options;
  options.prompt_tokens = args.get_int("n-prompt", quick ? 8 : 32);
  options.new_tokens = args.get_int("n-gen", quick ? 8 : 64);
  options.warmup = int(args.get_int("warmup", quick ? 0 : 1));
  options.repeats = int(args.get_int("repeats", quick ? 1 : 3));
  options.seed = uint64_t(args.get_int("seed", 0));
  options.measure_roofs = !args.has("no-roofs");
  options.profile = args.has("profile");
  check(!args.has("profile") || args.get("device", "cpu") != "cpu",
        "--profile times ops on a device: add --device cuda");
  const DeviceChoice device = device_choice(args);
  if (quick) options.roof = bench::RoofOptions::quick();
  options.run_ar = options.run_diffusion = false;
  const std::vector<std::string> modes = split_list(args.get("modes", ""));
  for (const std::string& mode : modes.empty() ? std::vector<std::string>{"ar", "diffusion"} : modes) {
    if (mode == "self-cond" || mode == "stream" || mode == "verify" || mode == "verify-overlap")
      continue;  // decoder models only; checked there
    check(mode == "ar" || mode == "diffusion", "--modes: unknown mode '" + mode + "' (ar, diffusion)");
    (mode == "ar" ? options.run_ar : options.run_diffusion) = true;
  }
  options.caches.clear();
  for (const std::string& cache : split_list(args.get("cache", "none,prefix,dual")))
    options.caches.push_back(parse_cache_mode(cache));
  check(!options.caches.empty(), "--cache needs at least one of none, prefix, dual");
  options.block_lengths = args.get_int_list("block-length", {32});
  options.steps = args.get_int_list("steps", {});
  options.thresholds = args.get_float_list("threshold");
  options.threads.clear();
  for (int64_t t : args.get_int_list("threads", {0})) {
    check(t >= 0 && t <= 1024, "--threads must be between 0 and 1024");
    options.threads.push_back(int(t));
  }
  bench::BenchModelSpec spec;
  spec.synthetic = args.get("synthetic", "");
  // Without -m or --synthetic: the shipped default model.
  spec.file = args.has("model") || args.has("synthetic") ? args.get("model", "")
                                                         : shipped_model_path(kDefaultTextModel, "canvas bench");
  spec.type = dtype_from_name(args.get("type", "q4_0"));
  check(!args.has("type") || args.has("synthetic"), "--type applies to --synthetic models only");
  spec.layers = args.get_int("layers", 0);
  spec.seed = options.seed;
  bench::BenchModel bench_model = bench::open_bench_model(spec);
  const Model* model = &bench_model.model();
  bench::BenchModelInfo& info = bench_model.info;
  if (bench_model.synthetic)
    std::fprintf(stderr, "canvas bench: built %s (%s, %lld of %lld layers, %.2f GiB) in %.1f s\n",
                 info.source.c_str(), dtype_name(spec.type), (long long)model->config.n_layers,
                 (long long)info.layers_total, double(bench_model.weight_bytes()) / 1073741824.0,
                 bench_model.build_seconds);

  // On a device the passes are compared with its floors, measured here (after the upload, whose memory they
  // report), instead of the CPU's roofs.
  if (args.get("device", "cpu") != "cpu") {
    const double t0 = now_ms();
    use_device(bench_model.model(), device);
    std::fprintf(stderr, "canvas bench: weights on the device in %.1f s\n", (now_ms() - t0) / 1000);
    info.source += " on " + args.get("device", "cpu");
    options.device = bench::measure_device_floors(options.measure_roofs, quick, say);
    std::fputs(("canvas bench: " + bench::device_floors_text(*options.device)).c_str(), stderr);
  }
  if (model->config.has_decoder) {
    check(!args.has("plot"), "--plot draws the grid of masked-diffusion models; a model with a decoder is timed "
                             "pass by pass: use --json FILE for its numbers");
    bench::DecoderPassOptions passes;
    // The canvas the model is decoded with (its diffusion.canvas_length; 256, the release's, otherwise).
    passes.canvas = args.has("block-length") ? options.block_lengths[0]
                    : bench_model.synthetic  ? 256
                                             : sampler_defaults(*model, info.source).params.canvas_length;
    passes.prompt_tokens = options.prompt_tokens;
    passes.warmup = options.warmup;
    passes.repeats = options.repeats;
    passes.threads = options.threads[0];
    passes.seed = options.seed;
    passes.modes = modes.empty() ? std::vector<std::string>{"ar", "diffusion", "self-cond", "verify"} : modes;
    passes.draft_length = args.get_int("draft-length", 4);
    passes.profile = args.has("profile");
    const bench::DecoderPassReport report =
        bench::bench_decoder_passes(*model, passes, info.source, bench_model.weight_bytes(), options.device);
    std::fputs(report.text.c_str(), stdout);
    write_json_report(args.get("json", ""), report.json);
    return 0;
  }
  for (const char* decoder_only : {"self-cond", "stream", "verify", "verify-overlap"})
    check(std::find(modes.begin(), modes.end(), decoder_only) == modes.end(),
          std::string("--modes: ") + decoder_only + " applies to models with a decoder (DiffusionGemma) only");

  const bench::BenchReport report = bench::run_bench(*model, info, options, say);
  std::fputs(bench::report_table(report).c_str(), stdout);
  std::fflush(stdout);

  write_json_report(args.get("json", ""), bench::report_json(report));
  if (args.has("plot")) {
    bench::write_bench_plot(report, args.get("plot", ""));
    std::fprintf(stderr, "canvas bench: plotted %s\n", args.get("plot", "").c_str());
  }
  return 0;
}

}  // namespace canvas::cli
