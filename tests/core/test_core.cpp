// Core: errors and shape checks, flat tuple, RNG/initialisers, dropout masks and training
// passes, workspace (peak bytes and their labels), parameter visitor, describe(), GEMM facade
// against its naive oracle.
#include <catch2/catch.hpp>

#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <hybridseq/core.hpp>
#include <hybridseq/kernels/activations.hpp>
#include <hybridseq/kernels/gemm.hpp>
#include <hybridseq/kernels/reference/gemm.hpp>
#include <hybridseq/kernels/tile_gemm.hpp>

#include "support/spaces.hpp"

using namespace hybridseq;
namespace simd = hybridseq::kernels::simd;
using Catch::Matchers::Contains;

TEST_CASE("check_shape names the API and the actual extents", "[core][host]") {
  Tensor<float***, Kokkos::Serial> x("x", 2, 17, 96);
  REQUIRE_NOTHROW(core::check_shape("api", "x", x, core::B, core::T, core::dim(96)));
  REQUIRE_THROWS_AS(core::check_shape("hybridseq::layers::Linear::forward", "x", x, core::B, core::T, core::dim(128)),
                    shape_error);
  REQUIRE_THROWS_WITH(core::check_shape("hybridseq::layers::Linear::forward", "x", x, core::B, core::T, core::dim(128)),
                      "hybridseq::layers::Linear::forward: x is (2,17,96), expected (B,T,128)");
}

TEST_CASE("check_finite reports the first non-finite element", "[core][host]") {
  Tensor<double*, Kokkos::Serial> v("v", 5);
  REQUIRE_NOTHROW(core::check_finite("api", "v", v));
  v(3) = std::numeric_limits<double>::infinity();
  v(4) = std::numeric_limits<double>::quiet_NaN();
  REQUIRE_THROWS_WITH(core::check_finite("api", "v", v), Contains("non-finite value inf at flat index 3"));
}

TEST_CASE("flat tuple stores, indexes and iterates in order", "[core][host]") {
  core::FlatTuple<int, double, std::string> t;
  core::get<0>(t) = 3;
  core::get<1>(t) = 2.5;
  core::get<2>(t) = "x";
  static_assert(decltype(t)::size == 3);
  static_assert(std::is_same_v<core::element_t<1, decltype(t)>, double>);
  std::vector<std::size_t> order;
  core::for_each_indexed(t, [&](auto&, auto i) { order.push_back(i()); });
  REQUIRE(order == std::vector<std::size_t>{0, 1, 2});
  REQUIRE(core::get<0>(t) == 3);
  REQUIRE(core::get<2>(t) == "x");
}

TEST_CASE("counter RNG: moments, independence of streams", "[core][host]") {
  const core::CounterRng rng(42, 7), other(42, 8);
  double sum = 0, sq = 0;
  int same = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double z = rng.normal(i);
    sum += z;
    sq += z * z;
    same += rng.bits(i) == other.bits(i);
  }
  REQUIRE(std::abs(sum / n) < 0.01);
  REQUIRE(std::abs(sq / n - 1.0) < 0.01);
  REQUIRE(same == 0);
  REQUIRE(rng.uniform(0) > 0.0);
  REQUIRE(rng.uniform(0) < 1.0);
}

namespace {
template <class Space>
struct TinyModule {
  core::Parameter<double, Space> w{{3, 4}, core::Role::weight, core::Init::normal(0.5)};
  core::Parameter<double, Space> g{{4}, core::Role::norm_gain, core::Init::ones()};
  template <class V>
  void visit_parameters(V&& visit) {
    visit("w", w);
    visit("g", g);
  }
};
template <class Space>
struct Outer {
  TinyModule<Space> blocks[2];
  core::Parameter<double, Space> head{{2}, core::Role::bias, core::Init::uniform(-1, 1)};
  template <class V>
  void visit_parameters(V&& visit) {
    for (int i = 0; i < 2; ++i) visit(std::to_string(i), blocks[i]);
    visit("head", head);
  }
};

template <class Space>
std::map<std::string, std::vector<double>> snapshot(Outer<Space>& m) {
  std::map<std::string, std::vector<double>> out;
  core::for_each_parameter(m, [&](std::string_view name, auto& p) {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, p.value());
    out[std::string(name)] = std::vector<double>(h.data(), h.data() + h.extent(0));
  });
  return out;
}
}  // namespace

HYBRIDSEQ_SPACE_TEST_CASE("parameter visitor: dotted names, counts, init, zero_grad", "[core]") {
  Outer<TestType> m;
  std::vector<std::string> names;
  core::for_each_parameter(m, [&](std::string_view n, auto&) { names.emplace_back(n); });
  REQUIRE(names == std::vector<std::string>{"0.w", "0.g", "1.w", "1.g", "head"});
  REQUIRE(core::parameter_count(m) == 2 * (12 + 4) + 2);

  core::initialize(m, 1234);
  auto s = snapshot(m);
  REQUIRE(s["0.g"] == std::vector<double>(4, 1.0));
  REQUIRE(s["0.w"] != s["1.w"]);  // streams keyed by name differ
  for (double v : s["head"]) REQUIRE((v > -1 && v < 1));

  // Same seed, same values, on a different execution space and thread count.
  Outer<Kokkos::Serial> reference;
  core::initialize(reference, 1234);
  REQUIRE(snapshot(reference) == s);

  Kokkos::deep_copy(m.blocks[1].w.grad(), 3.0);
  core::zero_grad(m);
  auto g = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, m.blocks[1].w.grad());
  for (std::size_t i = 0; i < g.extent(0); ++i) REQUIRE(g(i) == 0.0);
}

