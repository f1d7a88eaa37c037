#pragma once
// The generic layer testbed: for any case of tests/cases, in any execution space,
//   - forward shapes and finiteness,
//   - finite-difference gradient check in double for the input and every parameter,
//   - comparison with the PyTorch golden file (float),
//   - save/load round trip through safetensors,
//   - for models that decode: prefill + steps (and chunks, after a snapshot restore) equal the full forward.
// Four kinds of layer are driven: sequence layers (x (B,T,d_in) → y), the embedding
// (ids → y), the fused LM-head loss ((x, targets) → scalar) and whole language models
// ((ids, targets) → loss; goldens also compare the logits).

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <hybridseq/core.hpp>
#include <hybridseq/io/parameters.hpp>

#include "../cases/case_list.hpp"
#include "golden.hpp"

namespace hybridseq::testing {

template <class Case, class T, class Space>
using LayerOf = typename Case::template Layer<T, Space>;

/// A whole language model: ids and targets in, mean loss out (models::LanguageModel).
template <class L>
concept ModelLayer = requires {
  L::vocab;
  typename L::body_type;
};
template <class L>
concept EmbeddingLayer = requires {
  L::vocab;
}
&&!requires {
  L::d_in;
}
&&!ModelLayer<L>;
template <class L>
concept LossLayer = requires {
  L::vocab;
  L::d_in;
};

/// Runs `check.template operator()<Case>()` for every case of a CaseList, each in a Catch2
/// section named after the case (so a failure names it and the others still run).
template <class... Cases, class Check>
void for_each_case(cases::CaseList<Cases...>, Check&& check) {
  (
      [&] {
        DYNAMIC_SECTION(Cases::name) {
          check.template operator()<Cases>();
        }
      }(),
      ...);
}

/// The same for the cases that have a PyTorch golden file (Case::golden non-empty).
template <class... Cases, class Check>
void for_each_golden_case(cases::CaseList<Cases...>, Check&& check) {
  (
      [&] {
        if constexpr (cases::has_golden<Cases>) {
          DYNAMIC_SECTION(Cases::name) {
            check.template operator()<Cases>();
          }
        }
      }(),
      ...);
}

/// Rows of logits a model produces for t input positions: t, or the model's
/// `logit_time(t)` (PerceiverAR: only its M latents).
template <class L>
std::int64_t logit_rows(std::int64_t t) {
  if constexpr (requires { L::logit_time(t); })
    return L::logit_time(t);
  else
    return t;
}

template <class Case, class L>
typename L::Options options_of() {
  if constexpr (requires { Case::template options<L>(); })
    return Case::template options<L>();
  else
    return typename L::Options{};
}

/// Every forward of the harness is a training pass keyed by the case's dropout_key (seed,
/// pass; {0, 0} unless set): the dropout masks of cases that enable dropout are the same in
/// every finite difference and equal to the PyTorch golden's (tests/reference/dropout.py).
struct DropoutKey {
  std::uint64_t seed = 0, pass = 0;
};
template <class Case>
constexpr DropoutKey dropout_key() {
  if constexpr (requires { Case::dropout_key; })
    return {Case::dropout_key.seed, Case::dropout_key.pass};
  else
    return {};
}

template <class Case, class L>
L make_layer() {
  return L(options_of<Case, L>());
}

/// Prints a machine-readable line when HYBRIDSEQ_REPORT is set (used for closing notes).
inline void report(const char* what, const std::string& name, const char* space, double value) {
  if (std::getenv("HYBRIDSEQ_REPORT")) std::printf("report,%s,%s,%s,%.3e\n", what, name.c_str(), space, value);
}

/// Host copy of any contiguous view, flattened.
template <class View>
std::vector<double> to_vector(const View& v) {
  auto flat = core::flat(v);
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, flat);
  return std::vector<double>(host.data(), host.data() + host.extent(0));
}

