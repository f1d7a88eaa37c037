// Mamba-1 branch: the selective-scan and conv1d kernels against naive oracles and finite
// differences, the layer through the testbed (double gradient check, PyTorch goldens, the
// Hugging Face MambaMixer golden, save/load), decoding invariants, initialisation and errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <hybridseq/kernels/conv1d.hpp>
#include <hybridseq/kernels/reference/selective_scan.hpp>
#include <hybridseq/kernels/selective_scan.hpp>
#include <hybridseq/layers/mamba.hpp>

#include "cases/mamba_cases.hpp"
#include "support/isa.hpp"
#include "support/spaces.hpp"
#include "support/testbed.hpp"

using namespace hybridseq;
using Catch::Matchers::Contains;

namespace {

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// max |a − b| / max(1, max |b|): an error relative to the tensor's scale.
double scaled_error(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0, scale = 1;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return worst / scale;
}

template <class View>
void fill_normal(const View& v, std::uint64_t stream, double mean, double std) {
  const core::CounterRng rng(20260501, stream);
  std::vector<double> data(v.size());
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = mean + std * rng.normal(i);
  testing::from_vector(v, data);
}

template <class Dst, class Src>
void copy_converted(const Dst& dst, const Src& src) {
  testing::from_vector(dst, testing::to_vector(src));
}

/// Inputs of one selective scan. B and C are column slices of one (B, T, 2N + 3) tensor, as
/// they are slices of x_proj's output in the layer (strided, not at offset 0).
template <class T, class Space>
struct ScanData {
  int b, t, di, n, chunk;
  Tensor<T***, Space> u, dt, bc, dy;  // (B, T, Di), (B, T, Di), (B, T, 2N + 3), (B, T, Di)
  Tensor<T*, Space> dt_bias, d_skip;  // (Di)
  Tensor<T**, Space> a_log;           // (Di, N)

  ScanData(int b_, int t_, int di_, int n_, int chunk_)
      : b(b_),
        t(t_),
        di(di_),
        n(n_),
        chunk(chunk_),
        u("u", b_, t_, di_),
        dt("dt", b_, t_, di_),
        bc("bc", b_, t_, 2 * n_ + 3),
        dy("dy", b_, t_, di_),
        dt_bias("dt_bias", di_),
        d_skip("D", di_),
        a_log("A_log", di_, n_) {}

  StridedTensor<T***, Space> bm() const {
    return Kokkos::subview(bc, Kokkos::ALL, Kokkos::ALL, std::make_pair(1, 1 + n));
  }
  StridedTensor<T***, Space> cm() const {
    return Kokkos::subview(bc, Kokkos::ALL, Kokkos::ALL, std::make_pair(n + 2, 2 * n + 2));
  }

  void randomize() {
    fill_normal(u, 1, 0, 1);
    fill_normal(bc, 2, 0, 1);
    fill_normal(dy, 3, 0, 1);
    fill_normal(dt_bias, 4, 0, 0.5);
    fill_normal(d_skip, 5, 1, 0.1);
    // dt: mostly Δ in [0.05, 2], plus entries in softplus' linear region (Δ ≈ 25: decays
    // underflow to 0) and deep in its exponential tail (Δ ≈ e^−30).
    auto v = testing::to_vector(dt);
    const core::CounterRng rng(20260501, 6);
    for (std::size_t i = 0; i < v.size(); ++i) {
      v[i] = -1 + 1.5 * rng.normal(i);
      if (i % 17 == 5) v[i] = 25;
      if (i % 23 == 7) v[i] = -30;
    }
    testing::from_vector(dt, v);
    std::vector<double> a(a_log.size());
    const core::CounterRng ra(20260501, 7);
    for (int d = 0; d < di; ++d)
      for (int k = 0; k < n; ++k) a[d * n + k] = std::log(1.0 + k) + 0.2 * ra.normal(d * n + k);
    testing::from_vector(a_log, a);
  }