HYBRIDSEQ_SPACE_TEST_CASE("dropout masks are the counter RNG's, identical on every execution space",
                          "[core][dropout]") {
  using Space = TestType;
  core::Workspace<Space> ws;
  constexpr std::int64_t n = 5000;
  Tensor<double*, Space> x("x", n);
  Kokkos::deep_copy(x, 1.0);
  core::DropoutMask mask;
  {
    core::TrainingPass<Space> pass(ws, 11, 5);
    CHECK(ws.dropout().training());
    CHECK_FALSE(ws.dropout().next(0).active());  // p = 0 takes no site
    mask = ws.dropout().next(0.3);
    {
      core::InferencePass<Space> inference(ws);
      CHECK_FALSE(ws.dropout().training());
      CHECK_FALSE(ws.dropout().next(0.3).active());
    }
    CHECK(ws.dropout().training());
  }
  CHECK_FALSE(ws.dropout().training());
  core::apply_dropout(Space{}, mask, x);
  Space().fence();
  // The same mask from a host-only loop over the formula (site 0 of pass 5, seed 11).
  const core::CounterRng rng(11, (std::uint64_t(5) << 16) + 0);
  const auto threshold = std::uint32_t(0.3 * 4294967296.0);
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, x);
  std::int64_t mismatches = 0, dropped = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double want = std::uint32_t(rng.bits(std::uint64_t(i)) >> 32) >= threshold ? 1 / 0.7 : 0.0;
    mismatches += h(i) != want;
    dropped += h(i) == 0;
  }
  CHECK(mismatches == 0);
  CHECK(std::abs(double(dropped) / n - 0.3) < 0.03);
}

TEST_CASE("dropout options refuse probabilities outside [0, 1)", "[core][host][dropout]") {
  REQUIRE_THROWS_WITH(core::check_dropout("hybridseq::layers::Attention", "AttentionOptions::dropout", 1.0),
                      "hybridseq::layers::Attention: AttentionOptions::dropout must be in [0, 1), got 1");
  REQUIRE_THROWS_AS(core::check_dropout("api", "p", -0.1), value_error);
  REQUIRE_THROWS_AS(core::check_dropout("api", "p", std::nan("")), value_error);
  REQUIRE_NOTHROW(core::check_dropout("api", "p", 0.0));
  core::DropoutSites sites;
  REQUIRE_THROWS_WITH(sites.start(1, std::uint64_t(1) << 48), Contains("pass 281474976710656 is not below 2^48"));
}

HYBRIDSEQ_SPACE_TEST_CASE("workspace records exact peak bytes and rewinds", "[core]") {
  core::Workspace<TestType> ws(1024);
  REQUIRE(ws.peak_bytes() == 0);
  const auto m0 = ws.mark();
  auto a = ws.template allocate<float**>("a", 10, 10);  // 400 B -> 448 aligned
  REQUIRE(ws.bytes_in_use() == 448);
  {
    core::WorkspaceScope scope(ws);
    auto b = ws.template allocate<double*>("b", 200);  // 1600 B: larger than a chunk
    REQUIRE(ws.bytes_in_use() == 448 + 1600);
    Kokkos::deep_copy(Kokkos::subview(b, 199), 1.0);  // the last element is writable
  }
  REQUIRE(ws.bytes_in_use() == 448);
  REQUIRE(ws.peak_bytes() == 448 + 1600);
  auto c = ws.template allocate_zeroed<float*>("c", 3);
  REQUIRE(Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, c)(2) == 0.0f);
  ws.release(m0);
  REQUIRE(ws.bytes_in_use() == 0);
  ws.reset_peak();
  REQUIRE(ws.peak_bytes() == 0);
  (void)a;
}

namespace {

/// Kilobytes of transparent huge pages backing [begin, end) of this process, from
/// /proc/self/smaps (the AnonHugePages of every mapping that overlaps the range).
std::int64_t huge_page_kib(std::uintptr_t begin, std::uintptr_t end) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool overlaps = false;
  std::int64_t kib = 0;
  while (std::getline(smaps, line)) {
    std::uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      overlaps = lo < end && hi > begin;
    } else if (overlaps && line.rfind("AnonHugePages:", 0) == 0) {
      kib += std::stoll(line.substr(14));
    }
  }
  return kib;
}

/// The kernel's transparent huge page mode ("always", "madvise", "never"), empty when unknown.
std::string huge_page_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string all;
  std::getline(in, all);
  const auto open = all.find('['), close = all.find(']');
  return open == std::string::npos || close == std::string::npos ? "" : all.substr(open + 1, close - open - 1);
}

}  // namespace

TEST_CASE("huge page advice: whole 2 MiB pages only; a workspace chunk gets them", "[core][host]") {
  REQUIRE(core::advise_huge_pages<Kokkos::HostSpace>(nullptr, std::size_t{64} << 20) == 0);
  std::vector<char> small(core::huge_page_bytes);  // no whole aligned huge page fits in 2 MiB at a malloc address
  if (reinterpret_cast<std::uintptr_t>(small.data()) % core::huge_page_bytes != 0)
    REQUIRE(core::advise_huge_pages<Kokkos::HostSpace>(small.data(), small.size()) == 0);

  const std::string mode = huge_page_mode();
  if (mode != "always" && mode != "madvise") {
    WARN("transparent huge pages are '" << mode << "' here: only the advice's range is checked");
    return;
  }
  // A 16 MiB chunk, then every page touched: the chunk was advised (and collapsed) as the arena
  // allocated it, so the kernel backs it with huge pages (under "madvise" nothing else would).
  core::Workspace<Kokkos::Serial> ws(std::size_t{16} << 20);
  auto t = ws.allocate<float*>("t", (std::size_t{16} << 20) / sizeof(float));
  Kokkos::deep_copy(t, 1.0f);
  const auto begin = reinterpret_cast<std::uintptr_t>(t.data());
  const std::int64_t kib = huge_page_kib(begin, begin + (std::size_t{16} << 20));
  INFO("AnonHugePages over the chunk: " << kib << " KiB (mode " << mode << ")");
  REQUIRE(kib >= 2048);
}

