#pragma once
/// \file
/// A flat tuple for branch packs.
///
/// `std::tuple` is implemented recursively in libstdc++, which makes large packs slow to
/// compile. Here every element is a direct base `Leaf<I, T>`, so instantiation depth is
/// constant and `get<I>` is a single overload resolution against the base class.

#include <cstddef>
#include <type_traits>
#include <utility>

namespace hybridseq::core {

namespace detail {
template <std::size_t I, class T>
struct Leaf {
  T value;
};

template <class Indices, class... Ts>
struct FlatTupleBase;

template <std::size_t... I, class... Ts>
struct FlatTupleBase<std::index_sequence<I...>, Ts...> : Leaf<I, Ts>... {};

template <std::size_t I, class T>
constexpr T& leaf_get(Leaf<I, T>& l) noexcept {
  return l.value;
}
template <std::size_t I, class T>
constexpr const T& leaf_get(const Leaf<I, T>& l) noexcept {
  return l.value;
}
template <std::size_t I, class T>
T leaf_type(const Leaf<I, T>&);  // unevaluated: recovers the I-th type
}  // namespace detail

template <class... Ts>
struct FlatTuple : detail::FlatTupleBase<std::index_sequence_for<Ts...>, Ts...> {
  static constexpr std::size_t size = sizeof...(Ts);
};

template <std::size_t I, class... Ts>
constexpr auto& get(FlatTuple<Ts...>& t) noexcept {
  return detail::leaf_get<I>(t);
}
template <std::size_t I, class... Ts>
constexpr const auto& get(const FlatTuple<Ts...>& t) noexcept {
  return detail::leaf_get<I>(t);
}

/// A FlatTuple whose I-th element is the prvalue `make(std::integral_constant<size_t, I>{})`
/// (built in place: elements need be neither copyable nor movable).
template <class... Ts, class Make>
constexpr FlatTuple<Ts...> generate_flat_tuple(Make&& make) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return FlatTuple<Ts...>{{detail::Leaf<I, Ts>{make(std::integral_constant<std::size_t, I>{})}...}};
  }
  (std::index_sequence_for<Ts...>{});
}

/// The I-th element type.
template <std::size_t I, class Tuple>
using element_t = decltype(detail::leaf_type<I>(std::declval<const Tuple&>()));

/// Calls `f(element, std::integral_constant<size_t, I>{})` for each element, in order.
template <class Tuple, class F>
constexpr void for_each_indexed(Tuple& t, F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (f(get<I>(t), std::integral_constant<std::size_t, I>{}), ...);
  }
  (std::make_index_sequence<std::remove_const_t<Tuple>::size>{});
}

/// Calls `f(element)` for each element, in order.
template <class Tuple, class F>
constexpr void for_each(Tuple& t, F&& f) {
  for_each_indexed(t, [&](auto& e, auto) { f(e); });
}

}  // namespace hybridseq::core