  /// The same inputs in scalar type U, in the memory of execution space To.
  template <class U, class To = Space>
  ScanData<U, To> converted() const {
    ScanData<U, To> o(b, t, di, n, chunk);
    copy_converted(o.u, u);
    copy_converted(o.dt, dt);
    copy_converted(o.bc, bc);
    copy_converted(o.dy, dy);
    copy_converted(o.dt_bias, dt_bias);
    copy_converted(o.d_skip, d_skip);
    copy_converted(o.a_log, a_log);
    return o;
  }
};

/// Steps t0 .. t1 − 1 of every input of s.
template <class T, class Space>
ScanData<T, Space> steps_of(const ScanData<T, Space>& s, int t0, int t1) {
  ScanData<T, Space> p(s.b, t1 - t0, s.di, s.n, s.chunk);
  const auto steps = std::make_pair(t0, t1);
  Kokkos::deep_copy(p.u, Kokkos::subview(s.u, Kokkos::ALL, steps, Kokkos::ALL));
  Kokkos::deep_copy(p.dt, Kokkos::subview(s.dt, Kokkos::ALL, steps, Kokkos::ALL));
  Kokkos::deep_copy(p.bc, Kokkos::subview(s.bc, Kokkos::ALL, steps, Kokkos::ALL));
  Kokkos::deep_copy(p.dt_bias, s.dt_bias);
  Kokkos::deep_copy(p.d_skip, s.d_skip);
  Kokkos::deep_copy(p.a_log, s.a_log);
  return p;
}

template <class T, class Space>
struct ScanGrads {
  Tensor<T***, Space> du, ddt, dbc;  // dbc: dB and dC in the columns of B and C
  Tensor<T**, Space> da_log;
  Tensor<T*, Space> dd_skip, ddt_bias;
  explicit ScanGrads(const ScanData<T, Space>& s)
      : du("du", s.b, s.t, s.di),
        ddt("ddt", s.b, s.t, s.di),
        dbc("dbc", s.b, s.t, 2 * s.n + 3),
        da_log("da_log", s.di, s.n),
        dd_skip("dD", s.di),
        ddt_bias("ddt_bias", s.di) {}
  StridedTensor<T***, Space> dbm(int n) const {
    return Kokkos::subview(dbc, Kokkos::ALL, Kokkos::ALL, std::make_pair(1, 1 + n));
  }
  StridedTensor<T***, Space> dcm(int n) const {
    return Kokkos::subview(dbc, Kokkos::ALL, Kokkos::ALL, std::make_pair(n + 2, 2 * n + 2));
  }
  std::vector<std::pair<const char*, std::vector<double>>> all() const {
    return {{"du", testing::to_vector(du)},      {"ddt", testing::to_vector(ddt)},
            {"dB|dC", testing::to_vector(dbc)},  {"dA_log", testing::to_vector(da_log)},
            {"dD", testing::to_vector(dd_skip)}, {"ddt_bias", testing::to_vector(ddt_bias)}};
  }
};

template <int N, class T, class Space>
struct ScanOut {
  Tensor<T***, Space> y, h_last;
  Tensor<T****, Space> chunks;
};

/// The scan kernels for Space (Team: the team kernels, which Space's dispatch picks only on devices).
template <int N, bool Team = false, class T, class Space>
ScanOut<N, T, Space> kernel_forward(const ScanData<T, Space>& s, Tensor<const T***, Space> h0 = {},
                                    const kernels::team::ScanSplit& split = {}) {
  ScanOut<N, T, Space> o{Tensor<T***, Space>("y", s.b, s.t, s.di), Tensor<T***, Space>("h", s.b, s.di, N),
                         Tensor<T****, Space>("chunks", s.b, kernels::scan_chunks(s.t, s.chunk), s.di, N)};
  if constexpr (Team)
    kernels::team::selective_scan_forward<N, T>(Space{}, s.u, s.dt, s.dt_bias, s.a_log, s.bm(), s.cm(), s.d_skip, h0,
                                                o.y, o.chunks, o.h_last, s.chunk, split);
  else
    kernels::selective_scan_forward<N, T>(Space{}, s.u, s.dt, s.dt_bias, s.a_log, s.bm(), s.cm(), s.d_skip, h0, o.y,
                                          o.chunks, o.h_last, s.chunk);
  Space().fence();
  return o;
}

template <int N, bool Team = false, class T, class Space>
ScanGrads<T, Space> kernel_backward(const ScanData<T, Space>& s, const kernels::team::ScanSplit& split = {}) {
  const auto fwd = kernel_forward<N, Team>(s, {}, split);
  ScanGrads<T, Space> g(s);
  core::Workspace<Space> ws;
  if constexpr (Team) {
    kernels::team::selective_scan_backward<N, T>(Space{}, ws, s.u, s.dt, s.dt_bias, s.a_log, s.bm(), s.cm(), s.d_skip,
                                                 fwd.chunks, s.dy, g.du, g.ddt, g.da_log, g.dbm(N), g.dcm(N), g.dd_skip,
                                                 g.ddt_bias, s.chunk, split);
    // The size query is exact (layers size their arena with it).
    CHECK(ws.peak_bytes() == kernels::team::selective_scan_backward_scratch<N, T>(s.b, s.t, s.di, s.chunk, split));
  } else {
    kernels::selective_scan_backward<N, T>(Space{}, ws, s.u, s.dt, s.dt_bias, s.a_log, s.bm(), s.cm(), s.d_skip,
                                           fwd.chunks, s.dy, g.du, g.ddt, g.da_log, g.dbm(N), g.dcm(N), g.dd_skip,
                                           g.ddt_bias, s.chunk);
  }
  Space().fence();
  return g;
}

/// The oracle on double copies of the same inputs, in host memory (it indexes its views on the host).
using Host = Kokkos::DefaultHostExecutionSpace;

template <class Space>
std::pair<std::vector<double>, std::vector<double>> oracle_forward(const ScanData<double, Space>& on_space) {
  const auto s = on_space.template converted<double, Host>();
  Tensor<double***, Host> y("y", s.b, s.t, s.di), h("h", s.b, s.di, s.n);
  kernels::reference::selective_scan_forward<double>(s.u, s.dt, s.dt_bias, s.a_log, s.bm(), s.cm(), s.d_skip, h, y);
  return {testing::to_vector(y), testing::to_vector(h)};
}

template <class Space>
ScanGrads<double, Host> oracle_backward(const ScanData<double, Space>& on_space) {
  const auto s = on_space.template converted<double, Host>();
  ScanGrads<double, Host> g(s);
  kernels::reference::selective_scan_backward<double>(s.u, s.dt, s.dt_bias, s.a_log, s.bm(), s.cm(), s.d_skip, s.dy,
                                                      g.du, g.ddt, g.da_log, g.dbm(s.n), g.dcm(s.n), g.dd_skip,
                                                      g.ddt_bias);
  return g;
}

/// Odd shapes: T = 1; T not a multiple of the chunk; T spanning several chunks; T shorter than
/// one chunk; Di and N odd; Di not a multiple of the 16 lanes; Di > 64 (two backward groups).
template <class Space, class F>
void for_each_scan_shape(F&& f) {
  f.template operator()<3>(ScanData<float, Space>(2, 1, 5, 3, 4));
  f.template operator()<5>(ScanData<float, Space>(1, 13, 7, 5, 4));
  f.template operator()<16>(ScanData<float, Space>(2, 37, 19, 16, 8));
  f.template operator()<1>(ScanData<float, Space>(1, 10, 70, 1, 3));
  f.template operator()<4>(ScanData<float, Space>(2, 9, 33, 4, 64));
}

std::string shape_name(int b, int t, int di, int n, int chunk) {
  return "B=" + std::to_string(b) + " T=" + std::to_string(t) + " Di=" + std::to_string(di) +
         " N=" + std::to_string(n) + " chunk=" + std::to_string(chunk);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Vectorisable float maths
// ---------------------------------------------------------------------------------------------

TEST_CASE("exp2, exp, softplus and sigmoid polynomials are within a few ulp", "[mamba][host]") {
  auto ulp_error = [](float got, double exact) {
    const float e = static_cast<float>(exact);
    const double ulp = double(std::nextafter(e, std::numeric_limits<float>::infinity())) - double(e);
    return std::abs(double(got) - exact) / ulp;
  };
  double worst2 = 0, worst = 0;
  for (double z = -125.0; z <= 127.0; z += 1.0 / 1024)
    worst2 = std::max(worst2, ulp_error(kernels::exp2_polynomial(float(z)), std::exp2(double(float(z)))));
  for (double x = -86.6; x <= 88.0; x += 1.0 / 1024)
    worst = std::max(worst, ulp_error(kernels::exp_cody_waite(float(x)), std::exp(double(float(x)))));
  INFO("exp2_polynomial worst " << worst2 << " ulp, exp_cody_waite worst " << worst << " ulp");
  CHECK(worst2 <= 2.5);
  CHECK(worst <= 3.0);
  testing::report("exp2_polynomial_max_ulp", "exp2", "host", worst2);
  testing::report("exp_cody_waite_max_ulp", "exp", "host", worst);
  CHECK(kernels::exp2_polynomial(0.0f) == 1.0f);
  CHECK(kernels::exp2_polynomial(10.0f) == 1024.0f);
  CHECK(kernels::exp2_polynomial(-130.0f) == 0.0f);  // flushed instead of subnormal
  CHECK(kernels::exp2_polynomial(-1e30f) == 0.0f);
  CHECK(kernels::exp2_polynomial(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(kernels::exp_cody_waite(-100.0f) == 0.0f);

  // softplus and sigmoid polynomials (the scan's, Mamba's SiLU and every float SiLU/softplus
  // activation) against libm in double: relative error and ulps.
  using Silu = kernels::ActivationFn<kernels::Activation::silu>;
  using Softplus = kernels::ActivationFn<kernels::Activation::softplus>;
  double sp = 0, sg = 0, sp_ulp = 0, sg_ulp = 0, silu = 0;
  for (double v = -40; v <= 40; v += 1.0 / 256) {
    const float f = float(v);
    const double exact_sp = std::log1p(std::exp(double(f)));
    const double exact_sg = 1 / (1 + std::exp(-double(f)));
    sp = std::max(sp, std::abs(kernels::softplus_polynomial(f) - exact_sp) / exact_sp);
    sg = std::max(sg, std::abs(kernels::sigmoid_polynomial(f) - exact_sg) / exact_sg);
    sp_ulp = std::max(sp_ulp, ulp_error(kernels::softplus_polynomial(f), exact_sp));
    sg_ulp = std::max(sg_ulp, ulp_error(kernels::sigmoid_polynomial(f), exact_sg));
    silu = std::max(silu, std::abs(double(Silu::value(f)) - Silu::value(double(f))) /
                              std::max(1e-30, std::abs(Silu::value(double(f)))));
    float s1 = 0, s2 = 0;
    kernels::softplus_and_sigmoid_polynomial(f, s1, s2);
    CHECK(s1 == kernels::softplus_polynomial(f));
    CHECK(s2 == kernels::sigmoid_polynomial(f));
    CHECK(Softplus::value(f) == s1);
    CHECK(Softplus::derivative(f) == s2);
    CHECK(kernels::ScanMath<float>::softplus(f) == s1);
  }
  INFO("softplus worst " << sp << " relative (" << sp_ulp << " ulp), sigmoid " << sg << " (" << sg_ulp
                         << " ulp), float SiLU " << silu);
  CHECK(sp <= 4e-7);
  CHECK(sg <= 4e-7);
  CHECK(silu <= 5e-7);
  testing::report("softplus_polynomial_max_ulp", "softplus", "host", sp_ulp);
  testing::report("sigmoid_polynomial_max_ulp", "sigmoid", "host", sg_ulp);
  CHECK(Softplus::value(30.0f) == 30.0f);  // PyTorch's linear region above 20
  CHECK(Softplus::value(-100.0f) == 0.0f);
  CHECK(kernels::sigmoid_polynomial(-100.0f) == 0.0f);
  CHECK(kernels::sigmoid_polynomial(100.0f) == 1.0f);
}

// ---------------------------------------------------------------------------------------------
// Selective scan kernel
// ---------------------------------------------------------------------------------------------

HYBRIDSEQ_SPACE_TEST_CASE("selective scan forward matches the naive oracle", "[mamba][scan]") {
  for_each_scan_shape<TestType>([&]<int N>(ScanData<float, TestType> s) {
    DYNAMIC_SECTION(shape_name(s.b, s.t, s.di, N, s.chunk)) {
      s.randomize();
      const auto sd = s.template converted<double>();
      const auto [y_ref, h_ref] = oracle_forward(sd);
      // double kernel: the same arithmetic as the oracle up to summation order.
      const auto od = kernel_forward<N>(sd);
      CHECK(scaled_error(testing::to_vector(od.y), y_ref) <= 1e-12);
      CHECK(scaled_error(testing::to_vector(od.h_last), h_ref) <= 1e-12);
      // float kernel (polynomial exp and softplus) against the double oracle, every ISA copy.
      testing::for_each_isa([&] {
        const auto of = kernel_forward<N>(s);
        const double ey = scaled_error(testing::to_vector(of.y), y_ref);
        const double eh = scaled_error(testing::to_vector(of.h_last), h_ref);
        INFO("float kernel (" << kernels::isa_name(kernels::host_isa()) << ") vs double oracle: y " << ey
                              << ", final state " << eh);
        CHECK(ey <= 2e-6);
        CHECK(eh <= 2e-6);
        testing::report("scan_forward_float_rel_err", shape_name(s.b, s.t, s.di, N, s.chunk), TestType::name(),
                        std::max(ey, eh));
      });
      // The chunk checkpoints are the oracle's states: the state before step c·chunk equals the
      // final state of a scan over the first c·chunk steps.
      const auto chunks = testing::to_vector(od.chunks);
      for (int c = 0; c < int(kernels::scan_chunks(s.t, s.chunk)); ++c) {
        ScanData<double, TestType> prefix(s.b, c * s.chunk, s.di, N, s.chunk);
        const auto steps = std::make_pair(0, c * s.chunk);
        Kokkos::deep_copy(prefix.u, Kokkos::subview(sd.u, Kokkos::ALL, steps, Kokkos::ALL));
        Kokkos::deep_copy(prefix.dt, Kokkos::subview(sd.dt, Kokkos::ALL, steps, Kokkos::ALL));
        Kokkos::deep_copy(prefix.bc, Kokkos::subview(sd.bc, Kokkos::ALL, steps, Kokkos::ALL));
        Kokkos::deep_copy(prefix.dt_bias, sd.dt_bias);
        Kokkos::deep_copy(prefix.d_skip, sd.d_skip);
        Kokkos::deep_copy(prefix.a_log, sd.a_log);
        const auto h_prefix = oracle_forward(prefix).second;
        std::vector<double> stored;
        for (int b = 0; b < s.b; ++b)
          for (int i = 0; i < s.di * N; ++i)
            stored.push_back(chunks[((std::size_t(b) * kernels::scan_chunks(s.t, s.chunk) + c) * s.di * N) + i]);
        CHECK(scaled_error(stored, h_prefix) <= 1e-12);
      }
    }
  });
}

HYBRIDSEQ_SPACE_TEST_CASE("selective scan continues from an initial state", "[mamba][scan]") {
  constexpr int N = 5;
  ScanData<double, TestType> s(2, 11, 21, N, 3);
  s.randomize();
  const auto full = kernel_forward<N>(s);
  for (int k : {1, 4, 10}) {
    auto part = [&](int t0, int t1) { return steps_of(s, t0, t1); };
    const auto first = kernel_forward<N>(part(0, k));
    // The second half continues the first's final state, written in place (h0 = h_last).
    auto second_in = part(k, s.t);
    Tensor<double***, TestType> h("h", s.b, s.di, N);
    Kokkos::deep_copy(h, first.h_last);
    Tensor<double***, TestType> y2("y2", s.b, s.t - k, s.di);
    kernels::selective_scan_forward<N, double>(TestType{}, second_in.u, second_in.dt, second_in.dt_bias,
                                               second_in.a_log, second_in.bm(), second_in.cm(), second_in.d_skip, h, y2,
                                               {}, h, s.chunk);
    Tensor<double***, TestType> y_tail("y_tail", s.b, s.t - k, s.di);
    Kokkos::deep_copy(y_tail, Kokkos::subview(full.y, Kokkos::ALL, std::make_pair(k, s.t), Kokkos::ALL));
    CHECK(scaled_error(testing::to_vector(y2), testing::to_vector(y_tail)) <= 1e-13);
    CHECK(scaled_error(testing::to_vector(h), testing::to_vector(full.h_last)) <= 1e-13);
  }
}

HYBRIDSEQ_SPACE_TEST_CASE("selective scan backward matches the oracle and finite differences", "[mamba][scan]") {
  for_each_scan_shape<TestType>([&]<int N>(ScanData<float, TestType> s) {
    DYNAMIC_SECTION(shape_name(s.b, s.t, s.di, N, s.chunk)) {
      s.randomize();
      auto sd = s.template converted<double>();
      const auto ref = oracle_backward(sd).all();
      const auto gd = kernel_backward<N>(sd).all();
      for (std::size_t i = 0; i < ref.size(); ++i) {
        const double ed = scaled_error(gd[i].second, ref[i].second);
        INFO(ref[i].first << ": double kernel " << ed << " (relative to scale)");
        CHECK(ed <= 1e-12);
      }
      testing::for_each_isa([&] {
        const auto gf = kernel_backward<N>(s).all();
        double worst_float = 0;
        for (std::size_t i = 0; i < ref.size(); ++i) {
          const double ef = scaled_error(gf[i].second, ref[i].second);
          INFO(ref[i].first << ": float kernel (" << kernels::isa_name(kernels::host_isa()) << ") " << ef
                            << " (relative to scale)");
          CHECK(ef <= 2e-5);
          worst_float = std::max(worst_float, ef);
        }
        testing::report("scan_backward_float_rel_err", shape_name(s.b, s.t, s.di, N, s.chunk), TestType::name(),
                        worst_float);
      });

      // Central differences of the double kernel's forward, Σ y ⊙ dy, on sampled entries.
      const auto dy = testing::to_vector(sd.dy);
      auto objective = [&] {
        const auto y = testing::to_vector(kernel_forward<N>(sd).y);
        double acc = 0;
        for (std::size_t i = 0; i < y.size(); ++i) acc += y[i] * dy[i];
        return acc;
      };
      auto check_fd = [&](const char* what, const auto& view, const std::vector<double>& analytic) {
        auto flat = core::flat(view);
        const std::size_t n = flat.extent(0), step = std::max<std::size_t>(1, n / 24);
        double worst = 0, scale = 0;
        for (std::size_t i = 0; i < n; i += step) {
          const double orig = testing::element(flat, i), h = 1e-6 * std::max(1.0, std::abs(orig));
          testing::set_element(flat, i, orig + h);
          const double plus = objective();
          testing::set_element(flat, i, orig - h);
          const double minus = objective();
          testing::set_element(flat, i, orig);
          const double numeric = (plus - minus) / (2 * h);
          worst = std::max(worst, std::abs(numeric - analytic[i]));
          scale = std::max({scale, std::abs(numeric), std::abs(analytic[i])});
        }
        INFO(what << ": finite differences, relative error " << worst / std::max(scale, 1e-300));
        CHECK(worst <= 1e-6 * std::max(scale, 1.0));
      };
      check_fd("u", sd.u, gd[0].second);
      check_fd("dt", sd.dt, gd[1].second);
      check_fd("B|C", sd.bc, gd[2].second);
      check_fd("A_log", sd.a_log, gd[3].second);
      check_fd("D", sd.d_skip, gd[4].second);
      check_fd("dt_bias", sd.dt_bias, gd[5].second);
    }
  });
}

// The team kernels (Kokkos::Cuda's scan) run here on the host spaces, one thread per team.
HYBRIDSEQ_SPACE_TEST_CASE("device scan kernels match the naive oracle", "[mamba][scan][team]") {
  // Beyond the shared shapes: Di over two groups and odd; a chunk longer than the staged block
  // (32 steps), so a chunk is walked in several blocks, T not a multiple of either; chunk = 1.
  // Each split: a team per sequence and group; split in time, all chunks in one launch and
  // two chunks per launch (the last launch shorter where the chunk count is odd); the default
  // choice (its workspace query included).
  using Split = kernels::team::ScanSplit;
  const std::pair<const char*, Split> splits[] = {{"sequences", {Split::sequences}},
                                                  {"time", {Split::time}},
                                                  {"time, 2 chunks per launch", {Split::time, 2}},
                                                  {"automatic", {}}};
  auto check = [&]<int N>(ScanData<float, TestType> s) {
    for (const auto& [split_name, split] : splits)
      DYNAMIC_SECTION(shape_name(s.b, s.t, s.di, N, s.chunk) << ", " << split_name) {
        s.randomize();
        const auto sd = s.template converted<double>();
        const auto [y_ref, h_ref] = oracle_forward(sd);
        const auto od = kernel_forward<N, true>(sd, {}, split);
        CHECK(scaled_error(testing::to_vector(od.y), y_ref) <= 1e-12);
        CHECK(scaled_error(testing::to_vector(od.h_last), h_ref) <= 1e-12);
        // The checkpoints are the host kernel's (checked against oracle prefixes above).
        CHECK(scaled_error(testing::to_vector(od.chunks), testing::to_vector(kernel_forward<N>(sd).chunks)) <= 1e-12);
        const auto of = kernel_forward<N, true>(s, {}, split);
        CHECK(scaled_error(testing::to_vector(of.y), y_ref) <= 2e-6);
        CHECK(scaled_error(testing::to_vector(of.h_last), h_ref) <= 2e-6);

        const auto ref = oracle_backward(sd).all();
        const auto gd = kernel_backward<N, true>(sd, split).all();
        const auto gf = kernel_backward<N, true>(s, split).all();
        for (std::size_t i = 0; i < ref.size(); ++i) {
          const double ed = scaled_error(gd[i].second, ref[i].second);
          const double ef = scaled_error(gf[i].second, ref[i].second);
          INFO(ref[i].first << ": double team kernel " << ed << ", float team kernel " << ef);
          CHECK(ed <= 1e-12);
          CHECK(ef <= 2e-5);
        }
        // Fixed summation orders, no races: the same bits again.
        const auto again = kernel_backward<N, true>(s, split).all();
        for (std::size_t i = 0; i < again.size(); ++i) {
          INFO(again[i].first);
          CHECK(gf[i].second == again[i].second);
        }
      }
  };
  for_each_scan_shape<TestType>(check);
  check.template operator()<16>(ScanData<float, TestType>(2, 100, 67, 16, 40));
  check.template operator()<2>(ScanData<float, TestType>(1, 70, 131, 2, 70));
  check.template operator()<3>(ScanData<float, TestType>(2, 6, 9, 3, 1));
}

HYBRIDSEQ_SPACE_TEST_CASE("device scan kernel continues from an initial state in place", "[mamba][scan][team]") {
  constexpr int N = 5;
  ScanData<double, TestType> s(2, 45, 21, N, 7);
  s.randomize();
  const auto full = kernel_forward<N, true>(s);
  for (int k : {1, 33}) {
    const auto first = steps_of(s, 0, k), second = steps_of(s, k, s.t);
    Tensor<double***, TestType> h("h", s.b, s.di, N);
    Kokkos::deep_copy(h, kernel_forward<N, true>(first).h_last);
    // Without checkpoints (decoding's prefill), where a split in time falls back to the
    // sequences, and split in time with them: its first pass reads h as h0 and writes it as h_last.
    for (const auto& [split, with_chunks] :
         {std::pair{kernels::team::ScanSplit::sequences, false}, std::pair{kernels::team::ScanSplit::time, false},
          std::pair{kernels::team::ScanSplit::time, true}}) {
      Tensor<double***, TestType> h2("h2", s.b, s.di, N);
      Kokkos::deep_copy(h2, h);
      Tensor<double***, TestType> y2("y2", s.b, s.t - k, s.di);
      Tensor<double****, TestType> chunks;
      if (with_chunks)
        chunks = Tensor<double****, TestType>("chunks", s.b, kernels::scan_chunks(s.t - k, s.chunk), s.di, N);
      kernels::team::selective_scan_forward<N, double>(TestType{}, second.u, second.dt, second.dt_bias, second.a_log,
                                                       second.bm(), second.cm(), second.d_skip, h2, y2, chunks, h2,
                                                       s.chunk, {split});
      TestType().fence();
      Tensor<double***, TestType> y_tail("y_tail", s.b, s.t - k, s.di);
      Kokkos::deep_copy(y_tail, Kokkos::subview(full.y, Kokkos::ALL, std::make_pair(k, s.t), Kokkos::ALL));
      INFO("split " << int(split) << (with_chunks ? " with checkpoints" : " without checkpoints"));
      CHECK(scaled_error(testing::to_vector(y2), testing::to_vector(y_tail)) <= 1e-13);
      CHECK(scaled_error(testing::to_vector(h2), testing::to_vector(full.h_last)) <= 1e-13);
    }
  }
}

HYBRIDSEQ_SPACE_TEST_CASE("selective scan backward is bit-identical at any thread count", "[mamba][scan]") {
  constexpr int N = 16;
  ScanData<float, TestType> s(2, 40, 150, N, 8);
  s.randomize();
  ScanData<float, Kokkos::Serial> serial(2, 40, 150, N, 8);
  serial.randomize();
  const auto a = kernel_backward<N>(s).all();
  // On a device the scan is the team kernel, whose arithmetic the device compiler contracts
  // differently from the host's: there its bits are compared with a second run.
  const auto b = kernels::scan_runs_on_host<TestType> ? kernel_backward<N>(serial).all() : kernel_backward<N>(s).all();
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    CHECK(a[i].second == b[i].second);
  }
}

// ---------------------------------------------------------------------------------------------
// conv1d kernel
// ---------------------------------------------------------------------------------------------

namespace {
template <int K, class Space>
void check_conv1d() {
  const int nb = 2, nt = 6, di = 5;
  Tensor<double***, Space> x("x", nb, nt, di), window("window", nb, di, K > 1 ? K - 1 : 0), pre("pre", nb, nt, di),
      out("out", nb, nt, di), dpre("dpre", nb, nt, di), dx("dx", nb, nt, di);
  Tensor<double**, Space> w("w", di, K), dw("dw", di, K);
  Tensor<double*, Space> bias("bias", di), dbias("dbias", di);
  fill_normal(x, 11, 0, 1);
  fill_normal(window, 12, 0, 1);
  fill_normal(w, 13, 0, 0.5);
  fill_normal(bias, 14, 0, 0.1);
  fill_normal(dpre, 15, 0, 1);
  // The loops read host copies (on a GPU the tensors are in device memory).
  const auto host = [](const auto& v) { return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, v); };
  const auto hx = host(x), hwindow = host(window), hdpre = host(dpre);
  const auto hw = host(w);
  const auto hbias = host(bias);
  auto xin = [&](int b, int s, int d, bool with_window) {
    if (s >= 0) return hx(b, s, d);
    return with_window ? hwindow(b, d, K - 1 + s) : 0.0;
  };
  for (bool with_window : {false, true}) {
    kernels::conv1d_forward<K, kernels::IdentityPost, double>(
        Space{}, x, w, bias, with_window ? window : Tensor<double***, Space>{}, pre, out);
    const auto hout = host(out), hpre = host(pre);
    double err = 0;
    for (int b = 0; b < nb; ++b)
      for (int t = 0; t < nt; ++t)
        for (int d = 0; d < di; ++d) {
          double acc = hbias(d);
          for (int k = 0; k < K; ++k) acc += hw(d, k) * xin(b, t - (K - 1) + k, d, with_window);
          err = std::max({err, std::abs(acc - hout(b, t, d)), std::abs(acc - hpre(b, t, d))});
        }
    CHECK(err <= 1e-14);
  }
  // Window after the sequence: the last K − 1 inputs of [window, x], updated in place, also
  // for sequences shorter than the window.
  for (int steps : {1, nt}) {
    Tensor<double***, Space> win("win", nb, di, K > 1 ? K - 1 : 0);
    Kokkos::deep_copy(win, window);
    auto xs = Kokkos::subview(x, Kokkos::ALL, std::make_pair(0, steps), Kokkos::ALL);
    kernels::conv1d_update_window<K, double>(Space{}, xs, win, win);
    const auto hwin = host(win);
    for (int b = 0; b < nb; ++b)
      for (int d = 0; d < di; ++d)
        for (int k = 0; k < K - 1; ++k) CHECK(hwin(b, d, k) == xin(b, steps - (K - 1) + k, d, true));
  }
  // Backward against the adjoint of the loops above.
  kernels::conv1d_backward<K, double>(Space{}, x, w, dpre, dx, dw, dbias);
  const auto hdx = host(dx);
  const auto hdw = host(dw);
  const auto hdbias = host(dbias);
  double err = 0;
  for (int d = 0; d < di; ++d) {
    double gb = 0;
    for (int b = 0; b < nb; ++b)
      for (int t = 0; t < nt; ++t) gb += hdpre(b, t, d);
    err = std::max(err, std::abs(gb - hdbias(d)));
    for (int k = 0; k < K; ++k) {
      double gw = 0;
      for (int b = 0; b < nb; ++b)
        for (int t = 0; t < nt; ++t) gw += hdpre(b, t, d) * xin(b, t - (K - 1) + k, d, false);
      err = std::max(err, std::abs(gw - hdw(d, k)));
    }
    for (int b = 0; b < nb; ++b)
      for (int s = 0; s < nt; ++s) {
        double gx = 0;
        for (int k = 0; k < K; ++k)
          if (s + K - 1 - k < nt) gx += hw(d, k) * hdpre(b, s + K - 1 - k, d);
        err = std::max(err, std::abs(gx - hdx(b, s, d)));
      }
  }
  CHECK(err <= 1e-13);
}
}  // namespace

HYBRIDSEQ_SPACE_TEST_CASE("conv1d forward, window and backward match the loops", "[mamba][conv1d]") {
  SECTION("K=1") {
    check_conv1d<1, TestType>();
  }
  SECTION("K=3") {
    check_conv1d<3, TestType>();
  }
  SECTION("K=4") {
    check_conv1d<4, TestType>();
  }
}

// ---------------------------------------------------------------------------------------------
// The layer through the testbed
// ---------------------------------------------------------------------------------------------

static_assert(core::TrainableBranch<layers::Mamba<cases::mamba_small, float, Kokkos::Serial>>);
static_assert(core::DecodableBranch<layers::Mamba<cases::mamba_small, float, Kokkos::Serial>>);
static_assert(core::require_trainable_branch<layers::Mamba<cases::mamba_odd, double, Kokkos::Serial>>());
static_assert(core::require_decodable_branch<layers::Mamba<cases::mamba_odd, double, Kokkos::Serial>>());
static_assert(layers::Mamba<layers::MambaShape{.d_model = 256}, float, Kokkos::Serial>::dt_rank == 16);
static_assert(layers::Mamba<layers::MambaShape{.d_model = 40}, float, Kokkos::Serial>::dt_rank == 3);

HYBRIDSEQ_SPACE_TEST_CASE("mamba: finite-difference gradients in double", "[mamba][gradcheck]") {
  testing::for_each_case(cases::MambaCases{}, [&]<class Case>() { testing::check_gradients<Case, TestType>(1e-6); });
}

HYBRIDSEQ_SPACE_TEST_CASE("mamba: PyTorch goldens in float", "[mamba][golden]") {
  testing::for_each_case(cases::MambaCases{}, [&]<class Case>() { testing::check_golden<Case, TestType>(); });
}

// transformers' MambaMixer rounds A, B and the scan input to float32 inside its torch path,
// so its golden differs from the float64 reference by up to 1e-7 relative; the tolerance here
// is the same as for the reference goldens.
HYBRIDSEQ_SPACE_TEST_CASE("mamba: Hugging Face MambaMixer golden in float", "[mamba][golden][hf]") {
  testing::for_each_case(cases::MambaHfCases{},
                         [&]<class Case>() { testing::check_golden<Case, TestType>(1e-5, 1e-6); });
}

HYBRIDSEQ_SPACE_TEST_CASE("mamba: save/load round trip", "[mamba][io]") {
  testing::for_each_case(cases::MambaCases{}, [&]<class Case>() { testing::check_round_trip<Case, TestType>(); });
}

// ---------------------------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------------------------

namespace {
template <class View>
View time_slice(const View& x, int t0, int t1) {
  View out("slice", x.extent(0), t1 - t0, x.extent(2));
  Kokkos::deep_copy(out, Kokkos::subview(x, Kokkos::ALL, std::make_pair(t0, t1), Kokkos::ALL));
  return out;
}

// The case is a template parameter so that nvcc prints its layer type as written: it cannot
// print the expansion of a case's alias templates from a non-dependent context.
template <class Case, class T, class Space>
void check_decoding(double tol) {
  using L = typename Case::template Layer<T, Space>;
  testing::Harness<Case, T, Space> h;  // random, perturbed parameters (richer dynamics than init)
  h.randomize(99);
  const L& layer = h.layer;
  const int nb = 2, nt = 9;
  Tensor<T***, Space> x("x", nb, nt, L::d_in), y("y", nb, nt, L::d_out);
  fill_normal(x, 21, 0, 1);
  core::Workspace<Space> ws;
  typename L::Saved saved;
  layer.forward(ws, x, y, saved);
  const auto y_full = testing::to_vector(y);
  const double scale = std::max(1.0, *std::max_element(y_full.begin(), y_full.end(),
                                                       [](double a, double b) { return std::abs(a) < std::abs(b); }));
  auto expect_rows = [&](const Tensor<T***, Space>& got, int t0) {
    const auto g = testing::to_vector(got);
    double err = 0;
    const int rows = int(got.extent(1));
    for (int b = 0; b < nb; ++b)
      for (int t = 0; t < rows; ++t)
        for (int d = 0; d < L::d_out; ++d)
          err = std::max(err, std::abs(g[(std::size_t(b) * rows + t) * L::d_out + d] -
                                       y_full[(std::size_t(b) * nt + t0 + t) * L::d_out + d]));
    return err / scale;
  };
  for (int k : {0, 1, 4, 9}) {
    ws.release({});
    auto st = layer.make_state(nb);
    double err = 0;
    if (k > 0) {
      Tensor<T***, Space> yp("yp", nb, k, L::d_out);
      layer.prefill(ws, st, time_slice(x, 0, k), yp);
      err = std::max(err, expect_rows(yp, 0));
    }
    for (int t = k; t < nt; ++t) {
      Tensor<T***, Space> ys("ys", nb, 1, L::d_out);
      layer.step(ws, st, time_slice(x, t, t + 1), ys);
      err = std::max(err, expect_rows(ys, t));
    }
    INFO("prefill " << k << " then " << nt - k << " steps: error " << err << " (relative to max |y|)");
    CHECK(err <= tol);
    CHECK(st.position == nt);
    testing::report("decode_vs_forward", "mamba k=" + std::to_string(k), Space::name(), err);
  }
  // Snapshot after a prefill, run on, restore, run again: the same outputs bit for bit.
  ws.release({});
  auto st = layer.make_state(nb);
  Tensor<T***, Space> yp("yp", nb, 4, L::d_out);
  layer.prefill(ws, st, time_slice(x, 0, 4), yp);
  const auto snap = layer.snapshot(st);
  auto run_on = [&] {
    std::vector<double> out;
    for (int t = 4; t < nt; ++t) {
      Tensor<T***, Space> ys("ys", nb, 1, L::d_out);
      layer.step(ws, st, time_slice(x, t, t + 1), ys);
      const auto v = testing::to_vector(ys);
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  };
  const auto first = run_on();
  CHECK(st.position == nt);
  layer.restore(st, snap);
  CHECK(st.position == 4);
  const auto second = run_on();
  CHECK(first == second);
  // The snapshot is a deep copy: stepping the restored state did not change it.
  CHECK(snap.position == 4);
  auto again = layer.make_state(nb);
  layer.restore(again, snap);
  CHECK(testing::to_vector(again.h) == testing::to_vector(snap.h));
}
}  // namespace

HYBRIDSEQ_SPACE_TEST_CASE("mamba: prefill + steps reproduce forward; snapshot/restore", "[mamba][decode]") {
  SECTION("float") {
    check_decoding<cases::MambaSmall, float, TestType>(1e-5);
  }
  SECTION("double") {
    check_decoding<cases::MambaSmall, double, TestType>(1e-12);
  }
}

// ---------------------------------------------------------------------------------------------
// Initialisation and errors
// ---------------------------------------------------------------------------------------------

TEST_CASE("mamba: initialisation follows the reference", "[mamba][host]") {
  using L = layers::Mamba<layers::MambaShape{.d_model = 64, .d_state = 8}, double, Kokkos::Serial>;
  static_assert(L::d_inner == 128 && L::dt_rank == 4);
  L m;
  core::initialize(m, 1234);
  double a_err = 0, lo = 1e9, hi = 0, w_max = 0, conv_max = 0;
  core::for_each_parameter(m, [&](std::string_view name, auto& p) {
    const auto v = testing::to_vector(p.value());
    if (name == "A_log") {
      for (int d = 0; d < L::d_inner; ++d)
        for (int n = 0; n < L::d_state; ++n)
          a_err = std::max(a_err, std::abs(v[d * L::d_state + n] - std::log(n + 1.0)));
    } else if (name == "D") {
      for (double e : v) CHECK(e == 1.0);
    } else if (name == "dt_proj.bias") {
      for (double e : v) {
        const double dt = std::log1p(std::exp(e));
        lo = std::min(lo, dt);
        hi = std::max(hi, dt);
      }
    } else if (name == "dt_proj.weight") {
      for (double e : v) w_max = std::max(w_max, std::abs(e));
    } else if (name == "conv1d.weight" || name == "conv1d.bias") {
      for (double e : v) conv_max = std::max(conv_max, std::abs(e));
    }
  });
  CHECK(a_err <= 1e-15);
  // softplus(dt_proj.bias) is log-uniform in [1e-3, 0.1]: 128 draws cover most of the range.
  CHECK(lo >= 1e-3 * (1 - 1e-12));
  CHECK(hi <= 0.1 * (1 + 1e-12));
  CHECK(lo < 3e-3);
  CHECK(hi > 3e-2);
  CHECK(w_max <= 0.5);  // U(±dt_rank^-½), dt_rank 4
  CHECK(w_max > 0.4);
  CHECK(conv_max <= 0.5);  // U(±1/√K), K 4
}

TEST_CASE("mamba: wrong shapes and options are refused with the API name and values", "[mamba][errors][host]") {
  using S = Kokkos::Serial;
  using L = layers::Mamba<cases::mamba_small, float, S>;
  core::Workspace<S> ws;
  L m;
  L::Saved saved;
  Tensor<float***, S> x_bad("x", 2, 7, 9), y("y", 2, 7, 8), x("x", 2, 7, 8), y_bad("y", 2, 6, 8);
  REQUIRE_THROWS_AS(m.forward(ws, x_bad, y, saved), shape_error);
  REQUIRE_THROWS_WITH(m.forward(ws, x_bad, y, saved),
                      "hybridseq::layers::Mamba::forward: x is (2,7,9), expected (B,T,8)");
  REQUIRE_THROWS_WITH(m.forward(ws, x, y_bad, saved),
                      "hybridseq::layers::Mamba::forward: y is (2,6,8), expected (2,7,8)");
  ws.release({});
  m.forward(ws, x, y, saved);
  REQUIRE_THROWS_WITH(m.backward(ws, saved, y_bad, x),
                      "hybridseq::layers::Mamba::backward: dy is (2,6,8), expected (2,7,8)");

  auto st = m.make_state(2);
  Tensor<float***, S> two("x", 2, 2, 8), out2("y", 2, 2, 8), three("x", 3, 5, 8), out3("y", 3, 5, 8);
  REQUIRE_THROWS_WITH(m.step(ws, st, two, out2), "hybridseq::layers::Mamba::step: x is (2,2,8), expected (2,1,8)");
  REQUIRE_THROWS_WITH(m.prefill(ws, st, three, out3),
                      "hybridseq::layers::Mamba::prefill: x is (3,5,8), expected (2,T,8)");
  auto one = m.make_state(1);
  REQUIRE_THROWS_AS(m.restore(st, one), shape_error);
  REQUIRE_THROWS_WITH(m.restore(st, one),
                      "hybridseq::layers::Mamba::restore: state has batch 2 but the snapshot has 1");
  REQUIRE_THROWS_AS(m.make_state(-1), value_error);

  L::Options bad;
  bad.scan_chunk = 0;
  REQUIRE_THROWS_WITH(L(bad), "hybridseq::layers::Mamba::Mamba: scan_chunk is 0, must be >= 1");
  bad.scan_chunk = 8;
  bad.dt_min = 0.5;
  REQUIRE_THROWS_AS(L(bad), value_error);

  ScanData<float, S> s(1, 3, 16, 4, 2);
  Tensor<float**, S> a_bad("A_log", 16, 5);
  Tensor<float***, S> ys("y", 1, 3, 16);
  REQUIRE_THROWS_WITH((kernels::selective_scan_forward<4, float>(S{}, s.u, s.dt, s.dt_bias, a_bad, s.bm(), s.cm(),
                                                                 s.d_skip, {}, ys, {}, {}, 2)),
                      "hybridseq::kernels::selective_scan_forward: A_log is (16,5), expected (16,4)");
  Tensor<float****, S> chunks_bad("chunks", 1, 1, 16, 4);
  REQUIRE_THROWS_WITH((kernels::selective_scan_forward<4, float>(S{}, s.u, s.dt, s.dt_bias, s.a_log, s.bm(), s.cm(),
                                                                 s.d_skip, {}, ys, chunks_bad, {}, 2)),
                      "hybridseq::kernels::selective_scan_forward: h_chunks is (1,1,16,4), expected (1,2,16,4)");
}