HYBRIDSEQ_SPACE_TEST_CASE("workspace footprints pad like the arena; reserve sizes it up front", "[core]") {
  REQUIRE(core::padded_bytes<float>(0) == 0);
  REQUIRE(core::padded_bytes<float>(1) == 64);
  REQUIRE(core::padded_bytes<float>(16) == 64);
  REQUIRE(core::padded_bytes<float>(17) == 128);
  REQUIRE(core::padded_bytes<double>(100) == 832);
  core::ArenaSteps steps;  // hold 64, a child peaking 256 leaving 128, hold 64
  steps.hold(64).run(256, 128).hold(64);
  REQUIRE(steps.level() == 256);
  REQUIRE(steps.peak() == 320);
  REQUIRE(core::Footprint{128, 320, 400}.training_peak() == 528);
  REQUIRE(core::Footprint{128, 600, 400}.training_peak() == 600);

  core::Workspace<TestType> ws(256);
  ws.reserve(4096);  // empty: one chunk of 4096
  REQUIRE(ws.capacity_bytes() == 4096);
  {
    core::WorkspaceScope scope(ws);
    ws.template allocate<float*>("a", 500);  // 2048 B
    ws.template allocate<float*>("b", 500);
    ws.reserve(1 << 20);  // something is allocated: a no-op
    REQUIRE(ws.capacity_bytes() == 4096);
  }
  REQUIRE(ws.peak_bytes() == 4096);
  REQUIRE(ws.capacity_bytes() == 4096);  // the pass fit: no second chunk
  ws.reserve(1024);                      // already large enough
  REQUIRE(ws.capacity_bytes() == 4096);
  ws.template allocate<float*>("c", 2000);  // 8000 B: grows a chunk
  REQUIRE(ws.capacity_bytes() == 4096 + 8000);
}

HYBRIDSEQ_SPACE_TEST_CASE("workspace attributes its peak to allocation labels", "[core]") {
  core::Workspace<TestType> ws(1024);
  REQUIRE(ws.peak_by_label().empty());
  const auto m0 = ws.mark();
  ws.template allocate<float*>("a", 100);  // 400 B -> 448
  {
    core::WorkspaceScope scope(ws);
    ws.template allocate<float*>("b", 10);  // 40 B -> 64, twice under one label
    ws.template allocate_zeroed<float*>("b", 10);
  }
  using Peaks = std::map<std::string, std::size_t, std::less<>>;
  REQUIRE(ws.peak_bytes() == 448 + 128);
  REQUIRE(ws.peak_by_label() == Peaks{{"a", 448}, {"b", 128}});
  ws.template allocate<float*>("c", 16);  // 64 B: below the peak, which stays attributed to a and b
  REQUIRE(ws.peak_by_label() == Peaks{{"a", 448}, {"b", 128}});
  ws.template allocate<double*>("c", 32);  // 256 B: a new peak, with b released
  REQUIRE(ws.peak_bytes() == 448 + 64 + 256);
  REQUIRE(ws.peak_by_label() == Peaks{{"a", 448}, {"c", 320}});
  std::size_t sum = 0;
  for (const auto& [label, bytes] : ws.peak_by_label()) sum += bytes;
  REQUIRE(sum == ws.peak_bytes());
  REQUIRE(core::describe(ws) == "peak  bytes=768\n  a  bytes=448\n  c  bytes=320\n");
  ws.release(m0);
  ws.reset_peak();
  REQUIRE(ws.peak_by_label().empty());
  ws.template allocate<float*>("b", 1);
  REQUIRE(ws.peak_by_label() == Peaks{{"b", 64}});
}

namespace {
template <class Space>
struct Wrapper {
  static constexpr std::string_view kind = "Wrapped";
  Outer<Space> inner;
  core::Parameter<double, Space> bias{{5}, core::Role::bias, core::Init::zeros()};
  template <class V>
  void visit_parameters(V&& visit) {
    visit("inner", inner);
    visit("bias", bias);
  }
};
template <auto N, class Layer>  // the shape of compose::Named
struct Tagged : Layer {
  static constexpr std::string_view child_name = "t";
};
template <class Space>
struct Holder {
  Tagged<0, TinyModule<Space>> t;
  template <class V>
  void visit_parameters(V&& visit) {
    visit("t", t);
  }
};
struct SelfNamed {
  std::string describe_name() const { return "Custom"; }
  template <class V>
  void visit_parameters(V&&) {}
};
}  // namespace

