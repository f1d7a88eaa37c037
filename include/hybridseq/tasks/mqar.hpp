#pragma once
/// \file
/// Multi-query associative recall (MQAR) of Zoology (Arora, Eyuboglu et al. 2023,
/// HazyResearch/zoology, zoology/data/associative_recall.py `_mqar`).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../core/error.hpp"
#include "draws.hpp"
#include "example.hpp"

namespace hybridseq::tasks {

/// Options of `Mqar`. Zoology's standard sweep: V = 8192 and (T, pairs) ∈ {(64, 4), (128, 8),
/// (256, 16), (512, 64)}, a = 0.01.
struct MqarOptions {
  int vocab = 8192;            // V ≥ 4: keys [1, V/2), values [V/2, V), 0 is the filler
  int pairs = 4;               // K key-value pairs, 1 ≤ K ≤ min(V/2 − 1, V − V/2)
  double power_a = 0.01;       // a > 0: gap g ∈ [0, G) has weight ∝ (g + 1)^(a − 1) (a = 1: uniform)
  bool random_filler = false;  // Zoology's `random_non_queries`: fillers uniform in [0, V)
};

/// MQAR. Token ids are plain integers in [0, V); padding input 0 (the filler).
///
/// Input of length T ≥ 4K: the context k_1 v_1 … k_K v_K (K distinct keys uniform from
/// [1, V/2), K distinct values uniform from [V/2, V), in random order), then filler 0, except
/// that key k_i is queried once at position 2K + 2·g_i. The gaps g_1..g_K are distinct draws
/// from [0, G), G = ⌊(T − 2K)/2⌋, made one after another with probability ∝ (g + 1)^(a − 1)
/// among the gaps not yet taken (the law of numpy's `choice(replace=False, p=p)`, which
/// Zoology uses). Targets: v_i at the query of k_i (the model emits the value at the key
/// position), `null_target` everywhere else.
///
/// Readings: fillers are 0 (Zoology's `random_non_queries=False`), as asked for this library;
/// `random_filler` gives Zoology's default, where a filler may collide with a key (such a
/// collision is not scored). Weights are quantised to integers (2³² at the largest weight)
/// and gaps drawn with exact integer arithmetic, so a sample does not depend on the libm's
/// last-bit rounding beyond that quantisation.
///
/// `targets_for` reads the context from x[0, 2K) and scores every later occurrence of a
/// context key (which is exactly the generator's rule when fillers are 0).
class Mqar {
 public:
  using Options = MqarOptions;

  explicit Mqar(const Options& options = Options()) : options_(checked(options)) {}

  const Options& options() const { return options_; }
  int vocab_size() const { return options_.vocab; }
  /// The id in decimal ("0" is the filler); "_" for `null_target`.
  std::string token_name(int id) const { return id == null_target ? std::string("_") : std::to_string(id); }
  std::int32_t pad_id() const { return 0; }
  /// Shortest length `sample` accepts: 4K (Zoology's bound).
  int min_len() const { return 4 * options_.pairs; }
  /// Number of possible gaps at length `len`: G = ⌊(len − 2K)/2⌋.
  int gaps(int len) const { return (len - 2 * options_.pairs) / 2; }

