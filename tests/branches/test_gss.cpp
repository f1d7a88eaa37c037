// GSS: the DSS mixing kernels against the naive oracle, the branch through the testbed
// (gradients in double, PyTorch goldens in float, save/load), decoding against the training
// path, and bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include <hybridseq/kernels/dss.hpp>
#include <hybridseq/kernels/reference/dss.hpp>
#include <hybridseq/layers/gss.hpp>

#include "cases/gss_cases.hpp"
#include "support/spaces.hpp"
#include "support/testbed.hpp"

using namespace hybridseq;
using kernels::DssAlgorithm;

namespace {

constexpr layers::GssShape GssTiny{6, 8, 5, 4};

static_assert(core::TrainableBranch<layers::Gss<GssTiny, float, Kokkos::Serial>>);
static_assert(core::DecodableBranch<layers::Gss<GssTiny, double, Kokkos::Serial>>);
static_assert(core::require_trainable_branch<layers::Gss<GssTiny, float, Kokkos::Serial>>());
static_assert(core::require_decodable_branch<layers::Gss<GssTiny, float, Kokkos::Serial>>());
static_assert(layers::gss_shape(256).d_gate == 1024 && layers::gss_shape(256).d_ssm == 256 &&
              layers::gss_shape(256).d_state == 512);

/// max |a − b| / max |b|: the error relative to the tensor's scale.
double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return scale == 0 ? worst : worst / scale;
}

template <class View>
void fill_normal(const View& v, std::uint64_t stream, double std, double mean = 0) {
  const core::CounterRng rng(20240611, stream);
  std::vector<double> data(v.size());
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = mean + std * rng.normal(i);
  testing::from_vector(v, data);
}

/// The DSS parameters and an input u (batch b, length l, h channels, n modes), drawn from
/// streams first, first + 1, ...: decay rates exp(λre) from ~0.05 (long memory) to ~5,
/// frequencies exp(λim) around 1.
template <class T, class Space>
struct DssInputs {
  Tensor<T*, Space> lre, lim, d;
  Tensor<T**, Space> cre, cim;
  Tensor<T***, Space> u;
  DssInputs(int b, int l, int h, int n, std::uint64_t first)
      : lre("lre", n), lim("lim", n), d("d", h), cre("cre", h, n), cim("cim", h, n), u("u", b, l, h) {
    fill_normal(lre, first, 0.8, -0.5);
    fill_normal(lim, first + 1, 0.7);
    fill_normal(cre, first + 2, 1.0);
    fill_normal(cim, first + 3, 1.0);
    fill_normal(d, first + 4, 1.0);
    fill_normal(u, first + 5, 1.0);
  }
};

struct MixShape {
  int b, l, h, n;
  int kernel_chunk;  // rows per Vandermonde GEMM
  int scan_chunk;    // scan checkpoint interval (0: ⌈√L⌉)
};

std::string describe(const MixShape& s) {
  return "B=" + std::to_string(s.b) + " L=" + std::to_string(s.l) + " H=" + std::to_string(s.h) +
         " N=" + std::to_string(s.n) + " kernel_chunk=" + std::to_string(s.kernel_chunk) +
         " scan_chunk=" + std::to_string(s.scan_chunk);
}

