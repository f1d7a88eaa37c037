#pragma once
/// \file
/// Needle in a haystack (Cooper et al., arXiv 2603.08859): a marker #0 in the first half of a
/// stream of letters; the letter after it is the needle, asked for by #1 at the end.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../core/error.hpp"
#include "example.hpp"
#include "vocabulary_task.hpp"

namespace hybridseq::tasks {

/// Options of `Needle`.
struct NeedleOptions {
  int n_v = 26;  // letters, 1 ≤ n_v ≤ 26
};

/// Needle in a haystack. Vocabulary: `Vocabulary(n_v, 0, 2)` (#0 marker, #1 query); padding
/// input <null>.
///
/// Input of length T ≥ 3: uniform letters, then x[T−1] = #1 (the query) and x[m] = #0 with m
/// uniform in [0, ⌊T/2⌋); the needle is x[m+1] (a letter). Targets: the needle at every
/// position t ≥ m, including m itself (as in the authors' generator, although the needle is
/// not yet visible there), `null_target` before m.
///
/// `targets_for` takes the first #0 that has a successor as the marker; no marker: all null.
class Needle : public VocabularyTask<NeedleOptions> {
 public:
  explicit Needle(const Options& options = Options())
      : VocabularyTask(checked(options), [](const Options& o) { return Vocabulary(o.n_v, 0, 2); }) {}

  /// Shortest length `sample` accepts.
  int min_len() const { return 3; }

  /// Example `index` of length `len` for `seed`; a pure function of (options, seed, index, len).
  Example sample(std::uint64_t seed, std::uint64_t index, int len) const {
    auto d = example_draws("hybridseq::tasks::Needle::sample", seed, index, len, min_len());
    Example ex;
    ex.input.resize(static_cast<std::size_t>(len));
    for (auto& x : ex.input) x = vocab_.letter(d.below(options_.n_v));
    ex.input.back() = vocab_.number(1);
    ex.input[d.below(len / 2)] = vocab_.number(0);
    ex.target = targets(vocab_, ex.input);
    return ex;
  }

  /// The targets of a given input (e.g. a hand-written one), by the rule above.
  /// Throws value_error on bad options or an id outside the vocabulary.
  static std::vector<std::int32_t> targets_for(const Options& options, std::span<const std::int32_t> input) {
    const Needle task(options);
    task.vocab_.check("hybridseq::tasks::Needle::targets_for", input);
    return targets(task.vocab_, input);
  }

 private:
  static const Options& checked(const Options& o) {
    if (o.n_v < 1 || o.n_v > Vocabulary::max_letters)
      fail<value_error>("hybridseq::tasks::Needle", "n_v is ", o.n_v, ", expected in [1, ", Vocabulary::max_letters,
                        "]");
    return o;
  }

  static std::vector<std::int32_t> targets(const Vocabulary& v, std::span<const std::int32_t> x) {
    std::vector<std::int32_t> y(x.size(), null_target);
    for (std::size_t m = 0; m + 1 < x.size(); ++m)
      if (x[m] == v.number(0)) {
        if (!v.is_special(x[m + 1]))
          for (std::size_t t = m; t < x.size(); ++t) y[t] = x[m + 1];
        break;
      }
    return y;
  }
};

}  // namespace hybridseq::tasks
