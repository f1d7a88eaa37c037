// Attention: the tiled kernel against its naive oracle for every segment scheme and odd
// shapes; the attention branch through the testbed (gradients in double, PyTorch goldens);
// decoding invariants; bad input.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <hybridseq/core/rng.hpp>
#include <hybridseq/kernels/attention/attention.hpp>
#include <hybridseq/kernels/reference/attention.hpp>

#include "support/isa.hpp"
#include "support/spaces.hpp"

using namespace hybridseq;
namespace att = hybridseq::kernels::attention;

namespace {

/// Q, K, V packed as in the fused projection: rows of (H + 2 Hkv) · Dh per (b, t).
template <class T>
struct Packed {
  std::int64_t batch, tk, tq, q0;
  int heads, kv_heads, dh;
  std::vector<T> qkv, o, lse, d_o, dqkv, delta, dalpha, alpha;
  core::DropoutMask dropout{};

  Packed(std::int64_t b, std::int64_t n, std::int64_t queries, int h, int hkv, int d, std::uint64_t seed)
      : batch(b), tk(n), tq(queries), q0(n - queries), heads(h), kv_heads(hkv), dh(d) {
    const std::int64_t row = std::int64_t(h + 2 * hkv) * d;
    qkv.resize(b * n * row);
    dqkv.assign(b * n * row, T(0));
    o.assign(b * queries * h * d, T(0));
    d_o.resize(b * queries * h * d);
    lse.assign(b * h * queries, T(0));
    delta.assign(b * h * queries, T(0));
    dalpha.assign(b * h * att::query_tiles(queries), T(0));
    const core::CounterRng rng(seed, 5);
    for (std::size_t i = 0; i < qkv.size(); ++i) qkv[i] = T(rng.normal(i));
    for (std::size_t i = 0; i < d_o.size(); ++i) d_o[i] = T(rng.normal(1 << 24 | i));
    for (int i = 0; i < h; ++i) alpha.push_back(T(0.4 + 0.1 * i));
  }
  std::int64_t row() const { return std::int64_t(heads + 2 * kv_heads) * dh; }

  /// Where the kernels read and write: the vectors themselves, or their copies in device memory.
  struct Buffers {
    T *qkv, *o, *lse, *d_o, *dqkv, *delta, *dalpha, *alpha;
  };
  Buffers host() {
    return {qkv.data(), o.data(), lse.data(), d_o.data(), dqkv.data(), delta.data(), dalpha.data(), alpha.data()};
  }
  // Queries are the last tq positions: their rows start at q0.
  att::AttentionArgs<T> args(const Buffers& m) const {
    return {{m.qkv + q0 * row(), tk * row(), row(), dh},
            {m.qkv + heads * dh, tk * row(), row(), dh},
            {m.qkv + (heads + kv_heads) * dh, tk * row(), row(), dh},
            {m.o, tq * heads * dh, heads * dh, dh},
            m.lse,
            m.alpha,
            batch,
            tq,
            tk,
            q0,
            heads,
            kv_heads,
            dh,
            dropout};
  }
  att::AttentionGrads<T> grads(const Buffers& m) const {
    return {{m.d_o, tq * heads * dh, heads * dh, dh},
            {m.dqkv + q0 * row(), tk * row(), row(), dh},
            {m.dqkv + heads * dh, tk * row(), row(), dh},
            {m.dqkv + (heads + kv_heads) * dh, tk * row(), row(), dh},
            m.delta,
            m.dalpha};
  }
  att::AttentionArgs<T> args() { return args(host()); }
  att::AttentionGrads<T> grads() { return grads(host()); }

  /// Runs `kernels(args, grads)` on Space: in place on a host space; on a device space on
  /// copies of every buffer, whose outputs are copied back.
  template <class Space, class Kernels>
  void run_on(Kernels&& kernels) {
    if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Space::memory_space>::accessible) {
      kernels(args(), grads());
    } else {
      using View = Kokkos::View<T*, typename Space::memory_space>;
      std::vector<std::vector<T>*> all{&qkv, &o, &lse, &d_o, &dqkv, &delta, &dalpha, &alpha};
      std::vector<View> copies;
      for (auto* v : all) {
        copies.emplace_back("attention.test", v->size());
        Kokkos::deep_copy(copies.back(), Kokkos::View<const T*, Kokkos::HostSpace>(v->data(), v->size()));
      }
      kernels(args({copies[0].data(), copies[1].data(), copies[2].data(), copies[3].data(), copies[4].data(),
                    copies[5].data(), copies[6].data(), copies[7].data()}),
              grads({copies[0].data(), copies[1].data(), copies[2].data(), copies[3].data(), copies[4].data(),
                     copies[5].data(), copies[6].data(), copies[7].data()}));
      Space().fence();
      for (std::size_t i = 0; i < all.size(); ++i)
        Kokkos::deep_copy(Kokkos::View<T*, Kokkos::HostSpace>(all[i]->data(), all[i]->size()), copies[i]);
    }
  }
};