/// Fills a contiguous view from a host vector of the same number of elements.
template <class View, class U>
void from_vector(const View& v, const std::vector<U>& data) {
  auto flat = core::flat(v);
  REQUIRE(flat.extent(0) == data.size());
  auto host = Kokkos::create_mirror_view(flat);
  for (std::size_t i = 0; i < data.size(); ++i) host(i) = static_cast<typename View::value_type>(data[i]);
  Kokkos::deep_copy(flat, host);
}

/// Element i of a rank-1 view in any memory space, and its assignment: one copy each where the
/// host cannot read the view's memory (the finite-difference loop touches a few entries).
template <class View>
double element(const View& v, std::size_t i) {
  typename View::non_const_value_type x{};
  Kokkos::deep_copy(x, Kokkos::subview(v, i));
  return static_cast<double>(x);
}
template <class View>
void set_element(const View& v, std::size_t i, double x) {
  Kokkos::deep_copy(Kokkos::subview(v, i), static_cast<typename View::non_const_value_type>(x));
}

/// One layer with its inputs, able to evaluate the objective and its analytic gradients.
///   sequence / embedding: objective = Σ y ⊙ dy (dy fixed, random)
///   loss:                 objective = the mean cross-entropy
template <class Case, class T, class Space>
struct Harness {
  using L = LayerOf<Case, T, Space>;
  L layer = make_layer<Case, L>();
  core::Workspace<Space> ws;
  int batch = Case::batch, time = Case::time;
  Tensor<T***, Space> x, dx, y, dy;       // sequence and loss layers
  Tensor<std::int32_t**, Space> ids;      // embedding ids, loss targets, model inputs
  Tensor<std::int32_t**, Space> targets;  // model targets

  static constexpr int d_in() {
    if constexpr (EmbeddingLayer<L> || ModelLayer<L>)
      return 0;
    else
      return L::d_in;
  }
  static constexpr int d_out() {
    if constexpr (LossLayer<L> || ModelLayer<L>)
      return 0;
    else
      return L::d_out;
  }
  /// Output rows for t input rows: attention schemes may answer only some queries.
  static std::int64_t out_time(std::int64_t t) {
    if constexpr (requires { typename L::scheme; })
      return L::scheme::query_count(t);
    else
      return t;
  }

  void allocate(int b, int t) {
    batch = b, time = t;
    if constexpr (ModelLayer<L>) {
      ids = Tensor<std::int32_t**, Space>("ids", b, t);
      targets = Tensor<std::int32_t**, Space>("targets", b, t);
      return;
    }
    if constexpr (!EmbeddingLayer<L>) {
      x = Tensor<T***, Space>("x", b, t, d_in());
      dx = Tensor<T***, Space>("dx", b, t, d_in());
    }
    if constexpr (!LossLayer<L>) {
      y = Tensor<T***, Space>("y", b, out_time(t), d_out());
      dy = Tensor<T***, Space>("dy", b, out_time(t), d_out());
    }
    if constexpr (EmbeddingLayer<L> || LossLayer<L>) ids = Tensor<std::int32_t**, Space>("ids", b, t);
  }