TEST_CASE("describe prints the module tree: names, kinds, shapes, counts, total", "[core][host]") {
  using S = Kokkos::Serial;
  CHECK(core::detail::bare_type_name("hybridseq::compose::ParallelBlock<hybridseq::layers::Linear<"
                                     "hybridseq::layers::LinearSpec{8l, 8l, true}, float, Kokkos::Serial>, "
                                     "hybridseq::compose::MeanMixer>") == "ParallelBlock");
  CHECK(core::detail::bare_type_name("ns::Outer<int>::Inner<std::vector<int> >") == "Inner");
  CHECK(core::detail::bare_type_name("(anonymous namespace)::TinyModule<Kokkos::Serial>") == "TinyModule");
  CHECK(core::detail::bare_type_name("struct Foo") == "Foo");

  Outer<S> outer;
  CHECK(core::describe(outer) ==
        "Outer  head (2)  params=34\n"
        "  0  TinyModule  w (3, 4)  g (4)  params=16\n"
        "  1  TinyModule  w (3, 4)  g (4)  params=16\n"
        "total  params=34\n");

  Wrapper<S> w;
  const std::string text = core::describe(w);
  INFO(text);
  CHECK(text ==
        "Wrapped  bias (5)  params=39\n"
        "  inner  Outer  head (2)  params=34\n"
        "    inner.0  TinyModule  w (3, 4)  g (4)  params=16\n"
        "    inner.1  TinyModule  w (3, 4)  g (4)  params=16\n"
        "total  params=39\n");

  // Counts: the root's is the model's parameter count, and each node's is its own parameters
  // plus its children's.
  const auto tree = core::summarize(w);
  REQUIRE(tree.size() == 4);
  REQUIRE(tree[0].parameter_count == core::parameter_count(w));
  std::int64_t own_total = 0;
  for (std::size_t i = 0; i < tree.size(); ++i) {
    std::int64_t own = 0;
    for (const auto& [name, shape] : tree[i].parameters) {
      std::int64_t n = 1;
      for (auto e : shape) n *= e;
      own += n;
    }
    own_total += own;
    std::int64_t children = 0;
    for (std::size_t j = i + 1; j < tree.size() && tree[j].depth > tree[i].depth; ++j)
      if (tree[j].depth == tree[i].depth + 1) children += tree[j].parameter_count;
    CHECK(tree[i].parameter_count == own + children);
  }
  CHECK(own_total == core::parameter_count(w));

  Holder<S> holder;  // a naming wrapper shows the layer it names
  CHECK(core::describe(holder) == "Holder  params=16\n  t  TinyModule  w (3, 4)  g (4)  params=16\ntotal  params=16\n");

  SelfNamed self;
  CHECK(core::describe(self) == "Custom  params=0\ntotal  params=0\n");
}

HYBRIDSEQ_SPACE_TEST_CASE("gemm facade matches the naive oracle for every op", "[core][kernels]") {
  using Space = TestType;
  const int m = 7, n = 5, k = 9;
  for (auto op_a : {kernels::Op::none, kernels::Op::transpose})
    for (auto op_b : {kernels::Op::none, kernels::Op::transpose}) {
      Tensor<double**, Space> a("a", op_a == kernels::Op::none ? m : k, op_a == kernels::Op::none ? k : m);
      Tensor<double**, Space> b("b", op_b == kernels::Op::none ? k : n, op_b == kernels::Op::none ? n : k);
      Tensor<double**, Space> c("c", m, n), expected("e", m, n);
      core::fill(Space{}, core::flat(a), core::Init::normal(1), 1, 1);
      core::fill(Space{}, core::flat(b), core::Init::normal(1), 1, 2);
      core::fill(Space{}, core::flat(c), core::Init::normal(1), 1, 3);
      Kokkos::deep_copy(expected, c);
      kernels::gemm(Space{}, op_a, op_b, 0.5, a, b, 2.0, c);
      // The oracle runs on the host (on Cuda: over copies; the GEMM above is cuBLAS).
      const auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, a);
      const auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, b);
      const auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, c);
      const auto he = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, expected);
      kernels::reference::gemm(op_a, op_b, 0.5, ha, hb, 2.0, he);
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) REQUIRE(hc(i, j) == Approx(he(i, j)).epsilon(1e-12));
    }
  Tensor<double**, Space> a("a", 3, 4), b("b", 5, 2), c("c", 3, 2);
  REQUIRE_THROWS_WITH(kernels::gemm(Space{}, kernels::Op::none, kernels::Op::none, 1.0, a, b, 0.0, c),
                      "hybridseq::kernels::gemm: op(A) is (3,4), op(B) is (5,2), C is (3,2)");
}