template <class T, class U>
double max_rel(const std::vector<T>& a, const std::vector<U>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(double(a[i]) - double(b[i])));
    den = std::max(den, std::abs(double(b[i])));
  }
  return den == 0 ? num : num / den;
}

/// A dropout mask of probability p from a training pass of its own.
inline core::DropoutMask dropout_mask(double p, std::uint64_t pass) {
  core::DropoutSites sites;
  sites.start(7, pass);
  return sites.next(p);
}

/// The kernel under test: the one att::forward/backward choose for the space (the tiled
/// host kernel on Serial and OpenMP), or the team kernel that device spaces get.
enum class Kernel { dispatched, team };

/// The kernel's ∂L/∂α partials (per batch, head and query tile), summed per head, against the
/// oracle's per-head values.
template <class T>
double dalpha_error(const Packed<T>& tiled, const std::vector<long double>& dalpha, std::int64_t batch, int heads,
                    std::int64_t tq) {
  std::vector<double> per_head(heads, 0.0), want(heads);
  const auto nq = att::query_tiles(tq);
  for (std::int64_t b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (std::int64_t t = 0; t < nq; ++t) per_head[h] += tiled.dalpha[(b * heads + h) * nq + t];
  for (int h = 0; h < heads; ++h) want[h] = double(dalpha[h]);
  return max_rel(per_head, want);
}

template <class Scheme, class Space, Kernel kernel = Kernel::dispatched>
void check_against_oracle(std::int64_t batch, std::int64_t n, int heads, int kv_heads, int dh, double p = 0) {
  const std::int64_t tq = Scheme::query_count(n);
  Packed<double> tiled(batch, n, tq, heads, kv_heads, dh, 11 + n), ref = tiled;
  tiled.dropout = ref.dropout = dropout_mask(p, std::uint64_t(n));
  tiled.template run_on<Space>([](const att::AttentionArgs<double>& a, const att::AttentionGrads<double>& g) {
    if constexpr (kernel == Kernel::team) {
      att::team::forward(Space{}, a, Scheme::band);
      att::team::backward(Space{}, a, g, Scheme::band);
    } else {
      att::forward(Space{}, a, Scheme::band);
      att::backward(Space{}, a, g, Scheme::band);
    }
    Space().fence();
  });
  kernels::reference::attention_forward(ref.args(), Scheme::band);
  std::vector<long double> dalpha;
  kernels::reference::attention_backward(ref.args(), ref.grads(), Scheme::band, &dalpha);
  INFO(Scheme::name << " B=" << batch << " T=" << n << " H=" << heads << " Hkv=" << kv_heads << " Dh=" << dh
                    << " dropout " << p);
  CHECK(max_rel(tiled.o, ref.o) < 1e-12);
  CHECK(max_rel(tiled.lse, ref.lse) < 1e-12);
  CHECK(max_rel(tiled.dqkv, ref.dqkv) < 1e-11);
  CHECK(dalpha_error(tiled, dalpha, batch, heads, tq) < 1e-11);
}

/// The float kernel (each ISA copy runs this) against the double oracle on the same
/// float-rounded inputs; a rerun must be bit-identical.
template <class Scheme, class Space>
void check_float_against_oracle(std::int64_t batch, std::int64_t n, int heads, int kv_heads, int dh, double p = 0) {
  const std::int64_t tq = Scheme::query_count(n);
  Packed<float> tiled(batch, n, tq, heads, kv_heads, dh, 11 + n);
  Packed<double> ref(batch, n, tq, heads, kv_heads, dh, 11 + n);
  ref.qkv.assign(tiled.qkv.begin(), tiled.qkv.end());
  ref.d_o.assign(tiled.d_o.begin(), tiled.d_o.end());
  ref.alpha.assign(tiled.alpha.begin(), tiled.alpha.end());
  tiled.dropout = ref.dropout = dropout_mask(p, std::uint64_t(n));
  const auto run = [](const att::AttentionArgs<float>& a, const att::AttentionGrads<float>& g) {
    att::forward(Space{}, a, Scheme::band);
    att::backward(Space{}, a, g, Scheme::band);
    Space().fence();
  };
  tiled.template run_on<Space>(run);
  kernels::reference::attention_forward(ref.args(), Scheme::band);
  std::vector<long double> dalpha;
  kernels::reference::attention_backward(ref.args(), ref.grads(), Scheme::band, &dalpha);
  INFO(Scheme::name << " B=" << batch << " T=" << n << " H=" << heads << " Hkv=" << kv_heads << " Dh=" << dh
                    << " dropout " << p << " isa " << kernels::isa_name(kernels::host_isa()));
  CHECK(max_rel(tiled.o, ref.o) < 1e-5);
  CHECK(max_rel(tiled.lse, ref.lse) < 1e-5);
  CHECK(max_rel(tiled.dqkv, ref.dqkv) < 3e-5);
  CHECK(dalpha_error(tiled, dalpha, batch, heads, tq) < 3e-5);
  Packed<float> again = tiled;
  again.template run_on<Space>(run);
  CHECK(again.o == tiled.o);
  CHECK(again.lse == tiled.lse);
  CHECK(again.dqkv == tiled.dqkv);
  CHECK(again.dalpha == tiled.dalpha);
}

/// The bf16 tensor-core kernels against the double oracle on the same inputs (Q, K, V, dO)
/// rounded to bf16. Their products are exact and accumulate in fp32, so the LSE is within fp32
/// rounding; the output also carries the probabilities' rounding to bf16 (2⁻⁹ relative each),
/// so it is within 2⁻⁸ of the largest |V|; the gradients carry the rounding of P and dS, 1 %
/// of the largest (measured ≤ 0.6 %), the temperature's per-head sums 10 % (sums of terms of
/// both signs that cancel; measured ≤ 2.8 %; the unscaled score in place of the scaled one is
/// off by 30–60 %). A fragment in the wrong place is off by the size of V itself.
template <class Scheme, class Space>
void check_bf16_against_oracle(std::int64_t batch, std::int64_t n, int heads, int kv_heads, int dh, double p = 0) {
  const std::int64_t tq = Scheme::query_count(n);
  Packed<float> mma(batch, n, tq, heads, kv_heads, dh, 17 + n);
  const auto round = [](std::vector<float>& v) {
    for (float& x : v) x = kernels::detail::bits_float(att::mma::detail::bf16(x) << 16);
  };
  round(mma.qkv);
  round(mma.d_o);
  Packed<double> ref(batch, n, tq, heads, kv_heads, dh, 17 + n);
  ref.qkv.assign(mma.qkv.begin(), mma.qkv.end());
  ref.d_o.assign(mma.d_o.begin(), mma.d_o.end());
  ref.alpha.assign(mma.alpha.begin(), mma.alpha.end());
  mma.dropout = ref.dropout = dropout_mask(p, std::uint64_t(n));
  const auto run = [](const att::AttentionArgs<float>& a, const att::AttentionGrads<float>& g) {
    att::forward(Space{}, a, Scheme::band, att::Precision::bf16);
    att::backward(Space{}, a, g, Scheme::band, att::Precision::bf16);
    Space().fence();
  };
  mma.template run_on<Space>(run);
  kernels::reference::attention_forward(ref.args(), Scheme::band);
  std::vector<long double> dalpha;
  kernels::reference::attention_backward(ref.args(), ref.grads(), Scheme::band, &dalpha);
  double v_max = 0, o_err = 0;
  for (float x : mma.qkv) v_max = std::max(v_max, double(std::abs(x)));
  for (std::size_t i = 0; i < mma.o.size(); ++i) o_err = std::max(o_err, std::abs(double(mma.o[i]) - ref.o[i]));
  INFO(Scheme::name << " B=" << batch << " T=" << n << " H=" << heads << " Hkv=" << kv_heads << " Dh=" << dh
                    << " dropout " << p);
  CHECK(max_rel(mma.lse, ref.lse) < 1e-5);
  CHECK(o_err < std::ldexp(v_max, -8));
  if (n > 8) CHECK(o_err > 0);  // the probabilities did round: this is not the fp32 kernel
  CHECK(max_rel(mma.dqkv, ref.dqkv) < 1e-2);
  CHECK(dalpha_error(mma, dalpha, batch, heads, tq) < 0.1);
  Packed<float> again = mma;  // deterministic: a rerun gives the same bits
  again.template run_on<Space>(run);
  CHECK(again.o == mma.o);
  CHECK(again.dqkv == mma.dqkv);
  CHECK(again.dalpha == mma.dalpha);
}

}  // namespace