  /// Random parameters, inputs and upstream gradient, all from `seed`.
  void randomize(std::uint64_t seed) {
    allocate(Case::batch, Case::time);
    core::initialize(layer, seed);
    // Parameters at their init are often degenerate for testing (gains of exactly 1,
    // zero biases): perturb every parameter so each one's gradient is exercised.
    core::for_each_parameter(layer, [&](std::string_view name, auto& p) {
      auto v = to_vector(p.value());
      const core::CounterRng rng(seed + 1, core::stream_of(name));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] += 0.3 * rng.normal(i);
      from_vector(p.value(), v);
    });
    const core::CounterRng rng(seed, 99);
    if constexpr (ModelLayer<L>) {
      std::vector<std::int32_t> v(ids.size()), w(ids.size());
      for (std::size_t i = 0; i < v.size(); ++i)
        v[i] = static_cast<std::int32_t>(rng.bits(2000000 + i) % layer.vocab_size());
      for (std::size_t i = 0; i < w.size(); ++i)
        w[i] = static_cast<std::int32_t>(rng.bits(3000000 + i) % layer.vocab_size());
      if (w.size() > 3) w[2] = -100;  // an unsupervised position
      from_vector(ids, v);
      from_vector(targets, w);
      return;
    }
    if constexpr (!EmbeddingLayer<L>) {
      std::vector<double> xs(x.size());
      for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = rng.normal(i);
      from_vector(x, xs);
    }
    if constexpr (!LossLayer<L>) {
      std::vector<double> g(dy.size());
      for (std::size_t i = 0; i < g.size(); ++i) g[i] = rng.normal(1000000 + i);
      from_vector(dy, g);
    }
    if constexpr (EmbeddingLayer<L> || LossLayer<L>) {
      std::vector<std::int32_t> v(ids.size());
      for (std::size_t i = 0; i < v.size(); ++i)
        v[i] = static_cast<std::int32_t>(rng.bits(2000000 + i) % layer.vocab_size());
      if (v.size() > 2) v[1] = v[0];  // a repeated id: gradients must accumulate
      if constexpr (LossLayer<L>) {
        if (v.size() > 3) v[2] = options_of<Case, L>().ignore_index;
      }
      from_vector(ids, v);
    }
  }

  /// Forward only; returns the terms whose dy-weighted sum is the objective: y for sequence
  /// and embedding layers (weights dy), the loss for the loss layer (weight 1). Finite
  /// differences are taken term by term, Σ (y⁺ − y⁻)·dy, which avoids the cancellation of
  /// differencing two large sums.
  std::vector<double> terms() {
    ws.release({});
    core::TrainingPass<Space> pass(ws, dropout_key<Case>().seed, dropout_key<Case>().pass);
    typename L::Saved s;
    const double value = forward(s);
    if constexpr (LossLayer<L> || ModelLayer<L>)
      return {value};
    else
      return to_vector(y);
  }

  /// The layer's forward on the harness's inputs; the loss for loss layers and models.
  double forward(typename L::Saved& s) {
    if constexpr (ModelLayer<L>) {
      return layer.forward(ws, ids, targets, s);
    } else if constexpr (EmbeddingLayer<L>) {
      layer.forward(ws, ids, y, s);
    } else if constexpr (LossLayer<L>) {
      return layer.forward(ws, x, ids, s);
    } else {
      call_forward(s);
    }
    return 0;
  }

  /// The layer's backward from `s`: into dx and the parameter gradients (dy fixed).
  void backward(const typename L::Saved& s) {
    if constexpr (ModelLayer<L>)
      layer.backward(ws, s);
    else if constexpr (EmbeddingLayer<L>)
      layer.backward(ws, s, dy);
    else if constexpr (LossLayer<L>)
      layer.backward(ws, s, dx);
    else
      layer.backward(ws, s, dy, dx);
  }

  /// Arena use of one training forward and backward, measured from a fresh workspace:
  /// saved = bytes in use after forward, forward = its peak, backward = the peak above that.
  core::Footprint measure() {
    ws = core::Workspace<Space>();
    if constexpr (!EmbeddingLayer<L> && !ModelLayer<L>) Kokkos::deep_copy(dx, T(0));
    core::TrainingPass<Space> pass(ws, dropout_key<Case>().seed, dropout_key<Case>().pass);
    typename L::Saved s;
    forward(s);
    core::Footprint f{ws.bytes_in_use(), ws.peak_bytes(), 0};
    ws.reset_peak();
    backward(s);
    f.backward = ws.peak_bytes() - f.saved;
    return f;
  }

  std::vector<double> term_weights() {
    if constexpr (LossLayer<L> || ModelLayer<L>)
      return {1.0};
    else
      return to_vector(dy);
  }

  double objective() {
    const auto t = terms(), w = term_weights();
    double sum = 0;
    for (std::size_t i = 0; i < t.size(); ++i) sum += t[i] * w[i];
    return sum;
  }

  /// Zeroes gradients, runs forward and backward; dx and parameter grads hold the result.
  double analytic() {
    core::zero_grad(layer);
    ws.release({});
    core::TrainingPass<Space> pass(ws, dropout_key<Case>().seed, dropout_key<Case>().pass);
    if constexpr (!EmbeddingLayer<L> && !ModelLayer<L>) Kokkos::deep_copy(dx, T(0));
    typename L::Saved s;
    double obj = forward(s);
    if constexpr (!LossLayer<L> && !ModelLayer<L>) obj = dot(y, dy);
    backward(s);
    return obj;
  }

  void call_forward(typename L::Saved& s) {
    if constexpr (requires { Case::forward(layer, ws, x, y, s); })
      Case::forward(layer, ws, x, y, s);
    else
      layer.forward(ws, x, y, s);
  }

  static double dot(const Tensor<T***, Space>& a, const Tensor<T***, Space>& b) {
    const auto va = to_vector(a), vb = to_vector(b);
    double s = 0;
    for (std::size_t i = 0; i < va.size(); ++i) s += va[i] * vb[i];
    return s;
  }
};