/// Both algorithms, forward and backward, against the long-double oracle; T is the kernels'
/// scalar, `tol` the bound on the error relative to each tensor's scale.
template <class T, class Space>
void check_mixing(const MixShape& sh, double tol) {
  INFO(describe(sh) << " in " << (sizeof(T) == 8 ? "double" : "float"));
  using HostD1 = Kokkos::View<double*, Kokkos::HostSpace>;
  using HostD2 = Kokkos::View<double**, Kokkos::HostSpace>;
  using HostD3 = Kokkos::View<double***, Kokkos::HostSpace>;
  const Space exec{};
  // Parameters as the layer sees them, and the same values in double for the oracle.
  DssInputs<T, Space> in(sh.b, sh.l, sh.h, sh.n, 1);
  auto& [lre, lim, d, cre, cim, u] = in;
  Tensor<T***, Space> dy("dy", sh.b, sh.l, sh.h);
  fill_normal(dy, 7, 1.0);
  auto host = [](const auto& v, auto out) {
    testing::from_vector(out, testing::to_vector(v));
    return out;
  };
  const auto lre_h = host(lre, HostD1("lre", sh.n)), lim_h = host(lim, HostD1("lim", sh.n)),
             d_h = host(d, HostD1("d", sh.h));
  const auto cre_h = host(cre, HostD2("cre", sh.h, sh.n)), cim_h = host(cim, HostD2("cim", sh.h, sh.n));
  const auto u_h = host(u, HostD3("u", sh.b, sh.l, sh.h)), dy_h = host(dy, HostD3("dy", sh.b, sh.l, sh.h));

  HostD2 k_ref("k", sh.l, sh.h);
  HostD3 y_ref("y", sh.b, sh.l, sh.h), du_ref("du", sh.b, sh.l, sh.h);
  HostD1 glre_ref("glre", sh.n), glim_ref("glim", sh.n), gd_ref("gd", sh.h);
  HostD2 gcre_ref("gcre", sh.h, sh.n), gcim_ref("gcim", sh.h, sh.n);
  kernels::reference::dss_kernel(lre_h, lim_h, cre_h, cim_h, k_ref);
  kernels::reference::dss_forward(lre_h, lim_h, cre_h, cim_h, d_h, u_h, y_ref);
  kernels::reference::dss_backward(lre_h, lim_h, cre_h, cim_h, d_h, u_h, dy_h, du_ref, glre_ref, glim_ref, gcre_ref,
                                   gcim_ref, gd_ref);

  core::Workspace<Space> ws;
  const auto modes = kernels::allocate_dss_modes<T>(ws, sh.h, sh.n);
  kernels::dss_discretize<T>(exec, lre, lim, cre, cim, modes);

  for (const DssAlgorithm alg : {DssAlgorithm::fft, DssAlgorithm::scan}) {
    INFO("algorithm " << kernels::name_of(alg));
    const auto mark = ws.mark();
    Tensor<T***, Space> y("y", sh.b, sh.l, sh.h), du("du", sh.b, sh.l, sh.h);
    Tensor<T*, Space> glre("glre", sh.n), glim("glim", sh.n), gd("gd", sh.h);
    Tensor<T**, Space> gcre("gcre", sh.h, sh.n), gcim("gcim", sh.h, sh.n);
    const auto mg = kernels::allocate_dss_mode_grads<T>(ws, sh.h, sh.n);
    if (alg == DssAlgorithm::fft) {
      Tensor<T**, Space> k("k", sh.l, sh.h), dk("dk", sh.l, sh.h);
      kernels::dss_kernel_forward<T>(exec, ws, modes, k, sh.kernel_chunk);
      CHECK(relative_error(testing::to_vector(k), testing::to_vector(k_ref)) <= tol);
      kernels::dss_conv_fft_forward<T>(exec, ws, k, u, d, y);
      kernels::dss_conv_fft_backward<T>(exec, ws, k, u, d, dy, du, dk, gd);
      kernels::dss_kernel_backward<T>(exec, ws, modes, dk, mg, sh.kernel_chunk);
    } else {
      Tensor<T***, Space> s_re("s_re", sh.b, sh.h, sh.n), s_im("s_im", sh.b, sh.h, sh.n);
      kernels::dss_scan_forward<T>(exec, modes, d, u, y, s_re, s_im);
      kernels::dss_scan_backward<T>(exec, ws, modes, d, u, dy, du, mg, gd, sh.scan_chunk);
    }
    kernels::dss_discretize_backward<T>(exec, lre, lim, cre, cim, mg, glre, glim, gcre, gcim);
    const std::pair<const char*, double> errors[] = {
        {"y", relative_error(testing::to_vector(y), testing::to_vector(y_ref))},
        {"du", relative_error(testing::to_vector(du), testing::to_vector(du_ref))},
        {"g_lambda_re", relative_error(testing::to_vector(glre), testing::to_vector(glre_ref))},
        {"g_lambda_im", relative_error(testing::to_vector(glim), testing::to_vector(glim_ref))},
        {"g_c_re", relative_error(testing::to_vector(gcre), testing::to_vector(gcre_ref))},
        {"g_c_im", relative_error(testing::to_vector(gcim), testing::to_vector(gcim_ref))},
        {"g_d", relative_error(testing::to_vector(gd), testing::to_vector(gd_ref))},
    };
    for (const auto& [what, e] : errors) {
      INFO(what << ": relative error " << e);
      CHECK(e <= tol);
    }
    ws.release(mark);
  }
}