HYBRIDSEQ_SPACE_TEST_CASE("tiled attention matches the naive oracle for every scheme", "[attention][kernels]") {
  using S = TestType;
  for (std::int64_t n : {1, 7, 64, 70, 130}) {
    check_against_oracle<att::Causal, S>(2, n, 4, 2, 8);
    check_against_oracle<att::Causal, S>(1, n, 3, 1, 5);  // Hkv = 1, odd head dim
    check_against_oracle<att::SlidingWindow<20>, S>(1, n, 2, 2, 4);
    check_against_oracle<att::Bidirectional, S>(1, n, 2, 1, 4);
  }
  for (std::int64_t n : {10, 70, 130}) check_against_oracle<att::SSplit<10>, S>(2, n, 2, 2, 4);
  for (std::int64_t n : {16, 80, 144}) check_against_oracle<att::EcpPairs<16>, S>(2, n, 2, 1, 4);
  for (std::int64_t n : {3, 70, 130}) check_against_oracle<att::PerceiverCross<3>, S>(2, n, 2, 2, 4);
  check_against_oracle<att::EcpPairs<100>, S>(1, 300, 2, 2, 8);  // segments larger than a tile
  check_against_oracle<att::PerceiverCross<70>, S>(1, 200, 2, 2, 8);
}