// Float products: on a host with a vector copy, those the micro-kernel wins (NN with a short
// depth, TN over small operands, NT over many rows; n a multiple of 8; beta 0 or 1) run on it,
// the rest on BLAS. Both against a double oracle, within float summation's error bound.
HYBRIDSEQ_SPACE_TEST_CASE("gemm facade: float products on the micro-kernel or on BLAS match the oracle",
                          "[core][kernels]") {
  using Space = TestType;
  using kernels::Op;
  struct Shape {
    Op op_a, op_b;
    int m, n, k;
  };
  const Shape shapes[] = {{Op::none, Op::none, 37, 48, 100},         {Op::transpose, Op::none, 50, 32, 300},
                          {Op::none, Op::transpose, 1030, 48, 64},   {Op::none, Op::none, 13, 40, 20},
                          {Op::transpose, Op::transpose, 9, 16, 12}, {Op::none, Op::none, 5, 7, 3}};
  int on_micro_kernel = 0;
  for (const Shape& s : shapes)
    for (const float beta : {0.0f, 1.0f, 2.0f}) {
      const bool ta = s.op_a == Op::transpose, tb = s.op_b == Op::transpose;
      Tensor<float**, Space> a("a", ta ? s.k : s.m, ta ? s.m : s.k), b("b", tb ? s.n : s.k, tb ? s.k : s.n);
      Tensor<float**, Space> c("c", s.m, s.n);
      core::fill(Space{}, core::flat(a), core::Init::normal(1), 1, 1);
      core::fill(Space{}, core::flat(b), core::Init::normal(1), 1, 2);
      core::fill(Space{}, core::flat(c), core::Init::normal(1), 1, 3);
      const auto before = Kokkos::create_mirror(Kokkos::HostSpace{}, c);  // a copy, also on host spaces
      Kokkos::deep_copy(before, c);
      kernels::gemm(Space{}, s.op_a, s.op_b, 0.5f, a, b, beta, c);
      const auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, a);
      const auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, b);
      const auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, c);
      const bool micro = core::host_space<Space> && kernels::host_isa() != kernels::Isa::baseline && s.n % 8 == 0 &&
                         beta <= 1 && kernels::detail::micro_kernel_wins(s.op_a, s.op_b, s.m, s.n, s.k);
      on_micro_kernel += micro;
      INFO("op_a " << ta << " op_b " << tb << " m " << s.m << " n " << s.n << " k " << s.k << " beta " << beta
                   << (micro ? " (micro-kernel)" : " (BLAS)"));
      for (int i = 0; i < s.m; ++i)
        for (int j = 0; j < s.n; ++j) {
          double sum = 0, magnitude = 0;
          for (int p = 0; p < s.k; ++p) {
            const double term = double(ta ? ha(p, i) : ha(i, p)) * double(tb ? hb(j, p) : hb(p, j));
            sum += term;
            magnitude += std::abs(term);
          }
          const double want = 0.5 * sum + double(beta) * double(before(i, j));
          // |error| ≤ (k + 2)·u·(Σ|terms| + |beta·c|), u = 2⁻²⁴: float summation's bound.
          const double bound = (s.k + 2) * 0x1p-24 * (0.5 * magnitude + std::abs(double(beta) * before(i, j)));
          REQUIRE(std::abs(double(hc(i, j)) - want) <= bound);
        }
    }
  // The gate sends the step's shapes to the micro-kernel and the shapes it loses to BLAS.
  CHECK(kernels::detail::micro_kernel_wins(Op::none, Op::transpose, 2048, 384, 128));
  CHECK(kernels::detail::micro_kernel_wins(Op::none, Op::transpose, 4096, 768, 256));  // Bᵀ of 2¹⁸ × 0.75 floats
  CHECK(kernels::detail::micro_kernel_wins(Op::none, Op::none, 2048, 128, 512));
  CHECK(kernels::detail::micro_kernel_wins(Op::transpose, Op::none, 512, 128, 2048));  // a weight gradient
  CHECK_FALSE(kernels::detail::micro_kernel_wins(Op::transpose, Op::none, 768, 3072, 2048));
  CHECK_FALSE(kernels::detail::micro_kernel_wins(Op::none, Op::transpose, 4096, 3072, 512));
  CHECK_FALSE(kernels::detail::micro_kernel_wins(Op::none, Op::none, 4096, 768, 3072));
  if (core::host_space<Space> && kernels::host_isa() != kernels::Isa::baseline) CHECK(on_micro_kernel == 8);
}

// A product large enough to be cut between threads (NT, 2048 × 48 × 512: 2 parts of 1024 rows
// on 2 threads, which alone would also pass the gate; 4 parts of 512 would not) is routed once,
// on its whole shape: the facade on each space gives the bits of one micro-kernel call over
// all of C. At this depth BLAS rounds differently (checked), so a part sent to BLAS would show.
TEST_CASE("gemm facade: a product split between threads gives one call's bits", "[core][kernels][host]") {
  using kernels::Op;
  const int m = 2048, n = 48, k = 512;
  const int width = kernels::detail::micro_kernel_width<float>(Op::none, Op::transpose, m, n, k, 1.0f, 0.0f);
  if (kernels::host_isa() == kernels::Isa::baseline) {
    REQUIRE(width == 0);
    return;
  }
  REQUIRE(width == (kernels::host_isa() == kernels::Isa::avx512 ? 16 : 8));
  CHECK(kernels::detail::micro_kernel_width<float>(Op::none, Op::transpose, m, n, k, 0.0f, 1.0f) == 0);
  CHECK(kernels::detail::micro_kernel_width<float>(Op::none, Op::transpose, m, n, k, 1.0f, 2.0f) == 0);
  CHECK(kernels::detail::micro_kernel_width<float>(Op::none, Op::transpose, m, 40, k, 1.0f, 0.0f) == 8);
  std::vector<float> a(std::size_t(m) * k), b(std::size_t(n) * k), one_call(std::size_t(m) * n);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = float(std::sin(0.37 * double(i)));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = float(std::cos(0.53 * double(i)));
  kernels::detail::micro_kernel_gemm<float>(width, Op::none, Op::transpose, m, n, k, 1.0f, a.data(), k, b.data(), k,
                                            0.0f, one_call.data(), n);
  std::vector<float> on_blas(one_call.size());
  kernels::detail::host_gemm_on<float>(0, Op::none, Op::transpose, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f,
                                       on_blas.data(), n);
  // Where BLAS happens to give the micro-kernel's bits (seen in the -O0 sanitizer build, which
  // contracts no FMAs, on an Emerald Rapids CPU whose OpenBLAS runs its SSE3 kernels), a part
  // sent to BLAS would not show; the thread-split checks below still compare bits.
  if (on_blas == one_call) WARN("BLAS gives the micro-kernel's bits for this product on this build and CPU");
  const auto on = [&]<class Space>(Space) {
    Tensor<float**, Space> ta("a", m, k), tb("b", n, k), tc("c", m, n);
    std::memcpy(ta.data(), a.data(), sizeof(float) * a.size());
    std::memcpy(tb.data(), b.data(), sizeof(float) * b.size());
    kernels::gemm(Space{}, Op::none, Op::transpose, 1.0f, ta, tb, 0.0f, tc);
    Kokkos::fence();
    return std::vector<float>(tc.data(), tc.data() + tc.size());
  };
#if defined(KOKKOS_ENABLE_SERIAL)
  CHECK(on(Kokkos::Serial{}) == one_call);
#endif
#if HYBRIDSEQ_HAS_OPENMP
  INFO("OpenMP threads: " << core::compat::concurrency(Kokkos::OpenMP{}));
  CHECK(on(Kokkos::OpenMP{}) == one_call);
#endif
}