/// The convolution as batched real transforms (kernels/dss_batched_fft.hpp: cuFFT on Cuda, the
/// reference transform on host spaces) against the host algorithm (the lane FFT) on Serial,
/// forward and backward, for b sequences of length l over h channels.
template <class T, class Space>
void check_batched_conv(int b, int l, int h, double tol) {
  using Host = Kokkos::Serial;
  const auto draw = [&](auto v, std::uint64_t stream) {
    fill_normal(v, stream, 1.0);
    return v;
  };
  const auto k = draw(Tensor<T**, Space>("k", l, h), 1);
  const auto u = draw(Tensor<T***, Space>("u", b, l, h), 2);
  const auto dy = draw(Tensor<T***, Space>("dy", b, l, h), 3);
  const auto d = draw(Tensor<T*, Space>("d", h), 4);
  Tensor<T***, Space> y("y", b, l, h), du("du", b, l, h);
  Tensor<T**, Space> dk("dk", l, h);
  Tensor<T*, Space> dd("dd", h);
  core::Workspace<Space> ws;
  const Space exec{};
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Space::memory_space>::accessible) {
    const std::int64_t m = kernels::batched_fft::length(kernels::dss_fft_size(l));
    kernels::batched_fft::conv_forward<T, Space>(exec, ws, k, u, d, y, m);
    kernels::batched_fft::conv_backward<T, Space>(exec, ws, k, u, d, dy, du, dk, dd, m);
    CHECK(ws.peak_bytes() == std::max(kernels::batched_fft::conv_scratch<T, Space>(b, h, m, false),
                                      kernels::batched_fft::conv_scratch<T, Space>(b, h, m, true)));
  } else {
    kernels::dss_conv_fft_forward<T>(exec, ws, k, u, d, y);
    kernels::dss_conv_fft_backward<T>(exec, ws, k, u, d, dy, du, dk, dd);
  }
  exec.fence();

  const auto host = [](const auto& v, auto out) {
    testing::from_vector(out, testing::to_vector(v));
    return out;
  };
  const auto k_h = host(k, Tensor<T**, Host>("k", l, h));
  const auto d_h = host(d, Tensor<T*, Host>("d", h));
  const auto u_h = host(u, Tensor<T***, Host>("u", b, l, h));
  const auto dy_h = host(dy, Tensor<T***, Host>("dy", b, l, h));
  Tensor<T***, Host> y_ref("y", b, l, h), du_ref("du", b, l, h);
  Tensor<T**, Host> dk_ref("dk", l, h);
  Tensor<T*, Host> dd_ref("dd", h);
  core::Workspace<Host> host_ws;
  kernels::dss_conv_fft_forward<T>(Host{}, host_ws, k_h, u_h, d_h, y_ref);
  kernels::dss_conv_fft_backward<T>(Host{}, host_ws, k_h, u_h, d_h, dy_h, du_ref, dk_ref, dd_ref);
  INFO("B=" << b << " L=" << l << " H=" << h);
  CHECK(relative_error(testing::to_vector(y), testing::to_vector(y_ref)) <= tol);
  CHECK(relative_error(testing::to_vector(du), testing::to_vector(du_ref)) <= tol);
  CHECK(relative_error(testing::to_vector(dk), testing::to_vector(dk_ref)) <= tol);
  CHECK(relative_error(testing::to_vector(dd), testing::to_vector(dd_ref)) <= tol);
}

/// x[:, t0:t1, :] as a contiguous tensor.
template <class View>
View time_slice(const View& x, int t0, int t1) {
  View out("slice", x.extent(0), t1 - t0, x.extent(2));
  Kokkos::deep_copy(out, Kokkos::subview(x, Kokkos::ALL, std::make_pair(t0, t1), Kokkos::ALL));
  return out;
}