HYBRIDSEQ_SPACE_TEST_CASE("team attention kernels (the device algorithm) match the naive oracle",
                          "[attention][kernels][team]") {
  using S = TestType;
  constexpr auto team = Kernel::team;
  for (std::int64_t n : {1, 7, 64, 70, 130}) {
    check_against_oracle<att::Causal, S, team>(2, n, 4, 2, 8);
    check_against_oracle<att::Causal, S, team>(1, n, 3, 1, 5);
    check_against_oracle<att::SlidingWindow<20>, S, team>(1, n, 2, 2, 4, 0.1);
    check_against_oracle<att::Bidirectional, S, team>(1, n, 2, 1, 4);
  }
  check_against_oracle<att::SSplit<10>, S, team>(2, 70, 2, 2, 4);
  check_against_oracle<att::EcpPairs<16>, S, team>(2, 80, 2, 1, 4, 0.5);
  check_against_oracle<att::PerceiverCross<70>, S, team>(1, 200, 2, 2, 8, 0.2);
  check_against_oracle<att::EcpPairs<100>, S, team>(1, 300, 2, 2, 8);
  // The register copies at their bounds and between them (Dh 40 runs the 64-lane copy with
  // lanes predicated off); keys cross several staged blocks.
  check_against_oracle<att::Causal, S, team>(1, 100, 2, 1, 32, 0.2);
  check_against_oracle<att::Causal, S, team>(2, 70, 2, 2, 40);
  check_against_oracle<att::SlidingWindow<20>, S, team>(1, 130, 2, 1, 64);
  // Dh > 64 runs the in-memory copy; Dh = 200 stages 7 rows per step (24 KB of doubles), so
  // blocks end mid-step.
  check_against_oracle<att::Causal, S, team>(1, 150, 2, 1, 200, 0.3);
  // The in-memory copy under bands whose ends are not the causal ones (its key ranges per row
  // and query ranges per key).
  check_against_oracle<att::EcpPairs<16>, S, team>(2, 80, 2, 1, 72, 0.5);
  check_against_oracle<att::SSplit<10>, S, team>(1, 70, 2, 2, 72);
  check_against_oracle<att::PerceiverCross<70>, S, team>(1, 200, 2, 2, 72);
}

HYBRIDSEQ_SPACE_TEST_CASE("bf16 tensor-core attention matches the oracle on bf16-rounded inputs",
                          "[attention][kernels][bf16]") {
  using S = TestType;
  for (std::int64_t n : {1, 7, 64, 70, 130}) {
    check_bf16_against_oracle<att::Causal, S>(2, n, 4, 2, 16);
    check_bf16_against_oracle<att::Causal, S>(1, n, 3, 1, 5);  // Hkv = 1, odd head dim
    check_bf16_against_oracle<att::SlidingWindow<20>, S>(1, n, 2, 2, 8, 0.1);
    check_bf16_against_oracle<att::Bidirectional, S>(1, n, 2, 1, 24);
  }
  check_bf16_against_oracle<att::SSplit<10>, S>(2, 70, 2, 2, 4);
  check_bf16_against_oracle<att::EcpPairs<16>, S>(2, 80, 2, 1, 40, 0.5);
  check_bf16_against_oracle<att::PerceiverCross<70>, S>(1, 200, 2, 2, 8, 0.2);
  check_bf16_against_oracle<att::EcpPairs<100>, S>(1, 300, 2, 2, 8);
  // Each register bound (32, 64, 128) at and between its sizes; keys over several blocks. At
  // 100 and 128 the dK/dV kernel splits the dims over two teams and dQ steps 32 keys.
  check_bf16_against_oracle<att::Causal, S>(1, 200, 2, 1, 32, 0.2);
  check_bf16_against_oracle<att::Causal, S>(2, 130, 4, 2, 64);
  check_bf16_against_oracle<att::SlidingWindow<100>, S>(1, 150, 2, 2, 100);
  check_bf16_against_oracle<att::Causal, S>(1, 140, 2, 1, 128, 0.3);
  check_bf16_against_oracle<att::Causal, S>(2, 130, 4, 2, 72);  // the second dK/dV team: 8 dims
  check_bf16_against_oracle<att::EcpPairs<16>, S>(2, 96, 2, 1, 128, 0.2);
  check_bf16_against_oracle<att::SSplit<10>, S>(1, 70, 2, 2, 100);
}

TEST_CASE("bf16 tensor-core attention refuses what it cannot take", "[attention][bf16][errors][host]") {
  Packed<float> big(1, 8, 8, 2, 2, 136, 1);
  CHECK_THROWS_WITH(
      att::mma::forward(Kokkos::DefaultHostExecutionSpace{}, big.args(), att::Causal::band),
      Catch::Contains("hybridseq::kernels::attention::mma::forward") && Catch::Contains("head dims 1 to 128, got 136"));
  CHECK_THROWS_WITH(att::mma::backward(Kokkos::DefaultHostExecutionSpace{}, big.args(), big.grads(), att::Causal::band),
                    Catch::Contains("hybridseq::kernels::attention::mma::backward") &&
                        Catch::Contains("head dims 1 to 128, got 136"));
  Packed<double> wide(1, 8, 8, 2, 2, 8, 1);
  CHECK_THROWS_WITH(
      att::forward(Kokkos::DefaultHostExecutionSpace{}, wide.args(), att::Causal::band, att::Precision::bf16),
      Catch::Contains("attention::forward: bf16 products take float inputs, got 8-byte scalars"));
}

