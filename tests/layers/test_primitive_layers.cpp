// Every primitive layer through the testbed: double-precision gradient check, PyTorch
// golden comparison in float, save/load round trip. Cases live in tests/cases. Also the
// accuracy of the float GELU against libm.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <hybridseq/kernels/activations.hpp>
#include <hybridseq/kernels/attention/tiled_attention.hpp>
#include <hybridseq/kernels/cross_entropy.hpp>
#include <hybridseq/kernels/norms.hpp>
#include <hybridseq/kernels/sampling.hpp>
#include <hybridseq/train/adamw.hpp>

#include "cases/primitive_cases.hpp"
#include "support/isa.hpp"
#include "support/spaces.hpp"
#include "support/testbed.hpp"

using namespace hybridseq;

HYBRIDSEQ_SPACE_TEST_CASE("primitive layers: finite-difference gradients in double", "[layers][gradcheck]") {
  testing::for_each_case(cases::PrimitiveCases{},
                         [&]<class Case>() { testing::check_gradients<Case, TestType>(1e-6); });
}

HYBRIDSEQ_SPACE_TEST_CASE("benchmark configurations: finite-difference gradients in double", "[layers][gradcheck]") {
  testing::for_each_case(cases::BenchCases{}, [&]<class Case>() { testing::check_gradients<Case, TestType>(1e-6); });
}

HYBRIDSEQ_SPACE_TEST_CASE("primitive layers: PyTorch goldens in float", "[layers][golden]") {
  testing::for_each_golden_case(cases::PrimitiveCases{},
                                [&]<class Case>() { testing::check_golden<Case, TestType>(); });
}

HYBRIDSEQ_SPACE_TEST_CASE("primitive layers: save/load round trip", "[layers][io]") {
  testing::for_each_case(cases::PrimitiveCases{}, [&]<class Case>() { testing::check_round_trip<Case, TestType>(); });
}

