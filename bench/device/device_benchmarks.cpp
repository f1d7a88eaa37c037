// hybridseq-device-bench: GPU-sized kernels and a training step on the build's default execution
// space (Kokkos::Cuda in the CUDA configuration), for scripts/device-check.sh, which times PyTorch
// on the same GPU and shapes beside it (bench/device_vs_pytorch.py). Float32 tensors; the
// products in fp32 but where a row's arguments ask for TF32 or bf16 (math, gemm, _bf16,
// attention_bf16).
//
//   copy/MiB:1024                    device-to-device copy: GB/s counting bytes read and written
//                                    (the bandwidth yardstick of this run)
//   gemm/M/N/K/math:{0,1,2}          kernels::gemm (cuBLAS on Cuda), GemmMath fp32, TF32 or bf16:
//                                    TFLOP/s
//   attention_fwd/causal/T/Dh        H · Dh = 1024 (16 heads of 64), B·T = 16384 tokens: TFLOP/s
//                                    counting 4·visible·Dh per head (QKᵀ and PV over the visible
//                                    scores)
//   attention_fwd_bwd/causal/T/Dh    forward + backward, counted 3.5× the forward (FlashAttention's
//                                    count: backward 2.5×)
//   attention_{fwd,fwd_bwd}_bf16/…   the same on tensor cores (operands rounded to bf16, fp32
//                                    accumulation; kernels/attention/mma_attention.hpp), same
//                                    counts, also at Dh = 128 (8 heads)
//   selective_scan_fwd/B/T/Di        N = 16, chunk 64: GB/s of the traffic the scan cannot avoid
//                                    (u, Δ, B, C read; y and the chunk checkpoints written); the
//                                    script reads it against the copy's GB/s
//   selective_scan_fwd_bwd/B/T/Di    forward + backward (also dy, the checkpoints read, du, Δ's
//                                    gradient written)
//   gss_fwd_bwd/<fft|scan>/B/T       the GSS branch (E 1024: F 4096, H 256, N 512), B·T = 16384
//                                    tokens, forward + backward, its sequence mixing by cuFFT or
//                                    by the chunked scan (GssOptions::mixing): tokens/s, the
//                                    measurement for the default on devices (now the scan)
//   train_step/transformer/B/T/gemm/attention_bf16
//                                    a 135 M-parameter NeoX Transformer (V 32768, D 768, 12 layers
//                                    of 12 heads × 64, MLP 3072, full RoPE): zero_grad, forward,
//                                    loss, backward, global-norm clipping, AdamW, as the Trainer
//                                    steps; GEMMs by GemmMath (0 fp32, 1 TF32, 2 bf16), attention's
//                                    products in fp32 or bf16 (AttentionOptions::precision);
//                                    tokens/s and model TFLOP/s (6 × the matrix parameters per
//                                    token plus attention's 3.5 × 4·visible·Dh per head); then one
//                                    more step with every kernel timed, printed on stderr
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include <hybridseq/core.hpp>
#include <hybridseq/kernels/attention/attention.hpp>
#include <hybridseq/kernels/gemm.hpp>
#include <hybridseq/layers/gss.hpp>
#include <hybridseq/models/transformer.hpp>

#include "registry.hpp"
#include "support/attention_problem.hpp"
#include "support/launches.hpp"
#include "support/scan_problem.hpp"
#include "support/timing.hpp"
#include "support/training_step.hpp"

