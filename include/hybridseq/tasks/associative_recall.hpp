#pragma once
/// \file
/// Associative recall ("ar") and multi-key associative recall ("mkar") over a stream of letters
/// (Cooper et al., arXiv 2603.08859): at every position, recall the token that followed the
/// previous occurrence of the current key.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "../core/error.hpp"
#include "example.hpp"
#include "vocabulary_task.hpp"

namespace hybridseq::tasks {

/// Options of `AssociativeRecall`.
struct AssociativeRecallOptions {
  int n_v = 26;      // letters, 1 ≤ n_v ≤ 26
  int key_size = 1;  // k: tokens per key, 1 ≤ k ≤ 8 ("ar" is k = 1)
};

/// AR / MKAR. Vocabulary: `Vocabulary(n_v, 0, 0)` (no number tokens); padding input <null>.
///
/// Input: i.i.d. uniform letters. At position t ≥ k − 1 the key is the k-gram x[t−k+1..t];
/// the target is the value last seen after that key, i.e. x[e+1] for the largest e < t with
/// x[e−k+1..e] equal to the key; `null_target` if the key has not occurred before (or t < k−1).
/// For k = 1 this is AR: "the token that followed the previous occurrence of x_t" (x[t] itself
/// when x[t−1] = x[t]).
///
/// Reading: the authors' MKAR (generate.py, "assoc-recall-mk") records a key only from
/// position k + 1 on, so it never learns the first key/value pair (x[0..k−1], x[k]); we
/// record it, which makes k = 1 identical to AR, as the definition implies.
class AssociativeRecall : public VocabularyTask<AssociativeRecallOptions> {
 public:
  static constexpr int max_key_size = 8;

  explicit AssociativeRecall(const Options& options = Options())
      : VocabularyTask(checked(options), [](const Options& o) { return Vocabulary(o.n_v, 0, 0); }) {}

  /// Shortest length `sample` accepts.
  int min_len() const { return 1; }

  /// Example `index` of length `len` for `seed`; a pure function of (options, seed, index, len).
  Example sample(std::uint64_t seed, std::uint64_t index, int len) const {
    auto d = example_draws("hybridseq::tasks::AssociativeRecall::sample", seed, index, len, min_len());
    Example ex;
    ex.input.resize(static_cast<std::size_t>(len));
    for (auto& x : ex.input) x = vocab_.letter(d.below(options_.n_v));
    ex.target = targets(options_, vocab_, ex.input);
    return ex;
  }

  /// The targets of a given input (e.g. a hand-written one), by the rule above.
  /// Throws value_error on bad options or an id outside the vocabulary.
  static std::vector<std::int32_t> targets_for(const Options& options, std::span<const std::int32_t> input) {
    const AssociativeRecall task(options);
    task.vocab_.check("hybridseq::tasks::AssociativeRecall::targets_for", input);
    return targets(task.options_, task.vocab_, input);
  }

 private:
  static const Options& checked(const Options& o) {
    constexpr std::string_view api = "hybridseq::tasks::AssociativeRecall";
    if (o.n_v < 1 || o.n_v > Vocabulary::max_letters)
      fail<value_error>(api, "n_v is ", o.n_v, ", expected in [1, ", Vocabulary::max_letters, "]");
    if (o.key_size < 1 || o.key_size > max_key_size)
      fail<value_error>(api, "key_size is ", o.key_size, ", expected in [1, ", max_key_size, "]");
    return o;
  }

  static std::vector<std::int32_t> targets(const Options& o, const Vocabulary& v, std::span<const std::int32_t> x) {
    const std::size_t n = x.size(), k = static_cast<std::size_t>(o.key_size);
    // A k-gram as a base-V number: V ≤ 29 and k ≤ 8, so it fits in 64 bits.
    const auto key_ending_at = [&](std::size_t e) {
      std::uint64_t key = 0;
      for (std::size_t i = e + 1 - k; i <= e; ++i)
        key = key * static_cast<std::uint64_t>(v.size()) + static_cast<std::uint64_t>(x[i]);
      return key;
    };
    std::vector<std::int32_t> y(n, null_target);
    std::unordered_map<std::uint64_t, std::int32_t> value_after;
    for (std::size_t t = 0; t < n; ++t) {
      if (t >= k) value_after[key_ending_at(t - 1)] = v.is_special(x[t]) ? null_target : x[t];
      if (t + 1 >= k) {
        const auto it = value_after.find(key_ending_at(t));
        if (it != value_after.end()) y[t] = it->second;
      }
    }
    return y;
  }
};

}  // namespace hybridseq::tasks