TEST_CASE("float GELU: the branch-free normal CDF and GELU' match libm in double", "[layers][host]") {
  using Gelu = kernels::ActivationFn<kernels::Activation::gelu>;
  const auto phi = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  const auto ulp_of = [](double exact) {
    const float e = static_cast<float>(exact);
    return double(std::nextafter(e, std::numeric_limits<float>::infinity())) - double(e);
  };
  // x < 0: relative error in ulps of Φ, down to Φ ~ 1e-38 where floats go subnormal; it
  // grows like x² (the float rounding of x²/2 inside the exponent), so the bound is 8 + 2x²
  // ulp (measured: 17 at x = −2.9, 57 at −5.8, 279 at −12.6). x ≥ 0: Φ ∈ [½, 1], absolute.
  double tail_excess = -1e30, tail_ulps = 0, body_abs = 0, gelu_abs = 0, grad_abs = 0, grad_given_abs = 0;
  for (double x = -13.0; x <= 13.0; x += 1.0 / 4096) {
    const float xf = static_cast<float>(x);
    const double want = phi(double(xf)), got = kernels::normal_cdf_polynomial(xf);
    if (xf < 0) {
      const double ulps = std::abs(got - want) / ulp_of(want);
      tail_ulps = std::max(tail_ulps, ulps);
      tail_excess = std::max(tail_excess, ulps - (8 + 2 * double(xf) * xf));
    } else
      body_abs = std::max(body_abs, std::abs(got - want));
    gelu_abs = std::max(gelu_abs, std::abs(double(Gelu::value(xf)) - Gelu::value(double(xf))) /
                                      std::max(1.0, std::abs(Gelu::value(double(xf)))));
    grad_abs = std::max(grad_abs, std::abs(double(Gelu::derivative(xf)) - Gelu::derivative(double(xf))));
    // GELU' from x and the float GELU(x) a layer kept (Φ = GELU(x) / x).
    grad_given_abs = std::max(grad_given_abs,
                              std::abs(double(Gelu::derivative(xf, Gelu::value(xf))) - Gelu::derivative(double(xf))));
  }
  INFO("tail " << tail_ulps << " ulp, body " << body_abs << ", gelu " << gelu_abs << ", gelu' " << grad_abs
               << ", gelu' given gelu " << grad_given_abs);
  CHECK(tail_excess <= 0);
  CHECK(body_abs <= 2.5e-7);
  CHECK(gelu_abs <= 2.5e-7);
  CHECK(grad_abs <= 1e-6);
  CHECK(grad_given_abs <= 1e-6);
  // Near 0: ½ + x·φ(0) to float precision. At ±0 GELU(x) / x is 0 / 0, and for subnormal x
  // GELU(x) = x·½ rounds (at the smallest, to 0): only the guard below 2⁻⁶⁰ gives ½ there.
  for (const float x : {0.0f, -0.0f, std::numeric_limits<float>::denorm_min(), -1e-40f, 1e-30f, -1e-30f, 0x1p-61f,
                        1e-12f, -1e-12f, 1e-7f})
    CHECK(double(Gelu::derivative(x, Gelu::value(x))) == Approx(Gelu::derivative(double(x))).margin(2e-7));
  CHECK(Gelu::derivative(-30.0f, Gelu::value(-30.0f)) == 0.0f);
  CHECK(Gelu::derivative(30.0f, Gelu::value(30.0f)) == 1.0f);
  CHECK(std::isnan(Gelu::derivative(std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::quiet_NaN())));
  testing::report("normal_cdf_tail_max_ulp", "gelu", "host", tail_ulps);
  testing::report("normal_cdf_body_max_abs", "gelu", "host", body_abs);
  CHECK(kernels::normal_cdf_polynomial(0.0f) == Approx(0.5).epsilon(1e-7));
  CHECK(kernels::normal_cdf_polynomial(-30.0f) == 0.0f);
  CHECK(kernels::normal_cdf_polynomial(30.0f) == 1.0f);
  CHECK(kernels::normal_cdf_polynomial(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(kernels::normal_cdf_polynomial(std::numeric_limits<float>::infinity()) == 1.0f);
  CHECK(std::isnan(kernels::normal_cdf_polynomial(std::numeric_limits<float>::quiet_NaN())));
}

HYBRIDSEQ_SPACE_TEST_CASE("column reductions: the per-column device path equals the per-block host path",
                          "[layers][kernels]") {
  // reduce_column_blocks runs f(block) on host spaces and f.part(block, j) on devices: each
  // partial sums the same terms in the same order. Both paths run here, on any space, against
  // each other (to float rounding: a compiler may contract the two loops differently), with
  // 200 rows = 3 full blocks of 64 and a partial one, and 5000 rows = the 64 blocks of 79 rows
  // (the last 23) that the fixed-size partials allow; then the bias gradient's whole reduction
  // against a plain sum.
  using Space = TestType;
  using namespace kernels::detail;
  const std::int64_t rows = GENERATE(200, 5000), cols = 37, blocks = kernels::column_blocks(rows);
  CHECK(blocks == (rows == 200 ? 4 : kernels::max_column_blocks));
  Tensor<float**, Space> x("x", rows, cols), dy("dy", rows, cols);
  Tensor<float*, Space> mean("mean", rows), rstd("rstd", rows);
  core::fill(Space{}, core::flat(x), core::Init::normal(1.0), 5, 1);
  core::fill(Space{}, core::flat(dy), core::Init::normal(1.0), 5, 2);
  core::fill(Space{}, mean, core::Init::normal(0.3), 5, 3);
  core::fill(Space{}, rstd, core::Init::uniform(0.5, 2.0), 5, 4);
  const auto both = [&](auto make, auto... partials) {
    // make(p...) builds the functor writing into partials p...: once per path.
    std::vector<std::vector<double>> by_block, by_column;
    Kokkos::parallel_for(Kokkos::RangePolicy<Space>(0, blocks), make(partials.first...));
    Kokkos::parallel_for(Kokkos::RangePolicy<Space>(0, blocks * cols),
                         EachPart<decltype(make(partials.second...))>{make(partials.second...), cols});
    Space().fence();
    for (const auto& p : {partials...}) {
      const auto a = testing::to_vector(p.first), b = testing::to_vector(p.second);
      REQUIRE(a.size() == std::size_t(blocks * cols));
      for (std::size_t i = 0; i < a.size(); ++i) CHECK(b[i] == Approx(a[i]).epsilon(1e-5).margin(1e-5));
    }
  };
  const auto pair = [&] {
    return std::pair{Tensor<float**, Space>("p", blocks, cols), Tensor<float**, Space>("q", blocks, cols)};
  };
  both([&](auto p) { return BlockColumnSums<float, Space>{dy, p}; }, pair());
  both([&](auto p) { return RmsNormBackwardWeight<float, Space>{x, dy, rstd, p}; }, pair());
  both([&](auto w, auto b) { return LayerNormBackwardParams<float, Space>{x, dy, mean, rstd, w, b}; }, pair(), pair());

  // The whole reduction (partials, then their fixed-order combine) against a plain sum in
  // double: the blocks cover every row once, whatever their size.
  Tensor<float*, Space> sums("sums", cols);
  core::fill(sums, 0.5f);
  kernels::accumulate_column_sums<float>(Space{}, dy, sums, kernels::column_partials<float, Space>("partials", cols));
  const auto d = testing::to_vector(dy), got = testing::to_vector(sums);
  for (std::int64_t j = 0; j < cols; ++j) {
    double plain = 0.5;
    for (std::int64_t r = 0; r < rows; ++r) plain += d[r * cols + j];
    CHECK(got[j] == Approx(plain).epsilon(1e-5).margin(1e-4));
  }
}

namespace {
/// A norm kernel's inputs, (rows, d): x and dy standard normal, w uniform in [0.5, 1.5), b
/// normal with σ 0.2, drawn from `seed`.
template <class Space>
struct NormInputs {
  Tensor<float**, Space> x, dy;
  Tensor<float*, Space> w, b;
  NormInputs(std::int64_t rows, std::int64_t d, std::uint64_t seed)
      : x("x", rows, d), dy("dy", rows, d), w("w", d), b("b", d) {
    core::fill(Space{}, core::flat(x), core::Init::normal(1.0), seed, 1);
    core::fill(Space{}, core::flat(dy), core::Init::normal(1.0), seed, 2);
    core::fill(Space{}, w, core::Init::uniform(0.5, 1.5), seed, 3);
    core::fill(Space{}, b, core::Init::normal(0.2), seed, 4);
  }
};
}  // namespace

HYBRIDSEQ_SPACE_TEST_CASE("norm kernels: LayerNorm and RMSNorm rows against a double oracle", "[layers][kernels]") {
  // Widths that are whole multiples of 16 take the host's vector loops (their sums folded in
  // registers), 40 the scalar rows; every ISA copy this machine has runs (testing::for_each_isa).
  // The layer cases' width of 6 never reaches the vector loops. dx starts nonzero: backward
  // adds to it; dw and db start from zero each time.
  using Space = TestType;
  const std::int64_t rows = 37, d = GENERATE(16, 40, 48, 128);
  const NormInputs<Space> in(rows, d, 7);
  const auto &x = in.x, &dy = in.dy;
  const auto &w = in.w, &b = in.b;
  Tensor<float**, Space> y("y", rows, d), dx("dx", rows, d);
  Tensor<float*, Space> mean("mean", rows), rstd("rstd", rows), dw("dw", d), db("db", d);
  const auto hx = testing::to_vector(x), hdy = testing::to_vector(dy);
  const auto hw = testing::to_vector(w), hb = testing::to_vector(b);
  const float eps = 1e-5f;
  const auto close = [](double got, double want) { CHECK(got == Approx(want).epsilon(2e-5).margin(2e-5)); };
  const auto restart = [&] {
    core::fill(Space{}, core::flat(dx), core::Init::normal(1.0), 7, 5);  // NormInputs takes streams 1-4
    Kokkos::deep_copy(dw, 0.0f);
    Kokkos::deep_copy(db, 0.0f);
    return testing::to_vector(dx);
  };

  const auto layer_norm = [&] {
    const auto hdx0 = restart();
    kernels::layernorm_forward<float>(Space{}, x, w, b, eps, y, mean, rstd);
    kernels::layernorm_backward<float>(Space{}, x, w, mean, rstd, dy, dx, dw, db,
                                       kernels::column_partials<float, Space>("pw", d),
                                       kernels::column_partials<float, Space>("pb", d));
    const auto hy = testing::to_vector(y), hdx = testing::to_vector(dx), hmean = testing::to_vector(mean);
    const auto hrstd = testing::to_vector(rstd), hdw = testing::to_vector(dw), hdb = testing::to_vector(db);
    std::vector<double> want_dw(d), want_db(d);
    for (std::int64_t r = 0; r < rows; ++r) {
      double mu = 0, var = 0, g = 0, gx = 0;
      for (std::int64_t j = 0; j < d; ++j) mu += hx[r * d + j] / double(d);
      for (std::int64_t j = 0; j < d; ++j) var += (hx[r * d + j] - mu) * (hx[r * d + j] - mu) / double(d);
      const double s = 1 / std::sqrt(var + eps);
      close(hmean[r], mu);
      close(hrstd[r], s);
      for (std::int64_t j = 0; j < d; ++j) {
        const double xhat = (hx[r * d + j] - mu) * s;
        close(hy[r * d + j], xhat * hw[j] + hb[j]);
        g += hw[j] * hdy[r * d + j] / double(d);
        gx += hw[j] * hdy[r * d + j] * xhat / double(d);
        want_dw[j] += hdy[r * d + j] * xhat;
        want_db[j] += hdy[r * d + j];
      }
      for (std::int64_t j = 0; j < d; ++j) {
        const double xhat = (hx[r * d + j] - mu) * s;
        close(hdx[r * d + j], hdx0[r * d + j] + s * (hw[j] * hdy[r * d + j] - g - xhat * gx));
      }
    }
    for (std::int64_t j = 0; j < d; ++j) {
      CHECK(hdw[j] == Approx(want_dw[j]).epsilon(1e-5).margin(1e-4));
      CHECK(hdb[j] == Approx(want_db[j]).epsilon(1e-5).margin(1e-4));
    }
  };
  const auto rms_norm = [&] {
    const auto hdx0 = restart();
    kernels::rmsnorm_forward<float>(Space{}, x, w, eps, y, rstd);
    kernels::rmsnorm_backward<float>(Space{}, x, w, rstd, dy, dx, dw, kernels::column_partials<float, Space>("p", d));
    const auto hy = testing::to_vector(y), hdx = testing::to_vector(dx), hrstd = testing::to_vector(rstd);
    const auto hdw = testing::to_vector(dw);
    std::vector<double> want_dw(d);
    for (std::int64_t r = 0; r < rows; ++r) {
      double ss = 0, dot = 0;
      for (std::int64_t j = 0; j < d; ++j) ss += hx[r * d + j] * hx[r * d + j] / double(d);
      const double s = 1 / std::sqrt(ss + eps);
      close(hrstd[r], s);
      for (std::int64_t j = 0; j < d; ++j) {
        close(hy[r * d + j], hx[r * d + j] * s * hw[j]);
        dot += hw[j] * hdy[r * d + j] * hx[r * d + j];
        want_dw[j] += hdy[r * d + j] * hx[r * d + j] * s;
      }
      for (std::int64_t j = 0; j < d; ++j)
        close(hdx[r * d + j],
              hdx0[r * d + j] + s * hw[j] * hdy[r * d + j] - s * s * s * dot / double(d) * hx[r * d + j]);
    }
    for (std::int64_t j = 0; j < d; ++j) CHECK(hdw[j] == Approx(want_dw[j]).epsilon(1e-5).margin(1e-4));
  };
  testing::for_each_isa([&] {
    INFO("d = " << d << ", ISA copies up to " << kernels::isa_name(kernels::host_isa()));
    layer_norm();
    rms_norm();
  });
}

#if HYBRIDSEQ_ISA_DISPATCH
namespace {
// A kernel's scalar operator() alone, so that elementwise_loop_avx512 / _avx2 compile it for
// their ISA (the copy the compiler makes of the definition) instead of inlining its vector_loop.
template <class F>
struct ScalarRows {
  F f;
  void operator()(const std::int64_t i) const { f(i); }
};
}  // namespace

TEST_CASE("norm kernels: the host's vector loops give the compiler's bits of the scalar rows", "[layers][host]") {
  // What the vector loops promise (under GCC's default contraction): operator()'s terms in its
  // order, so the same bits as the compiler's vector copy of operator() for the same ISA.
  // LayerNorm's backward row is left out: compiled here, behind this wrapper, the compiler
  // contracts its products into FMAs otherwise than in the library's own loop (a scratch
  // program found that copy and the vector loop bit-identical), and the row's cancellation
  // turns that into hundreds of ulps; the double-oracle test above holds it.
  using Space = Kokkos::DefaultHostExecutionSpace;
  namespace kd = kernels::detail;
  static_assert(kernels::HostVectorLoop<kd::LayerNormForward<float, Space>>);
  static_assert(kernels::HostVectorLoop<kd::LayerNormBackwardInput<float, Space>>);
  static_assert(kernels::HostVectorLoop<kd::RmsNormForward<float, Space>>);
  static_assert(kernels::HostVectorLoop<kd::RmsNormBackwardInput<float, Space>>);
  // The other kernels with loops of their own, whose loops only speed would miss; double never
  // takes one.
  static_assert(kernels::HostVectorLoop<kernels::attention::detail::Delta<float, Space>>);
  static_assert(kernels::HostVectorLoop<train::detail::AdamWUpdate<float, Space>>);
  static_assert(!kernels::HostVectorLoop<kd::LayerNormForward<double, Space>>);
  static_assert(!kernels::HostVectorLoop<train::detail::AdamWUpdate<double, Space>>);
  const std::int64_t rows = 29, d = GENERATE(16, 128);
  const NormInputs<Space> in(rows, d, 9);
  const auto &x = in.x, &dy = in.dy;
  const auto &w = in.w, &b = in.b;
  Tensor<float**, Space> y1("y1", rows, d), y2("y2", rows, d);
  using Row = Tensor<float*, Space>;
  Row mean("mean", rows), rstd("rstd", rows);
  kernels::layernorm_forward<float>(Space{}, x, w, b, 1e-5f, y1, mean, rstd);  // the saved statistics
  Space().fence();
  // Each run's own row statistics, which the forward kernels write beside y.
  struct Stats {
    Row mean, rstd;
  };
  const Stats stats1{Row("mean1", rows), Row("rstd1", rows)}, stats2{Row("mean2", rows), Row("rstd2", rows)};
  // The largest distance in ulps between the two outputs (0: the same bits).
  const auto ulps_apart = [&](const auto& a, const auto& c) {
    REQUIRE(a.span() == c.span());
    std::int64_t most = 0;
    for (std::size_t i = 0; i < a.span(); ++i) {
      std::int32_t ia, ic;
      std::memcpy(&ia, a.data() + i, sizeof ia);
      std::memcpy(&ic, c.data() + i, sizeof ic);
      const bool same_sign = (ia < 0) == (ic < 0);
      most = std::max(most, same_sign ? std::abs(std::int64_t(ia) - ic) : std::int64_t(1) << 31);
    }
    return most;
  };
  // Runs the kernel that make(y, stats) builds once through its own loop and once as scalar
  // rows, on one ISA copy, and compares everything it writes.
  const auto both = [&](const char* kernel, auto make, auto run) {
    INFO(kernel);
    for (const auto& v : {y1, y2}) Kokkos::deep_copy(v, 0.25f);  // backward adds to dx: both start equal
    for (const auto& v : {stats1.mean, stats1.rstd, stats2.mean, stats2.rstd}) Kokkos::deep_copy(v, 0.25f);
    run(make(y1, stats1), ScalarRows<decltype(make(y2, stats2))>{make(y2, stats2)});
    CHECK(ulps_apart(y1, y2) == 0);
    CHECK(ulps_apart(stats1.mean, stats2.mean) == 0);
    CHECK(ulps_apart(stats1.rstd, stats2.rstd) == 0);
  };
  for (auto isa : {kernels::Isa::avx2, kernels::Isa::avx512}) {
    if (kernels::host_isa() < isa) continue;
    INFO("d = " << d << ", " << kernels::isa_name(isa));
    const auto run = [&](const auto& own, const auto& scalar) {
      if (isa == kernels::Isa::avx512) {
        kd::elementwise_loop_avx512(own, 0, rows);
        kd::elementwise_loop_avx512(scalar, 0, rows);
      } else {
        kd::elementwise_loop_avx2(own, 0, rows);
        kd::elementwise_loop_avx2(scalar, 0, rows);
      }
    };
    both(
        "LayerNormForward",
        [&](auto out, const Stats& st) {
          return kd::LayerNormForward<float, Space>{x, w, b, out, st.mean, st.rstd, 1e-5f};
        },
        run);
    both(
        "RmsNormForward",
        [&](auto out, const Stats& st) {
          return kd::RmsNormForward<float, Space>{x, w, out, st.rstd, 1e-5f};
        },
        run);
    both(
        "RmsNormBackwardInput",
        [&](auto out, const Stats&) {
          return kd::RmsNormBackwardInput<float, Space>{x, dy, w, rstd, out};
        },
        run);
  }
}
#endif

HYBRIDSEQ_SPACE_TEST_CASE("cross-entropy: the team-per-row device path equals the row-per-index host path",
                          "[layers][kernels]") {
  // lm_head_cross_entropy runs a row per index on host spaces and, on devices, a team per row
  // (log-sum-exp) and an element per thread (dlogits). Both paths run here, on any space,
  // against each other: 37 rows of V = 1000 (a team's threads split each row), every fifth
  // row's target ignored.
  using Space = TestType;
  using namespace kernels::detail;
  const std::int64_t rows = 37, v = 1000;
  const std::int32_t ignore = -100;
  Tensor<float**, Space> logits("logits", rows, v);
  core::fill(Space{}, core::flat(logits), core::Init::normal(3.0), 7, 1);
  Tensor<std::int32_t*, Space> targets("targets", rows);
  Kokkos::parallel_for(
      Kokkos::RangePolicy<Space>(0, rows),
      KOKKOS_LAMBDA(const std::int64_t r) { targets(r) = r % 5 == 3 ? ignore : std::int32_t((r * 389) % v); });
  Tensor<float*, Space> lse_rows("lse_rows", rows), lse_team("lse_team", rows);
  Tensor<float*, Space> nll_rows("nll_rows", rows), nll_team("nll_team", rows);
  Kokkos::parallel_for(Kokkos::RangePolicy<Space>(0, rows),
                       CrossEntropyLse<float, Space>{logits, targets, lse_rows, nll_rows, 0, ignore});
  Kokkos::parallel_for(Kokkos::TeamPolicy<Space, TeamPerRow>(rows, Kokkos::AUTO),
                       CrossEntropyLse<float, Space>{logits, targets, lse_team, nll_team, 0, ignore});
  Tensor<float**, Space> d_rows("d_rows", rows, v), d_elements("d_elements", rows, v);
  Kokkos::deep_copy(d_rows, logits);
  Kokkos::deep_copy(d_elements, logits);
  const float scale = 0.25f;
  Kokkos::parallel_for(Kokkos::RangePolicy<Space>(0, rows),
                       CrossEntropyGrad<float, Space>{d_rows, targets, lse_rows, 0, ignore, scale});
  Kokkos::parallel_for(Kokkos::RangePolicy<Space>(0, rows * v),
                       EachPart<CrossEntropyGrad<float, Space>>{{d_elements, targets, lse_rows, 0, ignore, scale}, v});
  Space().fence();
  const auto a = testing::to_vector(lse_rows), b = testing::to_vector(lse_team);
  const auto na = testing::to_vector(nll_rows), nb = testing::to_vector(nll_team);
  const auto lg = testing::to_vector(logits);
  for (std::int64_t r = 0; r < rows; ++r) {
    if (r % 5 == 3) {
      CHECK(a[r] == 0);
      CHECK(b[r] == 0);
      CHECK(na[r] == 0);
      CHECK(nb[r] == 0);
      continue;
    }
    double m = lg[r * v], s = 0;  // the oracle, in double
    for (std::int64_t j = 0; j < v; ++j) m = std::max(m, lg[r * v + j]);
    for (std::int64_t j = 0; j < v; ++j) s += std::exp(lg[r * v + j] - m);
    CHECK(a[r] == Approx(m + std::log(s)).epsilon(1e-6));
    CHECK(b[r] == Approx(m + std::log(s)).epsilon(1e-6));
    const double nll = m + std::log(s) - lg[r * v + (r * 389) % v];
    CHECK(na[r] == Approx(nll).epsilon(1e-5));
    CHECK(nb[r] == Approx(nll).epsilon(1e-5));
  }
  const auto dr = testing::to_vector(d_rows), de = testing::to_vector(d_elements);
  double row_sum = 0;  // Σⱼ dlogits = scale · (Σ softmax − 1) = 0 on every kept row
  for (std::int64_t i = 0; i < rows * v; ++i) {
    CHECK(de[i] == Approx(dr[i]).epsilon(1e-5).margin(1e-9));
    row_sum += dr[i];
    if ((i + 1) % v == 0) {
      CHECK(row_sum == Approx(0).margin(1e-5));
      row_sum = 0;
    }
  }
}

namespace {
// The sampling oracle, in plain loops: the k best by (logit descending, index ascending), then
// the walk in index order over exp((l − max)/temperature), as kernels/sampling.hpp defines it.
std::int32_t sample_oracle(const std::vector<double>& row, const kernels::SampleParams& p, std::int64_t b) {
  const auto v = std::int64_t(row.size());
  double top = std::numeric_limits<float>::lowest();  // the kernels' float rows start there
  for (const double x : row) top = x > top ? x : top;
  if (p.temperature == 0) {
    const auto first = std::find(row.begin(), row.end(), top) - row.begin();
    return std::int32_t(first < v ? first : 0);
  }
  // a ranks below c: by value, −0 below +0, a NaN below everything.
  const auto below = [](double a, double c) {
    if (std::isnan(a) || std::isnan(c)) return std::isnan(a) && !std::isnan(c);
    return a < c || (a == c && std::signbit(a) && !std::signbit(c));
  };
  std::vector<std::int64_t> order(v);
  for (std::int64_t j = 0; j < v; ++j) order[j] = j;
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t c) { return below(row[c], row[a]); });
  const std::int64_t k = p.top_k > 0 && p.top_k < v ? p.top_k : v;
  std::vector<bool> in(v, false);
  for (std::int64_t i = 0; i < k; ++i) in[order[i]] = true;
  const auto weight = [&](double x) {
    if (std::isinf(top) && top > 0) return x == top ? 1.0 : 0.0;
    return std::isnan(x) ? 0.0 : std::exp((x - top) / p.temperature);
  };
  double total = 0;
  for (std::int64_t j = 0; j < v; ++j) total += in[j] ? weight(row[j]) : 0.0;
  const double u = core::CounterRng(p.seed, std::uint64_t(b)).uniform(p.position) * total;
  double before = 0;
  std::int64_t last = 0;
  for (std::int64_t j = 0; j < v; ++j) {
    if (!in[j]) continue;
    if (weight(row[j]) > 0 && before + weight(row[j]) >= u) return std::int32_t(j);
    before += weight(row[j]);
    last = j;
  }
  return std::int32_t(last);
}
}  // namespace

