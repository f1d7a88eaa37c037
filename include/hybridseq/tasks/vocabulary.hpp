#pragma once
/// \file
/// The token layout of the letter-and-number synthetic tasks of Cooper et al. (arXiv 2603.08859):
/// letters V0..V{n_v−1}, number tokens #k, and the specials <bos>, <eos>, <null>.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "../core/error.hpp"
#include "example.hpp"

namespace hybridseq::tasks {

/// Token ids, in the order of the authors' tokenizer (letters, numbers, specials):
///
///   [0, n_v)                   letters V0 .. V{n_v−1}
///   [n_v, n_v + n)             number tokens #first .. #(first + n − 1)
///   n_v + n, +1, +2            <bos>, <eos>, <null>
///
/// so the vocabulary size is V = n_v + n + 3. <null> is the padding input token; a <null>
/// *target* is `null_target` (−100), not this id. <bos>/<eos> are part of the vocabulary (the
/// authors reserve them) but no generator here emits them.
///
/// Requires: 1 ≤ n_v ≤ 26 (the authors print letters as a..z), n ≥ 0, first ≥ 0.
class Vocabulary {
 public:
  static constexpr int max_letters = 26;

  Vocabulary(int letters, int first_number, int numbers)
      : letters_(letters), first_number_(first_number), numbers_(numbers) {
    constexpr std::string_view api = "hybridseq::tasks::Vocabulary";
    if (letters < 1 || letters > max_letters)
      fail<value_error>(api, "n_v is ", letters, ", expected in [1, ", max_letters, "]");
    if (numbers < 0 || first_number < 0)
      fail<value_error>(api, "number tokens #", first_number, " x ", numbers, ": expected first >= 0 and count >= 0");
  }

  int letters() const { return letters_; }
  int numbers() const { return numbers_; }
  int first_number() const { return first_number_; }
  /// V = n_v + n + 3.
  int size() const { return letters_ + numbers_ + 3; }

  /// Id of letter V_i, 0 ≤ i < n_v.
  std::int32_t letter(int i) const { return i; }
  /// Id of number token #value, first ≤ value < first + n.
  std::int32_t number(int value) const { return letters_ + (value - first_number_); }
  std::int32_t bos() const { return letters_ + numbers_; }
  std::int32_t eos() const { return letters_ + numbers_ + 1; }
  std::int32_t null() const { return letters_ + numbers_ + 2; }

  bool is_letter(std::int32_t id) const { return id >= 0 && id < letters_; }
  bool is_number(std::int32_t id) const { return id >= letters_ && id < letters_ + numbers_; }
  bool is_special(std::int32_t id) const { return id >= bos() && id <= null(); }
  /// k of a number token #k (requires is_number(id)).
  int number_value(std::int32_t id) const { return id - letters_ + first_number_; }

  /// "V3", "#7", "<bos>", "<eos>", "<null>"; "_" for `null_target` (the authors' printing of an
  /// unscored target); "<?id>" for anything else.
  std::string name(std::int32_t id) const {
    // Appends rather than "V" + std::to_string(...): GCC 12 reports a false -Wrestrict there.
    std::string out;
    if (is_letter(id)) return out.append("V").append(std::to_string(id));
    if (is_number(id)) return out.append("#").append(std::to_string(number_value(id)));
    if (id == bos()) return "<bos>";
    if (id == eos()) return "<eos>";
    if (id == null()) return "<null>";
    if (id == null_target) return "_";
    return out.append("<?").append(std::to_string(id)).append(">");
  }

  /// Throws value_error (naming `api`, the position and the id) unless every id is in [0, V).
  void check(std::string_view api, std::span<const std::int32_t> ids) const {
    for (std::size_t t = 0; t < ids.size(); ++t)
      if (ids[t] < 0 || ids[t] >= size())
        fail<value_error>(api, "token id ", ids[t], " at t=", t, " is outside [0, ", size(), ")");
  }

 private:
  int letters_, first_number_, numbers_;
};

namespace detail {
/// Throws value_error unless 0 ≤ rate ≤ 1 (NaN fails too).
inline void check_rate(std::string_view api, std::string_view what, double rate) {
  if (!(rate >= 0 && rate <= 1)) fail<value_error>(api, what, " is ", rate, ", expected in [0, 1]");
}
/// Throws value_error unless len ≥ min_len.
inline void check_len(std::string_view api, int len, int min_len) {
  if (len < min_len) fail<value_error>(api, "len is ", len, ", expected >= ", min_len);
}
}  // namespace detail

}  // namespace hybridseq::tasks