/// dst[:, t0:t0+T, :] = src.
template <class View>
void put_time_slice(const View& dst, const View& src, int t0) {
  Kokkos::deep_copy(Kokkos::subview(dst, Kokkos::ALL, std::make_pair(t0, t0 + int(src.extent(1))), Kokkos::ALL), src);
}

}  // namespace

// ---- the mixing kernels ------------------------------------------------------------------

HYBRIDSEQ_SPACE_TEST_CASE("gss: DSS mixing (fft and scan) matches the naive oracle in double", "[gss][kernels]") {
  // FFT sizes M = 1, 8, 16, 64, 128, 256, 512, 8192 (radix-2 stage when log2 M is odd); H against
  // the 8-channel FFT groups (partial a-lanes, partial b-lanes, several groups); N against the
  // 8-lane mode loop and the 32-mode Vandermonde blocks.
  const MixShape shapes[] = {
      {1, 1, 3, 4, 256, 0},     // a single step: M = 1, one scan chunk of 1
      {2, 3, 17, 5, 2, 2},      // M = 8; 3 channel groups, the last with one channel
      {2, 7, 5, 4, 256, 0},     // the layer tests' shape, M = 16
      {2, 17, 3, 6, 5, 4},      // M = 64; Vandermonde chunks 5,5,5,2; scan chunks 4,4,4,4,1
      {3, 40, 2, 9, 40, 40},    // M = 128; one chunk exactly L long
      {1, 67, 4, 20, 16, 0},    // M = 256; N = 20: two 8-lane mode blocks and a tail; scan chunks of 9
      {1, 130, 12, 40, 64, 0},  // M = 512; N = 40: two Vandermonde blocks
      {1, 2100, 9, 6, 256, 0},  // M = 8192 (radix-2 + six radix-4 stages), 9 Vandermonde chunks
  };
  for (const auto& s : shapes) check_mixing<double, TestType>(s, 1e-12);
}

HYBRIDSEQ_SPACE_TEST_CASE("gss: the batched-FFT convolution (the device algorithm) equals the host one",
                          "[gss][kernels][batched_fft]") {
  // L = 1 (the transform's length-2 floor), 3, 40, 130 (M = 2, 8, 128, 512); several batches
  // and odd channel counts, so rows mod H and the sum over sequences are exercised.
  for (const auto& [b, l, h] :
       {std::array{1, 1, 3}, std::array{2, 3, 5}, std::array{3, 40, 7}, std::array{2, 130, 9}}) {
    check_batched_conv<double, TestType>(b, l, h, 1e-12);
    check_batched_conv<float, TestType>(b, l, h, 2e-6);
  }
}

HYBRIDSEQ_SPACE_TEST_CASE("gss: DSS mixing in float stays close to the oracle at L = 500", "[gss][kernels]") {
  // Float rounding in the FFT (≈ 1e-7·log M relative to the signal) and in the recurrence
  // over 500 steps; the bound is that of the goldens' rtol.
  check_mixing<float, TestType>({2, 500, 3, 16, 128, 0}, 2e-5);
}