/// Finite-difference check of one flat tensor's gradient, on up to `max_entries` entries
/// spread over the tensor. Returns max |analytic − numeric| / max(‖analytic‖∞, ‖numeric‖∞)
/// over the checked entries: relative to the gradient's scale, so entries that are zero
/// by construction do not divide by zero.
template <class H, class View>
double gradient_error(H& h, const View& values, const std::vector<double>& analytic, int max_entries = 48) {
  const std::size_t n = values.extent(0);
  if (n == 0) return 0;
  const std::size_t step = std::max<std::size_t>(1, n / max_entries);
  const auto weights = h.term_weights();
  // A scalar loss cannot be differenced term by term; a larger step keeps its round-off
  // (ε·|L|/h) small while the O(h²) truncation stays far below the tolerance.
  const double rel_step = weights.size() == 1 ? 3e-5 : 1e-6;
  double worst = 0, scale = 0;
  std::vector<std::pair<double, double>> pairs;
  // Central difference of the weighted terms at ±k·eps.
  auto central = [&](std::size_t i, double orig, double eps) {
    set_element(values, i, orig + eps);
    const auto plus = h.terms();
    set_element(values, i, orig - eps);
    const auto minus = h.terms();
    set_element(values, i, orig);
    double diff = 0;
    for (std::size_t j = 0; j < plus.size(); ++j) diff += (plus[j] - minus[j]) * weights[j];
    return diff;
  };
  for (std::size_t i = 0; i < n; i += step) {
    const double orig = element(values, i);
    const double eps = rel_step * std::max(1.0, std::abs(orig));
    // With the larger scalar-loss step, the fourth-order stencil (8·D(h) − D(2h)) / 12h keeps
    // the truncation error O(h⁴): deep models with oscillating modes (GSS's e^{iΛℓ}) have
    // third derivatives large enough to show through the plain O(h²) one.
    const double numeric = weights.size() == 1 ? (8 * central(i, orig, eps) - central(i, orig, 2 * eps)) / (12 * eps)
                                               : central(i, orig, eps) / (2 * eps);
    pairs.emplace_back(analytic[i], numeric);
    scale = std::max({scale, std::abs(analytic[i]), std::abs(numeric)});
  }
  for (auto [a, num] : pairs) worst = std::max(worst, std::abs(a - num));
  return scale == 0 ? worst : worst / scale;
}

template <class Case, class Space, class T = double>
void check_workspace();

/// Runs the gradient check for `Case` in `Space` (double precision).
template <class Case, class Space>
void check_gradients(double tolerance = 1e-6) {
  Harness<Case, double, Space> h;
  h.randomize(20261129);
  h.analytic();
  using L = typename Harness<Case, double, Space>::L;
  double worst = 0;
  if constexpr (!EmbeddingLayer<L> && !ModelLayer<L>) {
    const auto dx = to_vector(h.dx);
    const double e = gradient_error(h, core::flat(h.x), dx);
    INFO("input gradient, relative error " << e);
    CHECK(e <= tolerance);
    worst = std::max(worst, e);
  }
  std::vector<std::pair<std::string, std::vector<double>>> grads;
  core::for_each_parameter(
      h.layer, [&](std::string_view name, auto& p) { grads.emplace_back(std::string(name), to_vector(p.grad())); });
  std::size_t k = 0;
  core::for_each_parameter(h.layer, [&](std::string_view name, auto& p) {
    const double e = gradient_error(h, p.value(), grads[k++].second);
    INFO("parameter " << name << ", relative error " << e);
    CHECK(e <= tolerance);
    worst = std::max(worst, e);
  });
  report("gradcheck_max_rel", Case::name, Space::name(), worst);
  check_workspace<Case, Space, double>();  // every case's query, wherever gradients are checked
}