HYBRIDSEQ_SPACE_TEST_CASE("sampling: the row and team kernels pick the oracle's token, at the softmax's frequencies",
                          "[layers][kernels][sampling]") {
  using Space = TestType;
  // 1. Random rows (V = 300, logits quantised to 1/4 so that many are tied, also at the top-k
  // boundary) against the oracle at several temperatures, k and positions: sample_tokens (a row
  // per index on host spaces, a team per row on devices) and the team kernel launched here.
  const std::int64_t rows = 64, v = 300;
  Tensor<float**, Space> logits("logits", rows, v);
  core::fill(Space{}, core::flat(logits), core::Init::normal(2.0), 3, 1);
  auto rounded = testing::to_vector(logits);
  for (auto& x : rounded) x = std::round(x * 4) / 4;
  testing::from_vector(logits, rounded);
  // Draws from every row of `block` (its values in `rows_of`) by sample_tokens and by the team
  // kernel, one thread per team on host spaces (whose sums then run in index order as the
  // oracle's); checks both picks against the oracle and returns sample_tokens' picks.
  const auto check_both_paths = [](const Tensor<float**, Space>& block, const std::vector<std::vector<double>>& rows_of,
                                   const kernels::SampleParams& p, const char* what) {
    const auto n = std::int64_t(block.extent(0));
    Tensor<std::int32_t*, Space> out("out", n), out_team("out_team", n);
    kernels::sample_tokens<float>(Space{}, block, p, out);
    Kokkos::parallel_for(Kokkos::TeamPolicy<Space>(n, core::host_space<Space> ? 1 : 64),
                         kernels::detail::SampleRows<float, Space>{block, out_team, p});
    const auto got = testing::to_vector(out), got_team = testing::to_vector(out_team);
    for (std::int64_t b = 0; b < n; ++b) {
      INFO(what << " row " << b << ", temperature " << p.temperature << ", k " << p.top_k << ", position "
                << p.position);
      const std::int32_t want = sample_oracle(rows_of[b], p, b);
      CHECK(std::int32_t(got[b]) == want);
      CHECK(std::int32_t(got_team[b]) == want);
    }
    return got;
  };
  std::vector<std::vector<double>> random_rows;
  for (std::int64_t b = 0; b < rows; ++b)
    random_rows.emplace_back(rounded.begin() + b * v, rounded.begin() + (b + 1) * v);
  std::int64_t checked = 0;
  for (const double temperature : {0.0, 0.3, 1.0, 2.5})
    for (const std::int64_t k :
         {std::int64_t(0), std::int64_t(1), std::int64_t(7), std::int64_t(299), std::int64_t(300), std::int64_t(1000)})
      for (const std::uint64_t position : {0u, 5u, 77u}) {
        check_both_paths(logits, random_rows,
                         {.temperature = temperature, .top_k = k, .seed = 11, .position = position}, "random");
        checked += rows;
      }
  CHECK(checked == 4 * 6 * 3 * rows);

  // Non-finite logits and signed zeros: a NaN is never drawn, +inf maxima share the draw, an
  // all −inf row falls back to its last candidate, and −0 ranks below +0 at the top-k cut.
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<std::vector<double>> special{{nan, 2, -inf, 2, 1, nan},
                                                 {1, inf, 0, inf, nan, -inf},
                                                 {-0.0, 0.0, -1, 0.0, -0.0, -2},
                                                 {-inf, -inf, -inf, -inf, -inf, -inf}};
  const std::int64_t sv = 6, sr = std::int64_t(special.size());
  Tensor<float**, Space> odd("odd", sr, sv);
  std::vector<double> flat_odd;
  for (const auto& r : special) flat_odd.insert(flat_odd.end(), r.begin(), r.end());
  testing::from_vector(odd, flat_odd);
  std::vector<std::vector<int>> drawn(sr, std::vector<int>(sv, 0));
  for (const double temperature : {0.0, 0.5, 2.0})
    for (const std::int64_t k : {std::int64_t(0), std::int64_t(1), std::int64_t(2), std::int64_t(3), std::int64_t(5)})
      for (std::uint64_t position = 0; position < 40; ++position) {
        const auto got = check_both_paths(
            odd, special, {.temperature = temperature, .top_k = k, .seed = 3, .position = position}, "special");
        for (std::int64_t b = 0; b < sr; ++b) drawn[b][std::size_t(got[b])] += 1;
      }
  CHECK(drawn[0][0] + drawn[0][5] + drawn[0][2] == 0);  // NaN, −inf
  CHECK(drawn[1][1] > 0);                               // the +inf logits share
  CHECK(drawn[1][3] > 0);
  CHECK(drawn[1][0] + drawn[1][2] + drawn[1][4] + drawn[1][5] == 0);
  // All −inf: every weight is 0, so each draw falls back to the last of the k candidates (index
  // k − 1 for k = 1, 2, 3, 5; index 5 for k = 0) at the two temperatures; greedy takes the first.
  CHECK(drawn[3] == std::vector<int>{5 * 40 + 2 * 40, 2 * 40, 2 * 40, 0, 2 * 40, 2 * 40});

  // 2. The frequencies over 40 000 draws (one per row, each row its own stream) of one row with
  // ties at the top-4 boundary: logit 2 at indices 2, 5 and 7, so index 7 is left out.
  const std::vector<double> one{1, 3, 2, 3, 0.5, 2, -1, 2};
  const std::int64_t draws = 40000, n = std::int64_t(one.size());
  Tensor<float**, Space> same("same", draws, n);
  std::vector<double> tiled;
  for (std::int64_t b = 0; b < draws; ++b) tiled.insert(tiled.end(), one.begin(), one.end());
  testing::from_vector(same, tiled);
  Tensor<std::int32_t*, Space> picks("picks", draws);
  const double temperature = 0.8;
  kernels::sample_tokens<float>(Space{}, same, {.temperature = temperature, .top_k = 4, .seed = 5, .position = 9},
                                picks);
  std::vector<double> count(n, 0.0);
  for (const double t : testing::to_vector(picks)) count[std::size_t(t)] += 1;
  const std::vector<int> kept{1, 3, 2, 5};
  double z = 0;
  for (const int j : kept) z += std::exp((one[j] - 3) / temperature);
  for (std::int64_t j = 0; j < n; ++j) {
    const bool is_kept = std::find(kept.begin(), kept.end(), j) != kept.end();
    const double want = is_kept ? std::exp((one[j] - 3) / temperature) / z : 0.0;
    const double sigma = std::sqrt(want * (1 - want) / double(draws));
    INFO("token " << j << ": " << count[j] << " of " << draws << ", probability " << want);
    CHECK(std::abs(count[j] / double(draws) - want) <= 5 * sigma);
    if (!is_kept) CHECK(count[j] == 0);
  }

  // 3. Greedy takes the first of equal maxima; bad calls are refused.
  Tensor<float**, Space> tied("tied", 3, n);
  testing::from_vector(tied, std::vector<double>(tiled.begin(), tiled.begin() + 3 * n));
  Tensor<std::int32_t*, Space> greedy("greedy", 3);
  kernels::sample_tokens<float>(Space{}, tied, {}, greedy);
  for (const double t : testing::to_vector(greedy)) CHECK(t == 1);
  CHECK_THROWS_WITH(kernels::sample_tokens<float>(Space{}, logits, {}, picks),
                    Catch::Contains("hybridseq::kernels::sample_tokens") && Catch::Contains("out (40000)"));
  Tensor<std::int32_t*, Space> out("out", rows);
  CHECK_THROWS_WITH(kernels::sample_tokens<float>(Space{}, logits, {.temperature = -1}, out),
                    Catch::Contains("got -1, 0"));
  CHECK_THROWS_AS(kernels::sample_tokens<float>(Space{}, logits, {.temperature = 1, .top_k = -2}, out), value_error);
}
