#pragma once
/// \file
/// Selective copy with variable shifts ("var-copy", Cooper et al., arXiv 2603.08859): every number
/// token #k sets the shift, and each later position must emit the token k places back.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../core/error.hpp"
#include "example.hpp"
#include "vocabulary_task.hpp"

namespace hybridseq::tasks {

/// Options of `SelectiveCopy`. Defaults are the authors' (standard_archs/main.py: 26 letters,
/// 5 number tokens, p = 0.2; var-copy numbers start at #5, data_utils.get_tokenizer).
struct SelectiveCopyOptions {
  int n_v = 26;       // letters V0..V{n_v−1}, 1 ≤ n_v ≤ 26
  int min_shift = 5;  // number tokens are #min_shift .. #max_shift, 1 ≤ min_shift ≤ max_shift
  int max_shift = 9;
  double rate = 0.2;   // p: probability that a position is a number token (not mixed)
  bool mixed = false;  // "var-copy-mixed": per sequence, low_rate or high_rate with probability ½ each
  double low_rate = 0.03;
  double high_rate = 0.2;  // mixed sequences at this rate end with a number token
};

/// Selective copy ("var-copy", and "var-copy-mixed" with `mixed`).
///
/// Input: i.i.d. tokens, a number token with probability p (uniform over #min_shift..#max_shift),
/// otherwise a letter (uniform). Target at j: x[j − k], k the value of the most recent number
/// token at or before j; `null_target` before the first number token and where j − k < 0.
///
/// Readings (from the authors' generator, standard_archs/generate.py):
/// * x[j − k] may itself be a number token; it is then the target, and is scored. Only a
///   special token (<bos>/<eos>/<null>, never generated) would give a null target.
/// * Mixed: with probability ½ the sequence uses low_rate (0.03, "hard for attention"), else
///   high_rate (0.2, "hard for the SSM") and its last token is replaced by a uniform number
///   token. Only the high-rate half has its last token forced, as in the authors' code.
///
/// Vocabulary: `Vocabulary(n_v, min_shift, max_shift − min_shift + 1)`; padding input <null>.
class SelectiveCopy : public VocabularyTask<SelectiveCopyOptions> {
 public:
  explicit SelectiveCopy(const Options& options = Options()) : VocabularyTask(checked(options), &vocabulary) {}

  /// Shortest length `sample` accepts.
  int min_len() const { return 1; }

  /// Example `index` of length `len` for `seed`; a pure function of (options, seed, index, len).
  Example sample(std::uint64_t seed, std::uint64_t index, int len) const {
    auto d = example_draws("hybridseq::tasks::SelectiveCopy::sample", seed, index, len, min_len());
    const int shifts = options_.max_shift - options_.min_shift + 1;
    double p = options_.rate;
    bool force_last = false;
    if (options_.mixed) {
      force_last = !d.bernoulli(0.5);
      p = force_last ? options_.high_rate : options_.low_rate;
    }
    Example ex;
    ex.input.resize(static_cast<std::size_t>(len));
    for (auto& x : ex.input)
      x = d.bernoulli(p) ? vocab_.number(options_.min_shift + d.below(shifts)) : vocab_.letter(d.below(options_.n_v));
    if (force_last) ex.input.back() = vocab_.number(options_.min_shift + d.below(shifts));
    ex.target = targets(vocab_, ex.input);
    return ex;
  }

  /// The targets of a given input (e.g. a hand-written one), by the rule above.
  /// Throws value_error on bad options or an id outside the vocabulary.
  static std::vector<std::int32_t> targets_for(const Options& options, std::span<const std::int32_t> input) {
    const Vocabulary v = vocabulary(checked(options));
    v.check("hybridseq::tasks::SelectiveCopy::targets_for", input);
    return targets(v, input);
  }

 private:
  static const Options& checked(const Options& o) {
    constexpr std::string_view api = "hybridseq::tasks::SelectiveCopy";
    if (o.n_v < 1 || o.n_v > Vocabulary::max_letters)
      fail<value_error>(api, "n_v is ", o.n_v, ", expected in [1, ", Vocabulary::max_letters, "]");
    if (o.min_shift < 1 || o.max_shift < o.min_shift)
      fail<value_error>(api, "shifts are [", o.min_shift, ", ", o.max_shift, "], expected 1 <= min_shift <= max_shift");
    detail::check_rate(api, "rate", o.rate);
    detail::check_rate(api, "low_rate", o.low_rate);
    detail::check_rate(api, "high_rate", o.high_rate);
    return o;
  }
  static Vocabulary vocabulary(const Options& o) {
    return Vocabulary(o.n_v, o.min_shift, o.max_shift - o.min_shift + 1);
  }

  static std::vector<std::int32_t> targets(const Vocabulary& v, std::span<const std::int32_t> x) {
    std::vector<std::int32_t> y(x.size(), null_target);
    std::size_t k = 0;  // current shift; 0 = no number token seen yet
    for (std::size_t j = 0; j < x.size(); ++j) {
      if (v.is_number(x[j])) k = static_cast<std::size_t>(v.number_value(x[j]));
      if (k > 0 && j >= k && !v.is_special(x[j - k])) y[j] = x[j - k];
    }
    return y;
  }
};

}  // namespace hybridseq::tasks