// The micro-kernel's spans (tile_gemm.hpp, Extras): with A zero outside each row's span, cutting
// each block of rows' depth to its rows' spans gives the uncut product's bits (plain and with a
// row scale, where the first block, cut to no depth, still scales its rows), and A is not read
// outside its block's spans (NaN there would show); with wanted spans of C, every wanted entry
// has the uncut product's bits and no vector outside its block of rows' spans is written. Every
// vector copy the CPU has, and the generic one.
namespace {
template <class Shape>
void check_micro_kernel_spans() {
  using T = typename Shape::Scalar;
  constexpr int W = Shape::lanes, MR = Shape::rows;
  const int m = 23, n = 4 * W + (W == 1 ? 3 : 0), k = 50;
  // Spans that grow by uneven steps, some rows empty, some blocks of rows with nothing at all.
  std::vector<int> begin(m), end(m), cbegin(m), cend(m);
  for (int i = 0; i < m; ++i) {
    begin[i] = i < 6 ? 0 : std::min(k, i * 2 + (i > 12 ? 9 : 0));
    end[i] = i < 6 ? 0 : std::max(begin[i], std::min(k, 5 + i * 2 + (i > 12 ? 12 : 0)));
    cbegin[i] = std::min(n, i * n / m + (i >= 10 ? 2 : 0));
    cend[i] = std::max(cbegin[i], std::min(n, i < 6 ? cbegin[i] : cbegin[i] + W + 3));
  }
  for (int i = 1; i < m; ++i)
    REQUIRE((begin[i] >= begin[i - 1] && end[i] >= end[i - 1] && cbegin[i] >= cbegin[i - 1] && cend[i] >= cend[i - 1]));
  std::vector<T> a(std::size_t(m) * k), b(std::size_t(k) * n), scale(m);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = T(std::sin(0.37 * double(i)));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = T(std::cos(0.53 * double(i)));
  for (int i = 0; i < m; ++i) scale[i] = T(0.5 + 0.01 * i);
  std::vector<T> a_banded = a, a_poisoned(a.size());
  for (int i = 0; i < m; ++i) {
    const int i0 = i / MR * MR, last = std::min(m, i0 + MR) - 1;
    for (int p = 0; p < k; ++p) {
      const std::size_t at = std::size_t(i) * k + p;
      if (p < begin[i] || p >= end[i]) a_banded[at] = 0;
      a_poisoned[at] = p < begin[i0] || p >= end[last] ? std::numeric_limits<T>::quiet_NaN() : a_banded[at];
    }
  }
  const simd::RowSpans a_spans{begin.data(), end.data()}, c_spans{cbegin.data(), cend.data()};
  const auto product = [&](const std::vector<T>& lhs, bool accumulate, const simd::Extras<T>& x, T fill) {
    std::vector<T> c(std::size_t(m) * n);
    for (std::size_t i = 0; i < c.size(); ++i) c[i] = fill == 0 ? T(std::cos(0.11 * double(i))) : fill;
    simd::gemm(Shape{}, m, n, k, T(0.75), lhs.data(), k, 1, b.data(), n, c.data(), n, accumulate, x);
    return c;
  };
  CHECK(product(a_poisoned, false, {.a_nonzero = a_spans}, 0) == product(a_banded, false, {}, 0));
  CHECK(product(a_poisoned, true, {.row_scale = scale.data(), .a_nonzero = a_spans}, 0) ==
        product(a_banded, true, {.row_scale = scale.data()}, 0));

  const T sentinel = T(-12345.5);
  const auto whole = product(a, false, {}, sentinel), cut = product(a, false, {.c_wanted = c_spans}, sentinel);
  int wanted = 0, untouched = 0;
  for (int i = 0; i < m; ++i) {
    const int i0 = i / MR * MR, last = std::min(m, i0 + MR) - 1;
    const int lo = cbegin[i0] / W * W, hi = (cend[last] + W - 1) / W * W;  // the block's vectors
    for (int j = 0; j < n; ++j) {
      const T got = cut[std::size_t(i) * n + j];
      INFO("row " << i << " column " << j);
      if (j >= cbegin[i] && j < cend[i]) {
        CHECK(got == whole[std::size_t(i) * n + j]);
        ++wanted;
      } else if (j < lo || j >= hi || hi <= lo) {
        CHECK(got == sentinel);
        ++untouched;
      }
    }
  }
  CHECK(wanted > m);
  CHECK(untouched > m * n / 4);
}
}  // namespace

