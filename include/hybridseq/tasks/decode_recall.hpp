#pragma once
/// \file
/// Associative recall with decoding ("decode-recall", "decode-recall-last", Cooper et al., arXiv
/// 2603.08859): bit tokens #0/#1 drive a running key s ← (2s + bit) mod n_v, and the model must
/// recall the token that most recently followed the letter V_s.

#include <bit>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../core/error.hpp"
#include "example.hpp"
#include "vocabulary_task.hpp"

namespace hybridseq::tasks {

/// Options of `DecodeRecall`. The authors round num_vocab (default 26) down to a power of two,
/// 16 (generate.py force_args); here a non-power of two is an error.
struct DecodeRecallOptions {
  int n_v = 16;            // letters, a power of two in [2, 16] (n_v ≤ 26)
  double bit_ratio = 0.2;  // p: probability that a position is a bit token #0/#1
  bool last_only = false;  // "decode-recall-last"
};

/// Decode-recall. Vocabulary: `Vocabulary(n_v, 0, 2)` (bits #0, #1); padding input <null>.
///
/// decode-recall: tokens i.i.d., a bit with probability p (#0/#1 equally likely), else a
/// uniform letter. Scanning left to right, at each position t:
///   1. the pair (x[t−1], x[t]) is recorded, t ≥ 1 ("y follows x" for every token x, bits too);
///   2. if x[t] is a bit b, s ← (2s + b) mod n_v (s starts at 0);
///   3. the target is the token recorded as following V_s, or `null_target` if there is none.
/// The recorded follower may be a bit token (V_s immediately followed by a bit): it is the
/// target and is scored, as in the authors' generator. OOD evaluation: another bit ratio.
///
/// decode-recall-last (`last_only`): only the last position is scored. A sequence is a prefix
/// of length T − n_b (letters, with bits at rate `bit_ratio`; the authors use 0, which
/// `make_task("decode-recall-last")` sets) followed by the n_b = log2(n_v) bits of a uniform
/// code c, most significant first; the last position's running key is then exactly c whatever
/// the prefix did. Its target is the token after the most recent occurrence of V_c at a
/// position ≤ T − 2 − n_b, i.e. the letter before the code does not count as an occurrence
/// (its follower would be a bit): the authors search the prefix from T − 2 − n_b backwards.
/// `null_target` if V_c does not occur there. Requires T ≥ n_b + 2.
class DecodeRecall : public VocabularyTask<DecodeRecallOptions> {
 public:
  explicit DecodeRecall(const Options& options = Options()) : VocabularyTask(checked(options), &vocabulary) {}

  /// Bits in the code of decode-recall-last: log2(n_v).
  int code_bits() const { return std::countr_zero(static_cast<unsigned>(options_.n_v)); }
  /// Shortest length `sample` accepts: 1, or n_b + 2 for decode-recall-last.
  int min_len() const { return options_.last_only ? code_bits() + 2 : 1; }

  /// Example `index` of length `len` for `seed`; a pure function of (options, seed, index, len).
  Example sample(std::uint64_t seed, std::uint64_t index, int len) const {
    auto d = example_draws("hybridseq::tasks::DecodeRecall::sample", seed, index, len, min_len());
    Example ex;
    ex.input.resize(static_cast<std::size_t>(len));
    const int random_len = options_.last_only ? len - code_bits() : len;
    for (int t = 0; t < random_len; ++t)
      ex.input[t] = d.bernoulli(options_.bit_ratio) ? vocab_.number(d.below(2)) : vocab_.letter(d.below(options_.n_v));
    if (options_.last_only) {
      int code = d.below(options_.n_v);
      for (int t = len - 1; t >= random_len; --t, code /= 2) ex.input[t] = vocab_.number(code % 2);
    }
    ex.target = targets(options_, vocab_, ex.input);
    return ex;
  }

  /// The targets of a given input (e.g. a hand-written one), by the rules above (for
  /// decode-recall-last the code is whatever the running key is at the last position).
  /// Throws value_error on bad options, an id outside the vocabulary, or (last_only) a length
  /// below n_b + 2.
  static std::vector<std::int32_t> targets_for(const Options& options, std::span<const std::int32_t> input) {
    constexpr std::string_view api = "hybridseq::tasks::DecodeRecall::targets_for";
    const DecodeRecall task(options);
    task.vocab_.check(api, input);
    detail::check_len(api, static_cast<int>(input.size()), task.min_len());
    return targets(task.options_, task.vocab_, input);
  }

 private:
  static const Options& checked(const Options& o) {
    constexpr std::string_view api = "hybridseq::tasks::DecodeRecall";
    if (o.n_v < 2 || o.n_v > Vocabulary::max_letters || !std::has_single_bit(static_cast<unsigned>(o.n_v)))
      fail<value_error>(api, "n_v is ", o.n_v, ", expected a power of 2 in [2, ", Vocabulary::max_letters, "]");
    detail::check_rate(api, "bit_ratio", o.bit_ratio);
    return o;
  }
  static Vocabulary vocabulary(const Options& o) { return Vocabulary(o.n_v, 0, 2); }

  static std::vector<std::int32_t> targets(const Options& o, const Vocabulary& v, std::span<const std::int32_t> x) {
    const std::size_t n = x.size();
    std::vector<std::int32_t> y(n, null_target);
    if (o.last_only) {
      int s = 0;
      for (const std::int32_t token : x)
        if (v.is_number(token)) s = (2 * s + v.number_value(token)) % o.n_v;
      const int bits = std::countr_zero(static_cast<unsigned>(o.n_v));
      for (std::size_t i = n - 2 - static_cast<std::size_t>(bits) + 1; i-- > 0;)
        if (x[i] == v.letter(s)) {
          if (!v.is_special(x[i + 1])) y[n - 1] = x[i + 1];
          break;
        }
      return y;
    }
    std::vector<std::int32_t> follower(static_cast<std::size_t>(v.size()), null_target);
    int s = 0;
    for (std::size_t t = 0; t < n; ++t) {
      if (t > 0) follower[static_cast<std::size_t>(x[t - 1])] = v.is_special(x[t]) ? null_target : x[t];
      if (v.is_number(x[t])) s = (2 * s + v.number_value(x[t])) % o.n_v;
      y[t] = follower[static_cast<std::size_t>(v.letter(s))];
    }
    return y;
  }
};

}  // namespace hybridseq::tasks