HYBRIDSEQ_SPACE_TEST_CASE("tiled attention with dropout on the probabilities matches the oracle",
                          "[attention][kernels][dropout]") {
  using S = TestType;
  for (std::int64_t n : {1, 70, 130}) {
    check_against_oracle<att::Causal, S>(2, n, 4, 2, 8, 0.3);
    check_against_oracle<att::SlidingWindow<20>, S>(1, n, 2, 2, 4, 0.1);
  }
  check_against_oracle<att::EcpPairs<16>, S>(2, 80, 2, 1, 4, 0.5);
  check_against_oracle<att::PerceiverCross<70>, S>(1, 200, 2, 2, 8, 0.2);
}

HYBRIDSEQ_SPACE_TEST_CASE("tiled attention in float matches the oracle on every ISA copy",
                          "[attention][kernels][isa]") {
  using S = TestType;
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename S::memory_space>::accessible) {
    testing::for_each_isa([] {
      for (std::int64_t n : {1, 7, 64, 70, 130}) {
        check_float_against_oracle<att::Causal, S>(2, n, 4, 2, 16);  // whole AVX-512 vectors
        check_float_against_oracle<att::Causal, S>(1, n, 2, 2, 64);  // the benchmarked head dim
        check_float_against_oracle<att::Causal, S>(1, n, 3, 1, 8);   // AVX2 vectors only
        check_float_against_oracle<att::Causal, S>(1, n, 2, 1, 5);   // the generic copy
        check_float_against_oracle<att::SlidingWindow<20>, S>(1, n, 2, 2, 32);
        check_float_against_oracle<att::Bidirectional, S>(1, n, 2, 1, 48);
      }
      check_float_against_oracle<att::SSplit<10>, S>(2, 70, 2, 2, 16);
      check_float_against_oracle<att::EcpPairs<16>, S>(2, 144, 2, 1, 16, 0.5);
      check_float_against_oracle<att::EcpPairs<100>, S>(1, 300, 2, 2, 32);
      check_float_against_oracle<att::PerceiverCross<70>, S>(1, 200, 2, 2, 16, 0.2);
      check_float_against_oracle<att::Causal, S>(3, 300, 2, 1, 64);  // more tasks (30) than backward slots
    });
  }
}

#if HYBRIDSEQ_HAS_OPENMP
TEST_CASE("tiled attention backward is bit-identical at any thread count", "[attention][kernels][host]") {
  const auto run = []<class Space>(Space) {
    Packed<float> p(2, 300, 300, 4, 2, 64, 3);
    p.run_on<Space>([](const att::AttentionArgs<float>& a, const att::AttentionGrads<float>& g) {
      att::forward(Space{}, a, att::Causal::band);
      att::backward(Space{}, a, g, att::Causal::band);
      Space().fence();
    });
    return p;
  };
  const Packed<float> serial = run(Kokkos::Serial{}), threads = run(Kokkos::OpenMP{});
  CHECK(serial.o == threads.o);
  CHECK(serial.dqkv == threads.dqkv);
}
#endif

TEST_CASE("dropout masks keep 1 − p of the elements, scaled by 1/(1 − p)", "[attention][host][dropout]") {
  for (double p : {0.05, 0.3, 0.9}) {
    const auto mask = dropout_mask(p, 3);
    const std::uint64_t n = 200000;
    std::uint64_t kept = 0;
    for (std::uint64_t i = 0; i < n; ++i) kept += mask.keep(i);
    const double rate = double(kept) / double(n), sd = std::sqrt(p * (1 - p) / double(n));
    INFO("p " << p << ": kept " << rate);
    CHECK(std::abs(rate - (1 - p)) < 5 * sd);
    CHECK(mask.factor<double>(0) == (mask.keep(0) ? 1 / (1 - p) : 0.0));
  }
  CHECK_FALSE(dropout_mask(0, 3).active());
  // Distinct passes and sites draw distinct masks.
  core::DropoutSites sites;
  sites.start(7, 3);
  const auto a = sites.next(0.5), b = sites.next(0.5);
  std::uint64_t same_ab = 0, same_pass = 0;
  const auto c = dropout_mask(0.5, 4);
  for (std::uint64_t i = 0; i < 1000; ++i) same_ab += a.keep(i) == b.keep(i), same_pass += a.keep(i) == c.keep(i);
  CHECK(same_ab < 600);
  CHECK(same_pass < 600);
}