TEST_CASE("micro-kernel: spans cut each block of rows to its rows' depth and columns", "[core][kernels][host]") {
  check_micro_kernel_spans<simd::Generic<float>>();
  check_micro_kernel_spans<simd::Generic<double>>();
#if HYBRIDSEQ_ISA_DISPATCH
  if (kernels::host_isa() >= kernels::Isa::avx2) check_micro_kernel_spans<simd::Avx2>();
  if (kernels::host_isa() == kernels::Isa::avx512) check_micro_kernel_spans<simd::Avx512>();
#endif
}

// The epilogue: C = 0.5 · op(A) · op(B) + 1 · biasᵀ (or + beta · C without a bias), then GELU
// of C's elements into a second matrix. Shapes: fused into the micro-kernel in one block of rows
// and in several (NN 300 × 512: 60-row blocks on one thread; cut by columns on two, where the
// op runs after the product), cut by rows on two threads (NT 2048 × 64), at the AVX2 width on
// an AVX-512 CPU (n = 40), and on BLAS (depth 3072), where the bias is broadcast first.
HYBRIDSEQ_SPACE_TEST_CASE("gemm facade: an epilogue's bias and element-wise op act on the finished product",
                          "[core][kernels]") {
  using Space = TestType;
  using kernels::Op;
  const auto gelu_of = [](Tensor<const float*, Space> x, Tensor<float*, Space> y) {
    return kernels::activation_forward_op<kernels::Activation::gelu, float, Space>(x, y);
  };
  using WithGelu = kernels::Epilogue<float, Space, decltype(gelu_of({}, {}))>;
  struct Shape {
    Op op_b;
    int m, n, k;
    bool bias;
  };
  const Shape shapes[] = {{Op::none, 37, 40, 20, true},         {Op::none, 300, 512, 64, true},
                          {Op::transpose, 2048, 64, 128, true}, {Op::none, 64, 48, 3072, true},
                          {Op::none, 300, 512, 64, false},      {Op::none, 5, 16, 0, true}};
  for (const Shape& s : shapes) {
    const bool tb = s.op_b == Op::transpose;
    const float beta = s.bias ? 0.0f : 1.0f;
    Tensor<float**, Space> a("a", s.m, s.k), b("b", tb ? s.n : s.k, tb ? s.k : s.n), c("c", s.m, s.n);
    Tensor<float**, Space> activated("activated", s.m, s.n);
    Tensor<float*, Space> bias("bias", s.bias ? s.n : 0);
    core::fill(Space{}, core::flat(a), core::Init::normal(1), 1, 1);
    core::fill(Space{}, core::flat(b), core::Init::normal(1), 1, 2);
    core::fill(Space{}, core::flat(c), core::Init::normal(1), 1, 3);
    core::fill(Space{}, bias, core::Init::normal(1), 1, 4);
    const auto before = Kokkos::create_mirror(Kokkos::HostSpace{}, c);  // a copy, also on host spaces
    Kokkos::deep_copy(before, c);
    kernels::gemm(Space{}, Op::none, s.op_b, 0.5f, a, b, beta, c,
                  WithGelu{bias, gelu_of(core::flat(c), core::flat(activated))});
    const auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, a);
    const auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, b);
    const auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, c);
    const auto hbias = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, bias);
    const auto hact = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, activated);
    INFO("op_b " << tb << " m " << s.m << " n " << s.n << " k " << s.k << " bias " << s.bias);
    for (int i = 0; i < s.m; ++i)
      for (int j = 0; j < s.n; ++j) {
        double sum = 0, magnitude = 0;
        for (int p = 0; p < s.k; ++p) {
          const double term = double(ha(i, p)) * double(tb ? hb(j, p) : hb(p, j));
          sum += term;
          magnitude += std::abs(term);
        }
        const double added = s.bias ? double(hbias(j)) : double(before(i, j));
        const double want = 0.5 * sum + added;
        // float summation's bound, as in the test above
        REQUIRE(std::abs(double(hc(i, j)) - want) <= (s.k + 2) * 0x1p-24 * (0.5 * magnitude + std::abs(added)));
        // GELU of what C holds, to a few ulps (the vector copies contract to FMAs; this scalar
        // one may not)
        const double gelu = double(kernels::ActivationFn<kernels::Activation::gelu>::value(hc(i, j)));
        REQUIRE(std::abs(double(hact(i, j)) - gelu) <= 1e-6 * std::abs(gelu) + 1e-7);
      }
  }

  // An op that adds to its output runs once on every element, fused or not, and on the same ISA
  // copy as a pass of its own: dx += GELU'(h) ⊙ C gives the bits of the product without an
  // epilogue followed by activation_backward (by rows on threads, NT 2048 × 64; by columns,
  // NN 300 × 512).
  for (const Shape& s : {Shape{Op::transpose, 2048, 64, 128, false}, Shape{Op::none, 300, 512, 64, false}}) {
    const bool tb = s.op_b == Op::transpose;
    Tensor<float**, Space> a("a", s.m, s.k), b("b", tb ? s.n : s.k, tb ? s.k : s.n), c("c", s.m, s.n);
    Tensor<float**, Space> h("h", s.m, s.n), dx("dx", s.m, s.n), c_apart("c_apart", s.m, s.n),
        dx_apart("dx_apart", s.m, s.n);
    core::fill(Space{}, core::flat(a), core::Init::normal(1), 1, 1);
    core::fill(Space{}, core::flat(b), core::Init::normal(1), 1, 2);
    core::fill(Space{}, core::flat(h), core::Init::normal(1), 1, 3);
    core::fill(Space{}, core::flat(dx), core::Init::normal(1), 1, 4);
    Kokkos::deep_copy(dx_apart, dx);
    const auto op = kernels::activation_backward_op<kernels::Activation::gelu, float, Write::add, Space>(
        core::flat(h), core::flat(c), core::flat(dx));
    kernels::gemm(Space{}, Op::none, s.op_b, 1.0f, a, b, 0.0f, c,
                  kernels::Epilogue<float, Space, decltype(op)>{{}, op});
    kernels::gemm(Space{}, Op::none, s.op_b, 1.0f, a, b, 0.0f, c_apart);
    kernels::activation_backward<kernels::Activation::gelu, float, Write::add>(
        Space{}, core::flat(h), core::flat(c_apart), core::flat(dx_apart));
    const auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, c);
    const auto hdx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, dx);
    const auto hc_apart = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, c_apart);
    const auto hdx_apart = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, dx_apart);
    INFO("op_b " << tb << " m " << s.m << " n " << s.n << " k " << s.k);
    for (int i = 0; i < s.m; ++i)
      for (int j = 0; j < s.n; ++j) {
        REQUIRE(hc(i, j) == hc_apart(i, j));
        REQUIRE(hdx(i, j) == hdx_apart(i, j));
      }
  }

  // Refused before anything is written: C keeps its contents.
  Tensor<float**, Space> a("a", 8, 4), b("b", 4, 16), c("c", 8, 16);
  core::fill(Space{}, core::flat(c), core::Init::normal(1), 1, 5);
  const auto before = Kokkos::create_mirror(Kokkos::HostSpace{}, c);
  Kokkos::deep_copy(before, c);
  Tensor<float*, Space> bias("bias", 16), short_bias("short_bias", 15);
  REQUIRE_THROWS_WITH(
      kernels::gemm(Space{}, Op::none, Op::none, 1.0f, a, b, 1.0f, c, kernels::Epilogue<float, Space>{bias}),
      Contains("hybridseq::kernels::gemm") && Contains("needs beta = 0; beta is 1"));
  REQUIRE_THROWS_WITH(
      kernels::gemm(Space{}, Op::none, Op::none, 1.0f, a, b, 0.0f, c, kernels::Epilogue<float, Space>{short_bias}),
      Contains("bias has 15 values for C's 16 columns"));
  Tensor<float**, Space> padded(Kokkos::view_alloc("padded", Kokkos::AllowPadding), 8, 20);
  Tensor<float**, Space> b20("b20", 4, 20);
  REQUIRE(padded.stride(0) != 20);
  Kokkos::deep_copy(padded, 7.0f);
  REQUIRE_THROWS_WITH(
      kernels::gemm(Space{}, Op::none, Op::none, 1.0f, a, b20, 0.0f, padded,
                    WithGelu{{}, gelu_of(Tensor<float*, Space>("x", 160), Tensor<float*, Space>("y", 160))}),
      Contains("needs C's rows contiguous; C's row stride is"));
  const auto after = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, c);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 16; ++j) REQUIRE(after(i, j) == before(i, j));
  const auto padded_after = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, padded);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 20; ++j) REQUIRE(padded_after(i, j) == 7.0f);
}