HYBRIDSEQ_SPACE_TEST_CASE("gss: state carried across calls (scan, and FFT prefill)", "[gss][kernels]") {
  // Scans over [0, 6) then [6, 13) from the carried state do exactly the arithmetic of one
  // scan over [0, 13): outputs and final state are bit-identical.
  using T = double;
  const TestType exec{};
  const int b = 2, l = 13, h = 3, n = 11;
  DssInputs<T, TestType> in(b, l, h, n, 11);
  auto& [lre, lim, d, cre, cim, u] = in;
  Tensor<T***, TestType> y("y", b, l, h), y_split("y_split", b, l, h);
  core::Workspace<TestType> ws;
  const auto modes = kernels::allocate_dss_modes<T>(ws, h, n);
  kernels::dss_discretize<T>(exec, lre, lim, cre, cim, modes);
  Tensor<T***, TestType> sr("sr", b, h, n), si("si", b, h, n), sr2("sr2", b, h, n), si2("si2", b, h, n);
  kernels::dss_scan_forward<T>(exec, modes, d, u, y, sr, si);
  for (const auto& [t0, t1] : {std::pair{0, 6}, std::pair{6, 13}}) {
    const auto part = time_slice(u, t0, t1);
    Tensor<T***, TestType> out("out", b, t1 - t0, h);
    kernels::dss_scan_forward<T>(exec, modes, d, part, out, sr2, si2);
    put_time_slice(y_split, out, t0);
  }
  exec.fence();
  CHECK(testing::to_vector(y_split) == testing::to_vector(y));
  CHECK(testing::to_vector(sr2) == testing::to_vector(sr));
  CHECK(testing::to_vector(si2) == testing::to_vector(si));

  // The FFT prefill of the second part from the carried state: convolution + readout of the
  // state, then the state advanced by GEMMs; against the scan from the same state.
  const auto part = time_slice(u, 6, 13);
  Tensor<T***, TestType> s0r("s0r", b, h, n), s0i("s0i", b, h, n), y_scan("y_scan", b, 7, h), y_fft("y_fft", b, 7, h);
  fill_normal(s0r, 17, 1.0);
  fill_normal(s0i, 18, 1.0);
  Tensor<T***, TestType> s1r("s1r", b, h, n), s1i("s1i", b, h, n);
  Kokkos::deep_copy(s1r, s0r);
  Kokkos::deep_copy(s1i, s0i);
  kernels::dss_scan_forward<T>(exec, modes, d, part, y_scan, s0r, s0i);
  Tensor<T**, TestType> k("k", 7, h);
  kernels::dss_kernel_forward<T>(exec, ws, modes, k, 3);
  kernels::dss_conv_fft_forward<T>(exec, ws, k, part, d, y_fft);
  kernels::dss_state_readout<T>(exec, ws, modes, s1r, s1i, y_fft, 3);
  kernels::dss_state_advance<T>(exec, ws, modes, part, s1r, s1i, 3);
  CHECK(relative_error(testing::to_vector(y_fft), testing::to_vector(y_scan)) <= 1e-12);
  CHECK(relative_error(testing::to_vector(s1r), testing::to_vector(s0r)) <= 1e-12);
  CHECK(relative_error(testing::to_vector(s1i), testing::to_vector(s0i)) <= 1e-12);
}

TEST_CASE("gss: FFT sizes are the smallest powers of two covering 2L - 1", "[gss][host]") {
  for (std::int64_t l : {1, 2, 3, 7, 17, 100, 1000, 2049, 4096, 8192}) {
    const std::int64_t m = kernels::dss_fft_size(l);
    INFO("L = " << l << ", M = " << m);
    CHECK(m >= 2 * l - 1);
    CHECK((m & (m - 1)) == 0);
    CHECK((m == 1 || m / 2 < 2 * l - 1));
  }
  CHECK(kernels::dss_fft_size(1) == 1);
  CHECK(kernels::dss_fft_size(8192) == 16384);
}

// ---- the branch through the testbed -----------------------------------------------------

HYBRIDSEQ_SPACE_TEST_CASE("gss: finite-difference gradients in double", "[gss][gradcheck]") {
  testing::for_each_case(cases::GssCases{}, [&]<class Case>() { testing::check_gradients<Case, TestType>(1e-6); });
}

HYBRIDSEQ_SPACE_TEST_CASE("gss: PyTorch goldens in float", "[gss][golden]") {
  // |c − g| ≤ 1e-5 + 1e-5·|g|. The primitive layers' atol of 1e-6 assumes tensors of scale
  // ~1; the GSS goldens' gradients reach 15–25 (five chained products, sums over B·T rows),
  // where one float ulp is already ~2e-6, so near-zero entries that are differences of such
  // terms carry a few e-6 of rounding in any float implementation (the double gradient
  // check and the 1e-15 kernel-vs-oracle match are what bound the implementation error).
  testing::for_each_case(cases::GssCases{}, [&]<class Case>() { testing::check_golden<Case, TestType>(1e-5, 1e-5); });
}

