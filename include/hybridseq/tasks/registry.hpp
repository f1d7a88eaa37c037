#pragma once
/// \file
/// The synthetic tasks by name: a type-erased `AnyTask` and `make_task`.

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "../core/error.hpp"
#include "associative_recall.hpp"
#include "decode_recall.hpp"
#include "example.hpp"
#include "mqar.hpp"
#include "needle.hpp"
#include "selective_copy.hpp"

namespace hybridseq::tasks {

/// Names `make_task` knows, in this order.
inline constexpr std::array<std::string_view, 8> task_names = {
    "var-copy", "var-copy-mixed", "decode-recall", "decode-recall-last", "ar", "mkar", "needle", "mqar"};

/// Overrides of a task's default options, e.g. from a command line. Unset fields keep the
/// task's defaults; a set field the task does not have is a config_error.
struct TaskOptions {
  std::optional<int> n_v = std::nullopt;        // letters: every task but mqar
  std::optional<double> rate = std::nullopt;    // var-copy: number rate p; decode-recall(-last): bit ratio
  std::optional<int> min_shift = std::nullopt;  // var-copy(-mixed): number tokens #min_shift..#max_shift
  std::optional<int> max_shift = std::nullopt;
  std::optional<int> key_size = std::nullopt;    // mkar: k
  std::optional<int> vocab = std::nullopt;       // mqar: V
  std::optional<int> pairs = std::nullopt;       // mqar: K
  std::optional<double> power_a = std::nullopt;  // mqar: a
};

/// One of the synthetic tasks, chosen at run time, with its registry name.
class AnyTask {
 public:
  using Variant = std::variant<SelectiveCopy, DecodeRecall, AssociativeRecall, Needle, Mqar>;

  AnyTask(std::string name, Variant task) : name_(std::move(name)), task_(std::move(task)) {}

  const std::string& name() const { return name_; }
  const Variant& variant() const { return task_; }

  int vocab_size() const {
    return std::visit([](const auto& t) { return t.vocab_size(); }, task_);
  }
  std::string token_name(int id) const {
    return std::visit([id](const auto& t) { return t.token_name(id); }, task_);
  }
  std::int32_t pad_id() const {
    return std::visit([](const auto& t) { return t.pad_id(); }, task_);
  }
  /// Shortest length `sample` accepts.
  int min_len() const {
    return std::visit([](const auto& t) { return t.min_len(); }, task_);
  }
  Example sample(std::uint64_t seed, std::uint64_t index, int len) const {
    return std::visit([&](const auto& t) { return t.sample(seed, index, len); }, task_);
  }
  /// The task's `targets_for` with its own options.
  std::vector<std::int32_t> targets_for(std::span<const std::int32_t> input) const {
    return std::visit([&](const auto& t) { return t.targets_for(t.options(), input); }, task_);
  }

 private:
  std::string name_;
  Variant task_;
};

namespace detail {
inline std::string known_task_names() {
  std::string out;
  for (const auto n : task_names) out.append(out.empty() ? "" : ", ").append(n);
  return out;
}
}  // namespace detail

/// The task called `name` (one of `task_names`) with `options` applied over its defaults:
///   var-copy            SelectiveCopy         n_v, rate, min_shift, max_shift
///   var-copy-mixed      SelectiveCopy, mixed  n_v, min_shift, max_shift
///   decode-recall       DecodeRecall          n_v, rate (bit ratio)
///   decode-recall-last  DecodeRecall, last    n_v, rate (prefix bit ratio, default 0)
///   ar                  AssociativeRecall     n_v (key_size 1)
///   mkar                AssociativeRecall     n_v, key_size
///   needle              Needle                n_v
///   mqar                Mqar                  vocab, pairs, power_a
/// Throws config_error for an unknown name or an option the task does not have, value_error
/// (from the task) for a bad value.
inline AnyTask make_task(std::string_view name, const TaskOptions& options = {}) {
  constexpr std::string_view api = "hybridseq::tasks::make_task";
  // Every set option must be one the task takes.
  const auto allow = [&](std::initializer_list<std::string_view> allowed) {
    const auto reject = [&](bool set, std::string_view option) {
      if (!set) return;
      for (const auto a : allowed)
        if (a == option) return;
      fail<config_error>(api, "option '", option, "' does not apply to task '", name, "'");
    };
    reject(options.n_v.has_value(), "n_v");
    reject(options.rate.has_value(), "rate");
    reject(options.min_shift.has_value(), "min_shift");
    reject(options.max_shift.has_value(), "max_shift");
    reject(options.key_size.has_value(), "key_size");
    reject(options.vocab.has_value(), "vocab");
    reject(options.pairs.has_value(), "pairs");
    reject(options.power_a.has_value(), "power_a");
  };
  const std::string key(name);
  if (name == "var-copy" || name == "var-copy-mixed") {
    const bool mixed = name == "var-copy-mixed";
    if (mixed)
      allow({"n_v", "min_shift", "max_shift"});
    else
      allow({"n_v", "rate", "min_shift", "max_shift"});
    SelectiveCopy::Options o;
    o.n_v = options.n_v.value_or(o.n_v);
    o.rate = options.rate.value_or(o.rate);
    o.min_shift = options.min_shift.value_or(o.min_shift);
    o.max_shift = options.max_shift.value_or(o.max_shift);
    o.mixed = mixed;
    return AnyTask(key, SelectiveCopy(o));
  }
  if (name == "decode-recall" || name == "decode-recall-last") {
    allow({"n_v", "rate"});
    DecodeRecall::Options o;
    o.last_only = name == "decode-recall-last";
    o.n_v = options.n_v.value_or(o.n_v);
    o.bit_ratio = options.rate.value_or(o.last_only ? 0.0 : o.bit_ratio);
    return AnyTask(key, DecodeRecall(o));
  }
  if (name == "ar" || name == "mkar") {
    if (name == "ar")
      allow({"n_v"});
    else
      allow({"n_v", "key_size"});
    AssociativeRecall::Options o;
    o.n_v = options.n_v.value_or(o.n_v);
    o.key_size = options.key_size.value_or(o.key_size);
    return AnyTask(key, AssociativeRecall(o));
  }
  if (name == "needle") {
    allow({"n_v"});
    Needle::Options o;
    o.n_v = options.n_v.value_or(o.n_v);
    return AnyTask(key, Needle(o));
  }
  if (name == "mqar") {
    allow({"vocab", "pairs", "power_a"});
    Mqar::Options o;
    o.vocab = options.vocab.value_or(o.vocab);
    o.pairs = options.pairs.value_or(o.pairs);
    o.power_a = options.power_a.value_or(o.power_a);
    return AnyTask(key, Mqar(o));
  }
  fail<config_error>(api, "unknown task '", name, "'; known: ", detail::known_task_names());
}

}  // namespace hybridseq::tasks