TEST_CASE("segment schemes count their score entries exactly", "[attention][host]") {
  // ECP at n = 4096, m = 256 computes m² + (s−1)·2m² = 2nm − m² entries at block granularity.
  constexpr std::int64_t n = 4096, m = 256;
  STATIC_REQUIRE(att::visited_entries<att::EcpPairs<256>>(n, m) == 2 * n * m - m * m);
  REQUIRE(double(att::visited_entries<att::EcpPairs<256>>(n, m)) / double(n * n) ==
          Approx(0.12109375));  // "12.1% of n²"
  STATIC_REQUIRE(att::visible_entries<att::Causal>(n) == n * (n + 1) / 2);
  STATIC_REQUIRE(att::visible_entries<att::SlidingWindow<256>>(n) == 256 * 257 / 2 + (n - 256) * 256);
  STATIC_REQUIRE(att::visible_entries<att::Bidirectional>(100) == 100 * 100);
  STATIC_REQUIRE(att::visible_entries<att::PerceiverCross<8>>(100) == 93 + 94 + 95 + 96 + 97 + 98 + 99 + 100);
  STATIC_REQUIRE(att::visible_entries<att::SSplit<10>>(100) == 10 * 100);
  // ECP's exact visible entries: s causal triangles + (s−1) full previous segments.
  STATIC_REQUIRE(att::visible_entries<att::EcpPairs<256>>(n) == 16 * (m * (m + 1) / 2) + 15 * m * m);
}

TEST_CASE("each scheme's band gives the key ranges of its definition", "[attention][host]") {
  // [key_begin, key_end) of query position t among n keys, against segment_schemes.hpp's table.
  const auto range = [](const att::Band& band, std::int64_t t, std::int64_t n) {
    return std::pair{band.key_begin(t, n), band.key_end(t, n)};
  };
  using R = std::pair<std::int64_t, std::int64_t>;
  CHECK(range(att::Causal::band, 0, 50) == R{0, 1});
  CHECK(range(att::Causal::band, 37, 50) == R{0, 38});
  CHECK(range(att::SlidingWindow<4>::band, 2, 50) == R{0, 3});
  CHECK(range(att::SlidingWindow<4>::band, 3, 50) == R{0, 4});  // the first full window
  CHECK(range(att::SlidingWindow<4>::band, 4, 50) == R{1, 5});
  CHECK(range(att::SlidingWindow<4>::band, 10, 50) == R{7, 11});
  CHECK(range(att::EcpPairs<16>::band, 5, 64) == R{0, 6});
  CHECK(range(att::EcpPairs<16>::band, 15, 64) == R{0, 16});  // the last of segment 0
  CHECK(range(att::EcpPairs<16>::band, 16, 64) == R{0, 17});  // segment 1 sees segment 0
  CHECK(range(att::EcpPairs<16>::band, 31, 64) == R{0, 32});
  CHECK(range(att::EcpPairs<16>::band, 32, 64) == R{16, 33});  // segment 2 no longer sees 0
  CHECK(range(att::EcpPairs<16>::band, 40, 64) == R{16, 41});
  CHECK(range(att::PerceiverCross<8>::band, 95, 100) == R{0, 96});
  CHECK(range(att::SSplit<10>::band, 9, 100) == R{0, 10});
  CHECK(range(att::SSplit<10>::band, 10, 100) == R{10, 20});  // a segment's first position
  CHECK(range(att::SSplit<10>::band, 15, 100) == R{10, 20});
  CHECK(range(att::SSplit<10>::band, 90, 97) == R{90, 97});  // the last segment, cut at n
  CHECK(range(att::Bidirectional::band, 3, 50) == R{0, 50});
}

TEST_CASE("a band refuses a window or segment length below 1", "[attention][host][errors]") {
  for (const auto kind : {att::Band::Kind::window, att::Band::Kind::pairs, att::Band::Kind::split})
    for (const std::int64_t size : {0, -3})
      CHECK_THROWS_WITH((att::Band{kind, size}),
                        Catch::Contains("hybridseq::kernels::attention::Band: a window or segment length must be at "
                                        "least 1, got " +
                                        std::to_string(size)));
  CHECK_NOTHROW(att::Band{att::Band::Kind::full});
  CHECK(att::Band{att::Band::Kind::window, 1}.key_begin(7, 10) == 7);
}

TEST_CASE("schemes refuse sequence lengths they cannot take", "[attention][host][errors]") {
  REQUIRE_THROWS_AS(att::EcpPairs<16>::check("api", 40), config_error);
  REQUIRE_THROWS_WITH(att::EcpPairs<16>::check("hybridseq::layers::Attention::forward", 40),
                      "hybridseq::layers::Attention::forward: ECP needs the sequence length to be a multiple of the "
                      "segment length 16, got T = 40 (pad to 48)");
  REQUIRE_THROWS_WITH(att::PerceiverCross<8>::check("api", 5),
                      Catch::Matchers::Contains("needs at least 8 positions (the latents), got T = 5"));
  REQUIRE_THROWS_AS(att::SSplit<4>::check("api", 10), config_error);
  REQUIRE_NOTHROW(att::EcpPairs<16>::check("api", 48));
}

// ---- the attention branch ----

#include "cases/attention_cases.hpp"
#include "support/testbed.hpp"

HYBRIDSEQ_SPACE_TEST_CASE("attention branch: finite-difference gradients in double", "[attention][gradcheck]") {
  testing::for_each_case(cases::AttentionCases{},
                         [&]<class Case>() { testing::check_gradients<Case, TestType>(1e-6); });
}