/// The workspace query equals the arena's measured use (saved bytes, forward peak, backward
/// peak; for models also evaluate's and logits' peaks) at the case's (B, T) and at a larger
/// (B + 1, 3T + 1) — 3T, or T, where the layer refuses that length —, with the concurrency of
/// `Space` (OpenMP: its thread count).
template <class Case, class Space, class T>
void check_workspace() {
  Harness<Case, T, Space> h;
  h.randomize(11);
  using L = typename Harness<Case, T, Space>::L;
  const int threads = core::compat::concurrency(Space{});
  const std::vector<std::pair<int, std::vector<int>>> sizes{
      {Case::batch, {Case::time}}, {Case::batch + 1, {3 * Case::time + 1, 3 * Case::time, Case::time}}};
  int compared = 0;
  for (const auto& [b, times] : sizes) {
    for (const int t : times) {
      h.allocate(b, t);
      core::Footprint measured;
      try {
        measured = h.measure();
      } catch (const config_error&) {
        continue;  // a length the layer refuses (a segment scheme's multiple): the next one
      }
      const auto q = core::WorkspaceQuery::of(Space{}, b, t, true);
      const core::Footprint want = h.layer.workspace(q);
      INFO(Case::name << " (B, T) = (" << b << ", " << t << "), " << threads << " threads: measured saved "
                      << measured.saved << ", forward " << measured.forward << ", backward " << measured.backward
                      << "; query " << want.saved << ", " << want.forward << ", " << want.backward);
      CHECK(measured == want);
      CHECK(want.training_peak() == std::max(measured.forward, measured.saved + measured.backward));
      if constexpr (ModelLayer<L>) {
        const auto inference = core::WorkspaceQuery::of(Space{}, b, t, false);
        h.ws = core::Workspace<Space>();
        h.layer.evaluate(h.ws, h.ids, h.targets);
        CHECK(h.ws.peak_bytes() == h.layer.workspace(inference).forward);
        h.ws = core::Workspace<Space>();
        Tensor<T***, Space> logits("logits", b, logit_rows<L>(t), h.layer.vocab_size());
        h.layer.logits(h.ws, h.ids, logits);
        CHECK(h.ws.peak_bytes() == h.layer.logits_workspace(inference));
        CHECK(h.ws.bytes_in_use() == 0);
        // An arena sized by the query takes a whole train_step without a second chunk.
        const std::size_t need = h.layer.training_workspace(b, t, threads);
        core::Workspace<Space> sized(64);
        sized.reserve(need);
        {
          core::TrainingPass<Space> pass(sized, dropout_key<Case>().seed, dropout_key<Case>().pass);
          h.layer.train_step(sized, h.ids, h.targets);
        }
        CHECK(sized.peak_bytes() == need);
        CHECK(sized.capacity_bytes() == need);
      }
      ++compared;
      break;
    }
  }
  CHECK(compared == 2);
  report("workspace_sizes_compared", Case::name, Space::name(), compared);
}