namespace hybridseq::bench {
namespace {

using Space = DefaultSpace;
namespace att = kernels::attention;

/// The benchmark loop of one kernel call: a warm-up call, then each timed call fenced.
template <class F>
void time_fenced(benchmark::State& state, const F& call) {
  call();
  Space().fence();
  for (auto _ : state) {
    call();
    Space().fence();
  }
}

void copy(benchmark::State& state) {
  const std::int64_t n = state.range(0) * (1 << 20) / sizeof(float);
  Tensor<float*, Space> from("from", n), to("to", n);
  Kokkos::deep_copy(from, 1.0f);
  time_fenced(state, [&] { Kokkos::deep_copy(Space{}, to, from); });
  state.counters["GB/s"] = per_second(2.0 * double(n) * sizeof(float) * 1e-9);
}

void gemm(benchmark::State& state) {
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  Tensor<float**, Space> a("a", m, k), b("b", k, n), c("c", m, n);
  core::fill(Space{}, core::flat(a), core::Init::normal(1.0), 3, 1);
  core::fill(Space{}, core::flat(b), core::Init::normal(1.0), 3, 2);
  kernels::set_gemm_math(kernels::GemmMath(state.range(3)));
  const auto call = [&] { kernels::gemm(Space{}, kernels::Op::none, kernels::Op::none, 1.0f, a, b, 0.0f, c); };
  time_fenced(state, call);
  kernels::set_gemm_math(kernels::GemmMath::fp32);
  state.counters["TFLOP/s"] = per_second(2.0 * double(m) * n * k * 1e-12);
}

constexpr int attention_width = 1024, attention_tokens = 16384;  // heads × head dim; B·T

template <bool Backward, att::Precision precision = att::Precision::native>
void attention(benchmark::State& state) {
  const std::int64_t t = state.range(0), b = attention_tokens / t;
  const int dh = int(state.range(1));
  AttentionProblem<Space> p(t, b, attention_width / dh, dh);
  const auto args = p.args();
  const auto grads = p.grads();
  const auto call = [&] {
    att::forward(Space{}, args, att::Causal::band, precision);
    if constexpr (Backward) att::backward(Space{}, args, grads, att::Causal::band, precision);
  };
  time_fenced(state, call);
  const double forward_flop = 4.0 * double(att::visible_entries<att::Causal>(t)) * p.head_dim * p.heads * double(b);
  state.counters["TFLOP/s"] = per_second((Backward ? 3.5 : 1.0) * forward_flop * 1e-12);
  state.counters["B"] = double(b);
}

template <kernels::DssAlgorithm Mixing>
void gss(benchmark::State& state) {
  const std::int64_t t = state.range(0), b = attention_tokens / t;
  using Gss = layers::Gss<layers::gss_shape(1024), float, Space>;
  typename Gss::Options options;
  options.mixing = Mixing;
  Gss layer(options);
  core::initialize(layer, 7);
  constexpr int e = Gss::d_in;
  Tensor<float***, Space> x("x", b, t, e), y("y", b, t, e), dy("dy", b, t, e), dx("dx", b, t, e);
  core::fill(Space{}, core::flat(x), core::Init::normal(1.0), 7, 1);
  core::fill(Space{}, core::flat(dy), core::Init::normal(1.0), 7, 2);
  core::Workspace<Space> ws;
  const auto call = [&] {
    ws.release({});
    typename Gss::Saved saved;
    layer.forward(ws, x, y, saved);
    layer.backward(ws, saved, dy, dx);
  };
  time_fenced(state, call);
  state.counters["tokens/s"] = per_second(double(b * t));
  state.counters["B"] = double(b);
}

template <bool Backward>
void selective_scan(benchmark::State& state) {
  const int b = int(state.range(0)), t = int(state.range(1)), di = int(state.range(2));
  ScanProblem<Space> in(b, t, di);
  core::Workspace<Space> ws;
  const auto call = [&] {
    in.forward();
    if constexpr (Backward) {
      core::WorkspaceScope scope(ws);
      in.backward(ws);
    }
  };
  time_fenced(state, call);
  const double channels = double(b) * t * di, rows = double(b) * t * 2 * scan_n;
  const double checkpoints = double(in.chunks.span());
  // Forward: u, Δ, B, C read; y, checkpoints written. Backward: u, Δ, dy, B, C, checkpoints
  // read; du, dΔ, dB, dC written.
  const double bytes =
      sizeof(float) * (3 * channels + rows + checkpoints + (Backward ? 5 * channels + 2 * rows + checkpoints : 0));
  state.counters["GB/s"] = per_second(bytes * 1e-9);
  state.counters["bytes"] = bytes;
}

// The 135 M-parameter Transformer: GPT-2-small's width and depth, a 32 K vocabulary, an untied head.
constexpr int model_vocab = 32768, model_layers = 12;
using BigTransformer = models::Transformer<model_vocab, models::NeoxShape{768, 12, 64, 64, 3072}, float, Space>;

void train_step(benchmark::State& state) {
  const std::int64_t b = state.range(0), t = state.range(1);
  kernels::set_gemm_math(kernels::GemmMath(state.range(2)));
  const bool attention_bf16 = state.range(3) != 0;
  BigTransformer::Options options;
  options.body.count = model_layers;
  if (attention_bf16)
    core::for_each_option<layers::AttentionOptions>(options, [](auto& a) { a.precision = att::Precision::bf16; });
  BigTransformer model(options);
  core::initialize(model, 1);
  TrainingStep step(model, b, t, model_vocab, 1e-4);
  step();  // the arena's first allocation and the optimizer's moments, outside the timing
  for (auto _ : state) step();
  // Where a step's time goes, on stderr (stdout may be the JSON): one more step, every kernel
  // fenced and timed by name.
  const auto times = kernel_times(step);
  double total = 0;
  for (const auto& k : times) total += k.seconds;
  std::fprintf(stderr,
               "train_step/transformer (gemm math %d, attention bf16 %d): one step, %.1f ms with every kernel fenced; "
               "by kernel:\n",
               int(state.range(2)), int(attention_bf16), total * 1e3);
  for (std::size_t i = 0; i < times.size() && i < 16; ++i)
    std::fprintf(stderr, "  %8.2f ms %5.1f %%  %5llu calls  %s\n", times[i].seconds * 1e3,
                 100 * times[i].seconds / total, static_cast<unsigned long long>(times[i].calls),
                 times[i].name.c_str());
  kernels::set_gemm_math(kernels::GemmMath::fp32);
  const double parameters = double(core::parameter_count(model));
  const double matrix_parameters = parameters - double(model_vocab) * 768;  // the embedding is a lookup
  const double attention_flop =
      3.5 * 4.0 * double(att::visible_entries<att::Causal>(t)) * 768 * double(b) * model_layers;
  state.counters["tokens/s"] = per_second(double(b * t));
  state.counters["TFLOP/s"] = per_second((6.0 * matrix_parameters * double(b * t) + attention_flop) * 1e-12);
  state.counters["parameters"] = parameters;
}

const Registration registration([] {
  benchmark::RegisterBenchmark("copy", copy)->Arg(1024)->ArgName("MiB")->UseRealTime()->Unit(benchmark::kMillisecond);
  for (int math : {0, 1, 2}) {
    benchmark::RegisterBenchmark("gemm", gemm)
        ->Args({4096, 4096, 4096, math})
        ->Args({8192, 3072, 768, math})  // the MLP's first Linear over 8192 tokens
        ->ArgNames({"M", "N", "K", "math"})
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  const auto attention_row = [](const char* name, auto* run, int t, int dh) {
    benchmark::RegisterBenchmark(name, run)
        ->Args({t, dh})
        ->ArgNames({"T", "Dh"})
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  };
  for (int t : {1024, 4096}) {
    attention_row("attention_fwd/causal", attention<false>, t, 64);
    attention_row("attention_fwd_bwd/causal", attention<true>, t, 64);
    for (int dh : {64, 128}) {
      attention_row("attention_fwd_bf16/causal", attention<false, att::Precision::bf16>, t, dh);
      attention_row("attention_fwd_bwd_bf16/causal", attention<true, att::Precision::bf16>, t, dh);
    }
  }
  benchmark::RegisterBenchmark("selective_scan_fwd", selective_scan<false>)
      ->Args({8, 2048, 2048})
      ->ArgNames({"B", "T", "Di"})
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("selective_scan_fwd_bwd", selective_scan<true>)
      ->Args({8, 2048, 2048})
      ->ArgNames({"B", "T", "Di"})
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  for (int t : {1024, 4096}) {
    benchmark::RegisterBenchmark("gss_fwd_bwd/fft", gss<kernels::DssAlgorithm::fft>)
        ->Arg(t)
        ->ArgName("T")
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("gss_fwd_bwd/scan", gss<kernels::DssAlgorithm::scan>)
        ->Arg(t)
        ->ArgName("T")
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark("train_step/transformer", train_step)
      ->Args({8, 1024, 0, 0})
      ->Args({8, 1024, 1, 0})
      ->Args({8, 1024, 2, 1})
      ->ArgNames({"B", "T", "gemm", "attention_bf16"})
      ->Iterations(3)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
});

}  // namespace
}  // namespace hybridseq::bench
