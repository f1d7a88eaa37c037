#pragma once
/// \file
/// Which threads may call hybridseq: one. The library runs its kernels through Kokkos'
/// execution spaces, which it does not make thread-safe: Kokkos 3.4's OpenMP space exists
/// only on the thread that called Kokkos::initialize (any other sees an "uninitialized
/// execution space"), and the Serial space shares its reduction scratch between all callers,
/// so two threads training at once would race silently. Parallelism lives inside the
/// kernels (OpenMP threads); run two trainings as two processes.
///
/// The stateful entry points (train::Trainer, decode::Session) therefore check, before
/// anything allocates, that their calls come from the library's thread — the first one that
/// used them, which must have the execution space initialised — and refuse any other with a
/// config_error naming the call and both threads.

#include <atomic>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>

#include "concepts.hpp"
#include "error.hpp"

namespace hybridseq::core {

namespace detail {
/// The thread that first used the library's stateful entry points (no thread: none yet).
inline std::atomic<std::thread::id>& library_thread() {
  static std::atomic<std::thread::id> id{};
  return id;
}
inline std::string thread_name(std::thread::id id) {
  std::ostringstream os;
  os << id;
  return os.str();
}
}  // namespace detail

/// Refuses (config_error) a call from a thread on which `Space` is not initialised, or from
/// another thread than the one the library is used from.
template <ExecutionSpace Space>
void check_library_thread(std::string_view api) {
  const std::thread::id self = std::this_thread::get_id();
  if (!Space::impl_is_initialized())
    fail<config_error>(api, "Kokkos' ", Space::name(), " execution space is not initialized on thread ",
                       detail::thread_name(self),
                       "; call hybridseq from the thread that initialized Kokkos (one thread per process)");
  std::thread::id expected{};
  if (!detail::library_thread().compare_exchange_strong(expected, self) && expected != self)
    fail<config_error>(api, "called from thread ", detail::thread_name(self), " while hybridseq is used from thread ",
                       detail::thread_name(expected),
                       "; the library is not thread-safe: one thread per process (run two trainings as two "
                       "processes)");
}

/// A member that runs check_library_thread when its owner is constructed; declared first, it
/// refuses before the owner's other members allocate anything.
template <ExecutionSpace Space>
struct LibraryThreadCheck {
  explicit LibraryThreadCheck(std::string_view api) { check_library_thread<Space>(api); }
};

}  // namespace hybridseq::core
