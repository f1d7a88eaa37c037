#pragma once
/// \file
/// What every synthetic task over a Vocabulary shares: its checked options, its vocabulary,
/// the accessors the registry and the tools read, and the start of `sample`.

#include <cstdint>
#include <string>
#include <string_view>

#include "draws.hpp"
#include "vocabulary.hpp"

namespace hybridseq::tasks {

template <class TaskOptions>
class VocabularyTask {
 public:
  using Options = TaskOptions;

  const Options& options() const { return options_; }
  const Vocabulary& vocab() const { return vocab_; }
  int vocab_size() const { return vocab_.size(); }
  std::string token_name(int id) const { return vocab_.name(id); }
  std::int32_t pad_id() const { return vocab_.null(); }

 protected:
  /// `options` already checked by the task; the vocabulary is `make_vocab(options)`, built
  /// after the check so that bad options are refused by the task's own message.
  template <class MakeVocabulary>
  VocabularyTask(const Options& options, MakeVocabulary make_vocab) : options_(options), vocab_(make_vocab(options_)) {}

  /// The draws of example `index` at length `len` for `seed` (a pure function of the four),
  /// after refusing a `len` below `min_len`.
  static detail::Draws example_draws(std::string_view api, std::uint64_t seed, std::uint64_t index, int len,
                                     int min_len) {
    detail::check_len(api, len, min_len);
    return detail::Draws(seed, detail::example_stream(index, len));
  }

  Options options_;
  Vocabulary vocab_;
};

}  // namespace hybridseq::tasks