HYBRIDSEQ_SPACE_TEST_CASE("gss: save/load round trip", "[gss][io]") {
  testing::for_each_case(cases::GssCases{}, [&]<class Case>() { testing::check_round_trip<Case, TestType>(); });
}

// ---- decoding ----------------------------------------------------------------------------

HYBRIDSEQ_SPACE_TEST_CASE("gss: prefill + steps reproduce forward; snapshots restore", "[gss][decode]") {
  using T = double;
  using L = layers::Gss<GssTiny, T, TestType>;
  const int b = 2, t = 9;
  for (const DssAlgorithm alg : {DssAlgorithm::fft, DssAlgorithm::scan}) {
    INFO("forward uses " << kernels::name_of(alg));
    typename L::Options o;
    o.mixing = alg;
    L layer(o);
    core::initialize(layer, 5);
    core::Workspace<TestType> ws;
    Tensor<T***, TestType> x("x", b, t, 6), y_full("y_full", b, t, 6);
    fill_normal(x, 21, 1.0);
    {
      typename L::Saved saved;
      layer.forward(ws, x, y_full, saved);
      ws.release({});
    }
    const auto full = testing::to_vector(y_full);
    for (const int k : {0, 1, 4, t}) {
      INFO("prefill " << k << " tokens, then " << t - k << " steps");
      auto state = layer.make_state(b);
      Tensor<T***, TestType> y("y", b, t, 6);
      const auto prompt = time_slice(x, 0, k);
      Tensor<T***, TestType> y_prompt("y_prompt", b, k, 6);
      layer.prefill(ws, state, prompt, y_prompt);
      put_time_slice(y, y_prompt, 0);
      for (int i = k; i < t; ++i) {
        Tensor<T***, TestType> yi("yi", b, 1, 6);
        layer.step(ws, state, time_slice(x, i, i + 1), yi);
        put_time_slice(y, yi, i);
      }
      CHECK(state.position == t);
      CHECK(relative_error(testing::to_vector(y), full) <= 1e-12);
      CHECK(ws.bytes_in_use() == 0);  // decoding keeps nothing in the arena
    }
    // A prompt in two prefills (the second starts from a non-zero state).
    {
      auto state = layer.make_state(b);
      Tensor<T***, TestType> y("y", b, t, 6), y1("y1", b, 3, 6), y2("y2", b, t - 3, 6);
      layer.prefill(ws, state, time_slice(x, 0, 3), y1);
      layer.prefill(ws, state, time_slice(x, 3, t), y2);
      put_time_slice(y, y1, 0);
      put_time_slice(y, y2, 3);
      CHECK(relative_error(testing::to_vector(y), full) <= 1e-12);
    }
    // Snapshot after 4 tokens; stepping on, restoring and stepping again gives identical outputs.
    {
      auto state = layer.make_state(b);
      Tensor<T***, TestType> y4("y4", b, 4, 6);
      layer.prefill(ws, state, time_slice(x, 0, 4), y4);
      const auto snap = layer.snapshot(state);
      auto run = [&] {
        std::vector<double> out;
        for (int i = 4; i < t; ++i) {
          Tensor<T***, TestType> yi("yi", b, 1, 6);
          layer.step(ws, state, time_slice(x, i, i + 1), yi);
          const auto v = testing::to_vector(yi);
          out.insert(out.end(), v.begin(), v.end());
        }
        return out;
      };
      const auto first = run();
      CHECK(state.position == t);
      layer.restore(state, snap);
      CHECK(state.position == 4);
      const auto second = run();
      CHECK(first == second);
      CHECK(snap.position == 4);  // the snapshot is independent of the state it came from
    }
  }
}

// ---- bad input ---------------------------------------------------------------------------