// Float tolerance: scores are sums of Dh products scaled by α (≈ 10 for cosine scores), and
// softmax/gradients amplify their rounding by α; 1e-4 relative + 1e-5 absolute covers it
// with margin while a wrong mask or head mapping is off by O(0.1) (see ATTENTION.md).
HYBRIDSEQ_SPACE_TEST_CASE("attention branch: PyTorch goldens in float", "[attention][golden]") {
  testing::for_each_case(cases::AttentionCases{},
                         [&]<class Case>() { testing::check_golden<Case, TestType>(1e-4, 1e-5); });
}

namespace {
/// A case of the attention branch with AttentionOptions::precision = bf16.
template <class Case>
struct Bf16 : Case {
  template <class L>
  static typename L::Options options() {
    auto o = Case::template options<L>();
    o.precision = att::Precision::bf16;
    return o;
  }
};

/// |a − b| over the largest |b|.
double relative_gap(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    num = std::max(num, std::abs(a[i] - b[i])), den = std::max(den, std::abs(b[i]));
  return num / den;
}
}  // namespace

// The branch with bf16 products against itself in fp32, same parameters and inputs: output and
// input gradient within bf16's rounding of the operands (2⁻⁹ relative each, amplified by the
// scores' multiplier; measured ≤ 0.9 % and ≤ 1.1 % of the largest), not equal (the option
// reached the kernels), on every case: cosine scores, GQA, RoPE, sliding window, ECP pairs,
// s-Split, PerceiverAR's cross rows.
HYBRIDSEQ_SPACE_TEST_CASE("attention branch with bf16 products: within bf16 rounding of fp32", "[attention][bf16]") {
  using S = TestType;
  testing::for_each_case(cases::AttentionCases{}, [&]<class Case>() {
    testing::Harness<Case, float, S> native;
    testing::Harness<Bf16<Case>, float, S> bf16;
    native.randomize(5);
    bf16.randomize(5);
    native.analytic();
    bf16.analytic();
    const auto y = testing::to_vector(bf16.y), y_ref = testing::to_vector(native.y);
    const auto dx = testing::to_vector(bf16.dx), dx_ref = testing::to_vector(native.dx);
    CHECK(relative_gap(y, y_ref) < 2e-2);
    CHECK(relative_gap(dx, dx_ref) < 3e-2);
    CHECK(y != y_ref);
  });
}

TEST_CASE("attention branch refuses bf16 products in double", "[attention][bf16][errors][host]") {
  using L = layers::Attention<cases::gqa16, att::Causal, double, Kokkos::DefaultHostExecutionSpace>;
  L::Options o;
  o.precision = att::Precision::bf16;
  CHECK_THROWS_AS(L(o), value_error);
  CHECK_THROWS_WITH(L(o),
                    "hybridseq::layers::Attention: AttentionOptions::precision bf16 needs a float layer, got "
                    "8-byte scalars");
}

HYBRIDSEQ_SPACE_TEST_CASE("attention branch: save/load round trip", "[attention][io]") {
  testing::for_each_case(cases::AttentionCases{}, [&]<class Case>() { testing::check_round_trip<Case, TestType>(); });
}

// ---- decoding ----

