#pragma once
// Kokkos kernel launches and allocations of one call, counted through Kokkos' tools interface.
// On the host each launch is a parallel region, whose closing barrier waits for every thread:
// the count is what a busy neighbour multiplies (docs/design.md, "Threads"). Loops that
// core::parallel_for runs inline are not launches and are not counted; nor are OpenBLAS' own
// regions. On a GPU each allocation is a synchronising cudaMalloc.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

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
inline std::uint64_t& allocation_count() {
  static std::uint64_t n = 0;
  return n;
}
inline void count_allocation(Kokkos::Profiling::SpaceHandle, const char*, const void*, std::uint64_t) {
  ++allocation_count();
}

struct KernelClock {
  std::map<std::string, std::pair<std::uint64_t, double>> by_name;  // calls, seconds
  std::vector<std::pair<std::string, std::chrono::steady_clock::time_point>> open;
};
inline KernelClock& kernel_clock() {
  static KernelClock c;
  return c;
}
inline void start_kernel(const char* name, const std::uint32_t, std::uint64_t* id) {
  Kokkos::fence();  // earlier asynchronous work is not this kernel's
  auto& c = kernel_clock();
  *id = c.open.size();
  c.open.emplace_back(name, std::chrono::steady_clock::now());
}
inline void stop_kernel(const std::uint64_t id) {
  Kokkos::fence();
  auto& c = kernel_clock();
  auto& entry = c.by_name[c.open[id].first];
  entry.first += 1;
  entry.second += std::chrono::duration<double>(std::chrono::steady_clock::now() - c.open[id].second).count();
  c.open.resize(id);
}
}  // namespace detail

/// Time per Kokkos kernel name over one call of `f`, most first: each launch fenced before and
/// after (so a device kernel's time includes its launch, and the call runs slower than unprofiled),
/// plus "(outside Kokkos kernels)": the rest of the call's time (cuBLAS, host code). Empty when
/// a Kokkos tool is already attached.
struct KernelTime {
  std::string name;
  std::uint64_t calls;
  double seconds;
};
template <class F>
std::vector<KernelTime> kernel_times(F&& f) {
  namespace tools = Kokkos::Tools::Experimental;
  if (Kokkos::Tools::profileLibraryLoaded()) return {};
  detail::kernel_clock() = {};
  tools::set_begin_parallel_for_callback(detail::start_kernel);
  tools::set_begin_parallel_reduce_callback(detail::start_kernel);
  tools::set_begin_parallel_scan_callback(detail::start_kernel);
  tools::set_end_parallel_for_callback(detail::stop_kernel);
  tools::set_end_parallel_reduce_callback(detail::stop_kernel);
  tools::set_end_parallel_scan_callback(detail::stop_kernel);
  Kokkos::fence();
  const auto t0 = std::chrono::steady_clock::now();
  f();
  Kokkos::fence();
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto set : {tools::set_begin_parallel_for_callback, tools::set_begin_parallel_reduce_callback,
                   tools::set_begin_parallel_scan_callback})
    set(nullptr);
  for (auto set : {tools::set_end_parallel_for_callback, tools::set_end_parallel_reduce_callback,
                   tools::set_end_parallel_scan_callback})
    set(nullptr);
  std::vector<KernelTime> times;
  double kernels = 0;
  for (const auto& [name, entry] : detail::kernel_clock().by_name) {
    times.push_back({name, entry.first, entry.second});
    kernels += entry.second;
  }
  times.push_back({"(outside Kokkos kernels)", 0, total - kernels});
  std::sort(times.begin(), times.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  return times;
}

namespace detail {
/// Runs f once with `callback` installed through each of `setters`, then removes it: how the
/// counts below are taken. False (f not run) when a Kokkos tool is already attached, whose
/// callbacks this must not replace.
template <class Callback, class F, class... Setters>
bool with_callback(Callback callback, F&& f, Setters... setters) {
  if (Kokkos::Tools::profileLibraryLoaded()) return false;
  (setters(callback), ...);
  f();
  (setters(nullptr), ...);
  return true;
}
}  // namespace detail

/// parallel_for, parallel_reduce and parallel_scan launches made by one call of `f`; none
/// (nullopt) when a Kokkos tool is already attached.
template <class F>
std::optional<std::uint64_t> kokkos_launches(F&& f) {
  namespace tools = Kokkos::Tools::Experimental;
  detail::launch_count() = 0;
  if (!detail::with_callback(detail::count_launch, f, tools::set_begin_parallel_for_callback,
                             tools::set_begin_parallel_reduce_callback, tools::set_begin_parallel_scan_callback))
    return std::nullopt;
  return detail::launch_count();
}

/// Kokkos allocations (Views, in any memory space) made by one call of `f`; none (nullopt) when
/// a Kokkos tool is already attached. On a GPU each is a synchronising cudaMalloc.
template <class F>
std::optional<std::uint64_t> kokkos_allocations(F&& f) {
  detail::allocation_count() = 0;
  if (!detail::with_callback(detail::count_allocation, f, Kokkos::Tools::Experimental::set_allocate_data_callback))
    return std::nullopt;
  return detail::allocation_count();
}

}  // namespace hybridseq::bench
