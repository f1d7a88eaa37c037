#pragma once
/// \file
/// Runtime options through a composition.
///
/// Every layer takes an `Options` struct: the values that must not make a new type (init
/// stds, eps, RoPE base, cache capacities, algorithm choices). A composite's Options holds one
/// per child (and its own values) and lists them with `for_each_child(f)`, so the options of a
/// whole model form a tree that mirrors the model, and any child's options can be reached
/// without spelling out the path:
///
///   typename Model::Options o;
///   core::for_each_option<layers::AttentionOptions>(o, [](auto& a) { a.max_cache = 16384; });
///   Model model(o);
///
/// The path is spelled out where only one child should change, e.g.
/// `o.body.block.branch<1>().layer<1>().rope_base = 500` in a Transformer.

#include <concepts>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "error.hpp"

namespace hybridseq::core {

/// A compile-time extent left to run time (Eigen's `Dynamic`): a vocabulary of `dynamic` in
/// an Embedding, LmHeadLoss or language model is read from its Options::vocab instead, so a
/// tool can size the model by the task it loads without a new type per vocabulary.
inline constexpr int dynamic = -1;

/// The extent a layer runs with: `fixed` when it is compile-time, else `option` (> 0). An
/// option that contradicts a fixed extent is refused rather than ignored; 0 means "unset".
inline std::int64_t resolve_extent(std::string_view api, std::string_view name, int fixed, std::int64_t option) {
  if (fixed != dynamic) {
    if (option != 0 && option != fixed)
      fail<value_error>(api, name, " is ", option, " but the type fixes it at ", fixed,
                        " (leave it 0, or build the type with core::dynamic)");
    return fixed;
  }
  if (option <= 0)
    fail<value_error>(api, name, " is ", option, "; the type leaves it to run time (core::dynamic), so it must be > 0");
  return option;
}

/// The options of a layer that has none.
struct NoOptions {};

namespace detail {
template <class L>
auto options_of() {
  if constexpr (requires { typename L::Options; })
    return std::type_identity<typename L::Options>{};
  else
    return std::type_identity<NoOptions>{};
}
}  // namespace detail

/// L's runtime options (NoOptions for a layer without any).
template <class L>
using options_t = typename decltype(detail::options_of<L>())::type;

/// A layer built from its options (default-built when it takes none).
template <class L>
L construct(const options_t<L>& options) {
  if constexpr (std::constructible_from<L, const options_t<L>&>)
    return L(options);
  else
    return L();
}

/// Calls `f(o)` for every `Target` in the options tree below `options` (itself included),
/// in child order.
template <class Target, class Options, class F>
void for_each_option(Options& options, F&& f) {
  if constexpr (std::is_same_v<std::remove_const_t<Options>, Target>) {
    f(options);
  } else if constexpr (requires { options.for_each_child([](auto&) {}); }) {
    options.for_each_child([&](auto& child) { for_each_option<Target>(child, f); });
  }
}

}  // namespace hybridseq::core