/// Worst |c − g| / (atol·max(1, rms(g)) + rtol·|g|) over a tensor: ≤ 1 passes. The absolute
/// floor scales with the tensor's size of values: a float sum's rounding error follows the
/// magnitude of its terms, not of its result, so an entry that cancels to near zero in a
/// tensor of large values carries the error of those values (how much depends on the BLAS'
/// order of summation, which differs between its kernels).
inline double golden_ratio(const std::vector<double>& c, const std::vector<double>& g, double rtol, double atol,
                           double* worst_abs = nullptr) {
  REQUIRE(c.size() == g.size());
  double squares = 0;
  for (const double v : g) squares += v * v;
  const double floor = atol * std::max(1.0, g.empty() ? 0.0 : std::sqrt(squares / double(g.size())));
  double worst = 0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    const double err = std::abs(c[i] - g[i]);
    if (worst_abs) *worst_abs = std::max(*worst_abs, err);
    worst = std::max(worst, err / (floor + rtol * std::abs(g[i])));
  }
  return worst;
}

/// Compares forward and backward (float) with the PyTorch golden file of `Case`.
template <class Case, class Space>
void check_golden(double rtol = 1e-5, double atol = 1e-6) {
  using H = Harness<Case, float, Space>;
  using L = typename H::L;
  const auto file = io::SafetensorsFile::open(golden_dir() / (std::string(Case::golden) + ".safetensors"));
  H h;
  const auto& in = file.info("input");
  h.allocate(static_cast<int>(in.shape[0]), static_cast<int>(in.shape[1]));
  io::load_parameters(h.layer, file, {.prefix = "params/", .allow_extra = false});
  if constexpr (EmbeddingLayer<L> || ModelLayer<L>) {
    from_vector(h.ids, file.read<std::int64_t>("input"));
  } else {
    from_vector(h.x, file.read<double>("input"));
  }
  if constexpr (LossLayer<L>)
    from_vector(h.ids, file.read<std::int64_t>("targets"));
  else if constexpr (ModelLayer<L>)
    from_vector(h.targets, file.read<std::int64_t>("targets"));
  else
    from_vector(h.dy, file.read<double>("grad_output"));

  const double obj = h.analytic();
  double worst_abs = 0, worst = 0;
  auto compare = [&](const char* what, const std::vector<double>& mine, const std::vector<double>& golden) {
    const double r = golden_ratio(mine, golden, rtol, atol, &worst_abs);
    INFO(Case::name << ": " << what << " exceeds tolerance by " << r << "x");
    CHECK(r <= 1.0);
    worst = std::max(worst, r);
  };
  if constexpr (LossLayer<L>) {
    compare("loss", {obj}, file.read<double>("output"));
  } else if constexpr (ModelLayer<L>) {
    compare("loss", {obj}, file.read<double>("output"));
    Tensor<float***, Space> logits("logits", h.ids.extent(0), logit_rows<L>(h.ids.extent(1)), h.layer.vocab_size());
    h.layer.logits(h.ws, h.ids, logits);
    compare("logits", to_vector(logits), file.read<double>("logits"));
  } else {
    compare("output", to_vector(h.y), file.read<double>("output"));
  }
  if constexpr (!EmbeddingLayer<L> && !ModelLayer<L>)
    compare("grad_input", to_vector(h.dx), file.read<double>("grad_input"));
  core::for_each_parameter(h.layer, [&](std::string_view name, auto& p) {
    compare(("grads/" + std::string(name)).c_str(), to_vector(p.grad()),
            file.read<double>("grads/" + std::string(name)));
  });
  report("golden_max_abs_err", Case::name, Space::name(), worst_abs);
  check_workspace<Case, Space, float>();  // golden-only cases too
}

/// Host ids (B, T) → device ids of columns [t0, t1).
template <class Space>
Tensor<std::int32_t**, Space> id_columns(const std::vector<double>& ids, int b, int t, int t0, int t1) {
  Tensor<std::int32_t**, Space> out("ids", b, t1 - t0);
  auto h = Kokkos::create_mirror_view(out);
  for (int i = 0; i < b; ++i)
    for (int j = t0; j < t1; ++j) h(i, j - t0) = static_cast<std::int32_t>(ids[std::size_t(i) * t + j]);
  Kokkos::deep_copy(out, h);
  return out;
}