  /// Example `index` of length `len` for `seed`; a pure function of (options, seed, index, len).
  Example sample(std::uint64_t seed, std::uint64_t index, int len) const {
    constexpr std::string_view api = "hybridseq::tasks::Mqar::sample";
    if (len < min_len())
      fail<value_error>(api, "len is ", len, ", too short for ", options_.pairs,
                        " pairs (expected >= 4 * pairs = ", min_len(), ")");
    detail::Draws d(seed, detail::example_stream(index, len));
    const int k = options_.pairs, half = options_.vocab / 2;
    const std::vector<std::int32_t> keys = distinct(d, 1, half, k), values = distinct(d, half, options_.vocab, k);

    // Sequential weighted sampling without replacement over integer weights.
    const auto g_count = static_cast<std::size_t>(gaps(len));
    std::vector<std::uint64_t> weight(g_count);
    const double a = options_.power_a;
    const double top = std::max(1.0, std::pow(static_cast<double>(g_count), a - 1));  // the largest (g+1)^(a−1)
    for (std::size_t g = 0; g < g_count; ++g)
      weight[g] = std::max<std::uint64_t>(
          1, static_cast<std::uint64_t>(std::ldexp(std::pow(static_cast<double>(g + 1), a - 1) / top, 32)));
    std::uint64_t total = 0;
    for (const auto w : weight) total += w;

    Example ex;
    ex.input.assign(static_cast<std::size_t>(len), 0);
    ex.target.assign(static_cast<std::size_t>(len), null_target);
    for (int i = 0; i < k; ++i) {
      ex.input[2 * i] = keys[i];
      ex.input[2 * i + 1] = values[i];
    }
    std::vector<bool> query(static_cast<std::size_t>(len), false);
    for (int i = 0; i < k; ++i) {
      std::uint64_t u = d.below(total);
      std::size_t g = 0;
      while (u >= weight[g]) u -= weight[g++];
      total -= weight[g];
      weight[g] = 0;
      const std::size_t pos = static_cast<std::size_t>(2 * k) + 2 * g;
      ex.input[pos] = keys[i];
      ex.target[pos] = values[i];
      query[pos] = true;
    }
    if (options_.random_filler)
      for (std::size_t t = static_cast<std::size_t>(2 * k); t < ex.input.size(); ++t)
        if (!query[t]) ex.input[t] = d.below(options_.vocab);
    return ex;
  }

  /// The targets of a given input (e.g. a hand-written one): context x[0, 2K), then every later
  /// occurrence of a context key is scored with its value. Throws value_error on bad options,
  /// an id outside [0, V), or an input shorter than 2K.
  static std::vector<std::int32_t> targets_for(const Options& options, std::span<const std::int32_t> input) {
    constexpr std::string_view api = "hybridseq::tasks::Mqar::targets_for";
    const Mqar task(options);
    const std::size_t context = static_cast<std::size_t>(2 * task.options_.pairs);
    if (input.size() < context)
      fail<value_error>(api, "input has ", input.size(), " tokens, fewer than the 2 * pairs = ", context,
                        " of the context");
    for (std::size_t t = 0; t < input.size(); ++t)
      if (input[t] < 0 || input[t] >= task.options_.vocab)
        fail<value_error>(api, "token id ", input[t], " at t=", t, " is outside [0, ", task.options_.vocab, ")");
    std::vector<std::int32_t> y(input.size(), null_target);
    for (std::size_t t = context; t < input.size(); ++t)
      for (std::size_t i = 0; i < context; i += 2)
        if (input[t] == input[i]) {
          y[t] = input[i + 1];
          break;
        }
    return y;
  }

 private:
  static const Options& checked(const Options& o) {
    constexpr std::string_view api = "hybridseq::tasks::Mqar";
    if (o.vocab < 4) fail<value_error>(api, "vocab is ", o.vocab, ", expected >= 4");
    const int most = std::min(o.vocab / 2 - 1, o.vocab - o.vocab / 2);
    if (o.pairs < 1 || o.pairs > most)
      fail<value_error>(api, "pairs is ", o.pairs, ", expected in [1, ", most, "] for vocab ", o.vocab);
    if (!(o.power_a > 0) || !std::isfinite(o.power_a))
      fail<value_error>(api, "power_a is ", o.power_a, ", expected finite and > 0");
    return o;
  }

  /// `count` distinct integers uniform in [lo, hi), in draw order (rejection of repeats: a
  /// uniformly random ordered subset, as numpy's choice(replace=False)).
  static std::vector<std::int32_t> distinct(detail::Draws& d, int lo, int hi, int count) {
    std::vector<std::int32_t> out;
    out.reserve(static_cast<std::size_t>(count));
    while (static_cast<int>(out.size()) < count) {
      const std::int32_t x = lo + d.below(hi - lo);
      if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
    }
    return out;
  }

  Options options_;
};

}  // namespace hybridseq::tasks
