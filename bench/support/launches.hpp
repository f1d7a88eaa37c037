#pragma once
// Kokkos kernel launches of one call, counted through Kokkos' tools interface. On the host each
// launch is a parallel region, whose closing barrier waits for every thread: the count is what
// a busy neighbour multiplies (docs/design.md, "Threads"). Loops that core::parallel_for runs
// inline are not launches and are not counted; nor are OpenBLAS' own regions.
#include <cstdint>
#include <optional>

#include <Kokkos_Core.hpp>

namespace hybridseq::bench {

namespace detail {
inline std::uint64_t& launch_count() {
  static std::uint64_t n = 0;
  return n;
}
inline void count_launch(const char*, const std::uint32_t, std::uint64_t*) {
  ++launch_count();
}
}  // namespace detail

/// parallel_for, parallel_reduce and parallel_scan launches made by one call of `f`; none
/// (nullopt) when a Kokkos tool is already attached, whose callbacks this must not replace.
template <class F>
std::optional<std::uint64_t> kokkos_launches(F&& f) {
  namespace tools = Kokkos::Tools::Experimental;
  if (Kokkos::Tools::profileLibraryLoaded()) return std::nullopt;
  detail::launch_count() = 0;
  tools::set_begin_parallel_for_callback(detail::count_launch);
  tools::set_begin_parallel_reduce_callback(detail::count_launch);
  tools::set_begin_parallel_scan_callback(detail::count_launch);
  f();
  tools::set_begin_parallel_for_callback(nullptr);
  tools::set_begin_parallel_reduce_callback(nullptr);
  tools::set_begin_parallel_scan_callback(nullptr);
  return detail::launch_count();
}

}  // namespace hybridseq::bench
