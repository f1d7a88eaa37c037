#pragma once
/// \file
/// Host-side argument checks. Each throws a hybridseq::error subclass whose message names
/// the API and the actual values ("...Linear::forward: x is (2,17,96), expected (B,T,128)").

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "error.hpp"
#include "spaces.hpp"

namespace hybridseq::core {

/// Wildcard for an extent `check_shape` does not constrain (a batch or time dimension).
inline constexpr std::int64_t any = -1;

/// One expected extent: a value or `any`, with the letter that names it in messages.
struct Dim {
  std::int64_t value;
  char letter;  // 'B', 'T', ... or 0 when the dimension has no name
};

/// `B`, `T`: extents that only need to agree with another tensor's, checked separately.
inline constexpr Dim B{any, 'B'};
inline constexpr Dim T{any, 'T'};
constexpr Dim dim(std::int64_t v) {
  return Dim{v, 0};
}

namespace detail {
template <class View>
std::string extents_of(const View& v) {
  std::string out = "(";
  for (unsigned r = 0; r < View::rank; ++r) {
    if (r) out += ',';
    out += std::to_string(v.extent(r));
  }
  return out + ")";
}

template <std::size_t R>
std::string expected_of(const std::array<Dim, R>& dims) {
  std::string out = "(";
  for (std::size_t r = 0; r < R; ++r) {
    if (r) out += ',';
    if (dims[r].value == any)
      out += dims[r].letter ? std::string(1, dims[r].letter) : std::string("*");
    else
      out += std::to_string(dims[r].value);
  }
  return out + ")";
}
}  // namespace detail

/// Checks every fixed extent of `v` against `dims`; `B`/`T` (or `dim(any)`) match anything.
template <class View, class... Dims>
void check_shape(std::string_view api, std::string_view name, const View& v, Dims... dims) {
  static_assert(sizeof...(Dims) == View::rank, "hybridseq::core::check_shape: one Dim per rank");
  const std::array<Dim, sizeof...(Dims)> expected{Dim(dims)...};
  for (std::size_t r = 0; r < expected.size(); ++r) {
    if (expected[r].value != any && static_cast<std::int64_t>(v.extent(r)) != expected[r].value)
      fail<shape_error>(api, name, " is ", detail::extents_of(v), ", expected ", detail::expected_of(expected));
  }
}

/// Checks that two tensors have identical extents (e.g. y and dy).
/// A sequence layer's input x (B, T, d_in) and output `y_name` (B, T, d_out) with x's B and T,
/// for the call `api` (the check every layer's forward and backward start with).
template <class X, class Y>
void check_sequence_io(std::string_view api, const X& x, std::int64_t d_in, std::string_view y_name, const Y& y,
                       std::int64_t d_out) {
  check_shape(api, "x", x, B, T, dim(d_in));
  check_shape(api, y_name, y, dim(x.extent(0)), dim(x.extent(1)), dim(d_out));
}

template <class ViewA, class ViewB>
void check_same_shape(std::string_view api, std::string_view name_a, const ViewA& a, std::string_view name_b,
                      const ViewB& b) {
  bool same = unsigned(ViewA::rank) == unsigned(ViewB::rank);
  for (unsigned r = 0; same && r < ViewA::rank; ++r) same = a.extent(r) == b.extent(r);
  if (!same)
    fail<shape_error>(api, name_a, " is ", detail::extents_of(a), " but ", name_b, " is ", detail::extents_of(b),
                      "; they must match");
}

/// Throws value_error naming the first non-finite element of `v` (flat index and value).
/// One parallel reduction; used at model boundaries and by the loss, not inside every layer.
template <class View>
void check_finite(std::string_view api, std::string_view name, const View& v) {
  using exec = typename View::execution_space;
  const auto flat = Kokkos::View<const typename View::value_type*, typename View::memory_space,
                                 Kokkos::MemoryTraits<Kokkos::Unmanaged>>(v.data(), v.span());
  std::int64_t first = static_cast<std::int64_t>(flat.extent(0));
  Kokkos::parallel_reduce(
      "hybridseq::core::check_finite", Kokkos::RangePolicy<exec>(0, flat.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& m) {
        if (!math::isfinite(flat(i)) && i < m) m = i;
      },
      Kokkos::Min<std::int64_t>(first));
  if (first < static_cast<std::int64_t>(flat.extent(0))) {
    typename View::non_const_value_type bad{};
    Kokkos::deep_copy(Kokkos::View<typename View::non_const_value_type, Kokkos::HostSpace>(&bad),
                      Kokkos::subview(flat, first));
    fail<value_error>(api, name, " ", detail::extents_of(v), " has a non-finite value ", bad, " at flat index ", first);
  }
}

}  // namespace hybridseq::core