/// Decoding equals the full forward, in double. The model's logit rows are the last
/// r = logit_rows(T) positions; the first T − r go in as history (`absorb`: PerceiverAR).
/// Then, for each prefix k of the rows: prefill k, snapshot, and the remaining rows in
/// chunks of chunks[0] (one token a step when 1); each further pass restores the snapshot
/// and replays them in chunks of chunks[pass]. Every pass must give the full forward's
/// logits to 1e-10 and end at length T.
template <class Case, class Space>
void check_decode_matches_forward(std::vector<int> prefixes, std::vector<int> chunks = {1, 7}) {
  Harness<Case, double, Space> h;
  h.randomize(7);
  using L = typename Harness<Case, double, Space>::L;
  const int b = h.batch, t = h.time, v = int(h.layer.vocab_size()), rows = int(logit_rows<L>(t)), q0 = t - rows;
  Tensor<double***, Space> full("full", b, rows, v);
  h.layer.logits(h.ws, h.ids, full);
  const auto want = to_vector(full);
  const auto ids = to_vector(h.ids);
  for (int& k : prefixes) k = std::clamp(k, 0, rows);
  std::sort(prefixes.begin(), prefixes.end());
  prefixes.erase(std::unique(prefixes.begin(), prefixes.end()), prefixes.end());
  for (int k : prefixes) {
    auto st = h.layer.make_state(b);
    if constexpr (requires { h.layer.absorb(h.ws, st, h.ids); }) {
      if (q0 > 0) h.layer.absorb(h.ws, st, id_columns<Space>(ids, b, t, 0, q0));
    } else {
      REQUIRE(q0 == 0);  // a model that predicts only its last rows must take the history
    }
    std::vector<double> got(want.size());
    auto decode = [&](int r0, int r1) {  // rows [r0, r1)
      Tensor<double***, Space> part("part", b, r1 - r0, v);
      h.layer.prefill(h.ws, st, id_columns<Space>(ids, b, t, q0 + r0, q0 + r1), part);
      const auto p = to_vector(part);
      for (int i = 0; i < b; ++i)
        for (int j = r0; j < r1; ++j)
          for (int c = 0; c < v; ++c)
            got[(std::size_t(i) * rows + j) * v + c] = p[(std::size_t(i) * (r1 - r0) + j - r0) * v + c];
    };
    if (k > 0) decode(0, k);
    const auto snap = h.layer.snapshot(st);
    for (std::size_t pass = 0; pass < chunks.size(); ++pass) {
      if (pass > 0) h.layer.restore(st, snap);
      for (int j = k; j < rows; j += chunks[pass]) decode(j, std::min(rows, j + chunks[pass]));
      double worst = 0;
      for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
      INFO(Case::name << ": history " << q0 << ", prefill " << k << " + chunks of " << chunks[pass] << ", max |Δ| "
                      << worst);
      CHECK(worst <= 1e-10);
      CHECK(st.length == t);
    }
  }
  check_workspace<Case, Space, double>();  // decode-only cases too
}

/// Save → load into a differently initialised layer → identical outputs.
template <class Case, class Space>
void check_round_trip() {
  Harness<Case, float, Space> a, b;
  a.randomize(1);
  b.randomize(2);
  const auto path = std::filesystem::temp_directory_path() /
                    (std::string("hybridseq_roundtrip_") + Case::name + "_" + Space::name() + ".safetensors");
  io::save_parameters(a.layer, path, {{"case", Case::name}});
  io::load_parameters(b.layer, path);
  std::filesystem::remove(path);
  Kokkos::deep_copy(b.x, a.x);
  Kokkos::deep_copy(b.ids, a.ids);
  Kokkos::deep_copy(b.dy, a.dy);
  Kokkos::deep_copy(b.targets, a.targets);
  const double oa = a.objective(), ob = b.objective();
  CHECK(oa == ob);
  using L = typename Harness<Case, float, Space>::L;
  if constexpr (!LossLayer<L> && !ModelLayer<L>) CHECK(to_vector(a.y) == to_vector(b.y));
  check_workspace<Case, Space, float>();  // the query in float too (other padding)
}

}  // namespace hybridseq::testing