TEST_CASE("gss: wrong shapes are refused with the API name and extents", "[gss][errors][host]") {
  using S = Kokkos::Serial;
  using L = layers::Gss<GssTiny, float, S>;
  core::Workspace<S> ws;
  L layer;
  typename L::Saved saved;
  Tensor<float***, S> x_bad("x", 2, 3, 7), y("y", 2, 3, 6), x("x", 2, 3, 6), y_bad("y", 2, 4, 6);
  REQUIRE_THROWS_AS(layer.forward(ws, x_bad, y, saved), shape_error);
  REQUIRE_THROWS_WITH(layer.forward(ws, x_bad, y, saved),
                      "hybridseq::layers::Gss::forward: x is (2,3,7), expected (B,T,6)");
  REQUIRE_THROWS_WITH(layer.forward(ws, x, y_bad, saved),
                      "hybridseq::layers::Gss::forward: y is (2,4,6), expected (2,3,6)");
  layer.forward(ws, x, y, saved);
  Tensor<float***, S> dx("dx", 2, 3, 6), dy_bad("dy", 2, 3, 5);
  REQUIRE_THROWS_WITH(layer.backward(ws, saved, dy_bad, dx),
                      "hybridseq::layers::Gss::backward: dy is (2,3,5), expected (2,3,6)");

  auto state = layer.make_state(2);
  Tensor<float***, S> x2("x", 2, 2, 6), y2("y", 2, 2, 6), x3("x", 3, 1, 6), y1("y", 2, 1, 6);
  REQUIRE_THROWS_AS(layer.step(ws, state, x2, y2), shape_error);
  REQUIRE_THROWS_WITH(layer.step(ws, state, x2, y2), "hybridseq::layers::Gss::step: x is (2,2,6), expected (2,1,6)");
  REQUIRE_THROWS_WITH(layer.step(ws, state, x3, y1), "hybridseq::layers::Gss::step: x is (3,1,6), expected (2,1,6)");
  REQUIRE_THROWS_WITH(layer.prefill(ws, state, x_bad, y),
                      "hybridseq::layers::Gss::prefill: x is (2,3,7), expected (2,T,6)");
  REQUIRE_THROWS_WITH(layer.prefill(ws, state, x, y_bad),
                      "hybridseq::layers::Gss::prefill: y is (2,4,6), expected (2,3,6)");
  auto other = layer.make_state(3);
  REQUIRE_THROWS_AS(layer.restore(state, other), shape_error);
  REQUIRE_THROWS_WITH(layer.restore(state, other),
                      "hybridseq::layers::Gss::restore: state has batch 2 but the snapshot has 3");
  REQUIRE_THROWS_AS(layer.make_state(-1), value_error);
  REQUIRE(state.position == 0);  // refused calls leave the state alone

  typename L::Options bad_chunk;
  bad_chunk.kernel_chunk = 0;
  REQUIRE_THROWS_WITH(L(bad_chunk), "hybridseq::layers::Gss::Gss: kernel_chunk is 0, must be > 0");
}

TEST_CASE("gss: the mixing kernels refuse mismatched tensors", "[gss][errors][host]") {
  using S = Kokkos::Serial;
  core::Workspace<S> ws;
  const S exec{};
  Tensor<float**, S> k_bad("k", 5, 3), dk("dk", 7, 3);
  Tensor<float***, S> u("u", 2, 7, 3), y("y", 2, 7, 3), du("du", 2, 7, 3);
  Tensor<float*, S> d("d", 3), d_bad("d", 4);
  REQUIRE_THROWS_AS(kernels::dss_conv_fft_forward<float>(exec, ws, k_bad, u, d, y), shape_error);
  REQUIRE_THROWS_WITH(kernels::dss_conv_fft_forward<float>(exec, ws, k_bad, u, d, y),
                      "hybridseq::kernels::dss_conv_fft_forward: k is (5,3), expected (7,3)");
  REQUIRE_THROWS_WITH(kernels::dss_conv_fft_backward<float>(exec, ws, dk, u, d_bad, y, du, dk, d),
                      "hybridseq::kernels::dss_conv_fft_backward: d is (4), expected (3)");
  const auto modes = kernels::allocate_dss_modes<float>(ws, 3, 4);
  Tensor<float***, S> s_re("s", 2, 3, 5), s_im("s", 2, 3, 4);
  REQUIRE_THROWS_WITH(kernels::dss_scan_forward<float>(exec, modes, d, u, y, s_re, s_im),
                      "hybridseq::kernels::dss_scan_forward: s_re is (2,3,5), expected (2,3,4)");
}