// GemmMath on cuBLAS: TF32 and bf16 round the inputs as they are read (10 and 7 mantissa bits,
// 2⁻¹¹ and 2⁻⁸ relative each) and accumulate in fp32, so over K = 256 standard normal terms
// the result is within a few times √K · 2⁻¹⁰ (resp. 2⁻⁷) of fp32's (the largest of 64 K
// entries is near 17 · 2⁻ᵇⁱᵗˢ), and not equal to it: the setting took effect (256³ is large
// enough for cuBLAS to choose tensor cores). Host GEMMs ignore the setting: the same bits.
HYBRIDSEQ_SPACE_TEST_CASE("gemm math: TF32 and bf16 within their rounding of fp32", "[core][kernels]") {
  using Space = TestType;
  const int m = 256, n = 256, k = 256;
  Tensor<float**, Space> a("a", m, k), b("b", k, n);
  core::fill(Space{}, core::flat(a), core::Init::normal(1), 1, 1);
  core::fill(Space{}, core::flat(b), core::Init::normal(1), 1, 2);
  const auto product = [&](kernels::GemmMath math) {
    Tensor<float**, Space> c("c", m, n);
    kernels::set_gemm_math(math);
    kernels::gemm(Space{}, kernels::Op::none, kernels::Op::none, 1.0f, a, b, 0.0f, c);
    kernels::set_gemm_math(kernels::GemmMath::fp32);
    return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, c);
  };
  const auto exact = product(kernels::GemmMath::fp32);
  for (const auto& [math, bits] : {std::pair{kernels::GemmMath::tf32, 10}, std::pair{kernels::GemmMath::bf16, 7}}) {
    const auto rounded = product(math);
    double err = 0;
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) err = std::max(err, double(std::abs(rounded(i, j) - exact(i, j))));
    INFO("GemmMath " << int(math) << ": largest difference from fp32 " << err);
    if constexpr (std::is_same_v<typename Space::memory_space, Kokkos::HostSpace>) {
      CHECK(err == 0);
    } else {
      CHECK(err > 0);
      CHECK(err < 4 * std::sqrt(double(k)) * std::ldexp(1.0, -bits));
    }
  }
}