namespace {

template <class Layer, class Space>
std::vector<double> run_forward(const Layer& layer, const Tensor<double***, Space>& x) {
  core::Workspace<Space> ws;
  Tensor<double***, Space> y("y", x.extent(0), x.extent(1), x.extent(2));
  typename Layer::Saved saved;
  layer.forward(ws, x, y, saved);
  return testing::to_vector(y);
}

/// Runs positions [from, to) of x through prefill (one call) or steps (one call per token).
template <class Layer, class Space>
std::vector<double> run_decode(const Layer& layer, core::Workspace<Space>& ws, typename Layer::State& state,
                               const Tensor<double***, Space>& x, std::int64_t from, std::int64_t to, bool as_steps) {
  std::vector<double> out;
  const auto chunk = [&](std::int64_t a, std::int64_t b) {
    auto xs = Kokkos::subview(x, Kokkos::ALL, Kokkos::make_pair(a, b), Kokkos::ALL);
    Tensor<double***, Space> xc("xc", x.extent(0), b - a, x.extent(2)), yc("yc", x.extent(0), b - a, x.extent(2));
    Kokkos::deep_copy(xc, xs);
    layer.prefill(ws, state, xc, yc);
    return testing::to_vector(yc);
  };
  std::vector<std::vector<double>> pieces;
  if (as_steps)
    for (std::int64_t t = from; t < to; ++t) pieces.push_back(chunk(t, t + 1));
  else if (to > from)
    pieces.push_back(chunk(from, to));
  // Reassemble (B, T, D) order from per-chunk (B, t, D) pieces.
  const std::int64_t b = x.extent(0), d = x.extent(2);
  out.resize(b * (to - from) * d);
  std::int64_t t0 = 0;
  for (const auto& p : pieces) {
    const std::int64_t len = std::int64_t(p.size()) / (b * d);
    for (std::int64_t i = 0; i < b; ++i)
      for (std::int64_t t = 0; t < len; ++t)
        for (std::int64_t j = 0; j < d; ++j) out[(i * (to - from) + t0 + t) * d + j] = p[(i * len + t) * d + j];
    t0 += len;
  }
  return out;
}

template <class Layer, class Space>
void check_decode_invariants(std::int64_t n) {
  Layer layer;
  core::initialize(layer, 3);
  Tensor<double***, Space> x("x", 2, n, Layer::d_in);
  core::fill(Space{}, core::flat(x), core::Init::normal(1.0), 9, 1);
  const auto full = run_forward<Layer, Space>(layer, x);
  const std::int64_t b = 2, d = Layer::d_out;
  const auto slice = [&](const std::vector<double>& v, std::int64_t len, std::int64_t from, std::int64_t to) {
    std::vector<double> out;
    for (std::int64_t i = 0; i < b; ++i)
      for (std::int64_t t = from; t < to; ++t)
        for (std::int64_t j = 0; j < d; ++j) out.push_back(v[(i * len + t) * d + j]);
    return out;
  };
  for (std::int64_t k : {std::int64_t(0), std::int64_t(1), n / 2, n}) {
    core::Workspace<Space> ws;
    auto state = layer.make_state(2, n + 4);
    const auto head = run_decode<Layer, Space>(layer, ws, state, x, 0, k, false);
    const auto tail = run_decode<Layer, Space>(layer, ws, state, x, k, n, true);
    INFO("prefill " << k << " then " << (n - k) << " steps");
    CHECK(max_rel(head, slice(full, n, 0, k)) < 1e-12);
    CHECK(max_rel(tail, slice(full, n, k, n)) < 1e-12);
  }
  // Snapshot at k, wander off, restore: the same continuation. Truncate rolls back too.
  core::Workspace<Space> ws;
  auto state = layer.make_state(2, n + 4);
  const std::int64_t k = n / 2;
  run_decode<Layer, Space>(layer, ws, state, x, 0, k, false);
  const auto snap = layer.snapshot(state);
  const auto first = run_decode<Layer, Space>(layer, ws, state, x, k, n, true);
  layer.restore(state, snap);
  CHECK(state.length == k);
  CHECK(run_decode<Layer, Space>(layer, ws, state, x, k, n, true) == first);
  layer.truncate(state, k);
  CHECK(run_decode<Layer, Space>(layer, ws, state, x, k, n, true) == first);
  REQUIRE_THROWS_AS(layer.truncate(state, n + 1), value_error);
}

}  // namespace

HYBRIDSEQ_SPACE_TEST_CASE("attention decoding: forward == prefill + steps; snapshot/restore", "[attention][decode]") {
  using S = TestType;
  using namespace layers;
  check_decode_invariants<Attention<cases::gqa16, att::Causal, double, S>, S>(70);
  check_decode_invariants<Attention<cases::cosine16, att::Causal, double, S>, S>(9);
  check_decode_invariants<Attention<cases::neox8, att::SlidingWindow<4>, double, S>, S>(13);
  check_decode_invariants<Attention<cases::small8, att::SlidingWindow<20>, double, S>, S>(70);
  check_decode_invariants<Attention<cases::two_heads16_mqa, att::EcpPairs<3>, double, S>, S>(12);
  check_decode_invariants<Attention<cases::small8, att::EcpPairs<16>, double, S>, S>(80);
  static_assert(core::DecodableBranch<Attention<cases::gqa16, att::Causal, float, S>>);
}

TEST_CASE("attention refuses bad shapes, lengths and a full cache", "[attention][errors][host]") {
  using S = Kokkos::Serial;
  using namespace layers;
  core::Workspace<S> ws;
  Attention<cases::small8, att::EcpPairs<16>, float, S> ecp;
  typename decltype(ecp)::Saved saved;
  Tensor<float***, S> x("x", 1, 40, 8), y("y", 1, 40, 8);
  REQUIRE_THROWS_WITH(ecp.forward(ws, x, y, saved),
                      Catch::Matchers::Contains("hybridseq::layers::Attention::forward: ECP needs"));
  Tensor<float***, S> xw("x", 1, 32, 9), yw("y", 1, 32, 8);
  REQUIRE_THROWS_WITH(ecp.forward(ws, xw, yw, saved),
                      "hybridseq::layers::Attention::forward: x is (1,32,9), expected (B,T,8)");
  Attention<cases::two_heads16, att::PerceiverCross<3>, float, S> perceiver;
  typename decltype(perceiver)::Saved ps;
  Tensor<float***, S> xp("x", 2, 8, 16), yp_wrong("y", 2, 8, 16);
  REQUIRE_THROWS_WITH(perceiver.forward(ws, xp, yp_wrong, ps),
                      "hybridseq::layers::Attention::forward: y is (2,8,16), expected (2,3,16)");
  Attention<cases::small8, att::Causal, float, S> causal;
  auto state = causal.make_state(1, 4);
  Tensor<float***, S> x5("x", 1, 5, 8), y5("y", 1, 5, 8);
  REQUIRE_THROWS_WITH(causal.prefill(ws, state, x5, y5),
                      Catch::Matchers::Contains("KV cache holds 4 positions; 0 used + 5 new exceeds it"));
}
