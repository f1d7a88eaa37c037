#pragma once
/// \file
/// The MPI backend of parallel::Communicator (parallel/communicator.hpp), for host memory.
/// Only this header includes mpi.h: link the program with MPI (CMake: MPI::MPI_CXX) and start
/// it with `mpirun -np N`.
///
///   int main(int argc, char** argv) {
///     hybridseq::parallel::MpiSession mpi(argc, argv);   // MPI_Init … MPI_Finalize
///     Kokkos::ScopeGuard kokkos(argc, argv);
///     hybridseq::parallel::Mpi world;                    // MPI_COMM_WORLD
///     hybridseq::train::Trainer trainer(model, options, world);
///     ...
///
/// No wait blocks forever: every operation is non-blocking and polled against a deadline
/// (`MpiOptions::timeout_seconds`). A peer that does not answer in time — stuck, or dead in a
/// way the MPI runtime did not notice — makes this rank throw io_error naming the operation,
/// the peer and the timeout, and marks the process failed: `MpiSession` then ends the whole
/// job with MPI_Abort instead of MPI_Finalize (which would wait for the lost peer). A rank
/// that dies outright is noticed by `mpirun` itself, which stops the others and names it.
///
/// Gradients travel in buckets of `MpiOptions::bucket_bytes`, so a large model never needs one
/// message of its full size and the receive buffer is one bucket.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include <Kokkos_Core.hpp>

#include "../core/error.hpp"
#include "communicator.hpp"
#include <mpi.h>

namespace hybridseq::parallel {

namespace detail {
/// Set when an MPI wait timed out: finalising would then wait for the lost peer.
inline bool& mpi_failed() {
  static bool failed = false;
  return failed;
}
}  // namespace detail

/// MPI_Init in the constructor; MPI_Finalize in the destructor, or MPI_Abort when the process
/// leaves by an exception or after an MPI wait timed out (the other ranks may be blocked on
/// this one; aborting ends them with mpirun's report instead of a hang).
class MpiSession {
 public:
  MpiSession(int& argc, char**& argv) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized)
      fail<config_error>("hybridseq::parallel::MpiSession", "MPI is already initialised (one session per process)");
    MPI_Init(&argc, &argv);
    exceptions_ = std::uncaught_exceptions();
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  ~MpiSession() {
    if (detail::mpi_failed() || std::uncaught_exceptions() > exceptions_) {
      std::fflush(stdout);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
  }
  /// Marks the process failed: the destructor aborts the job instead of finalising. For a
  /// program that catches an error from one rank and returns (the others would wait for it).
  static void abort_on_exit() { detail::mpi_failed() = true; }

 private:
  int exceptions_ = 0;
};

struct MpiOptions {
  double timeout_seconds = 300;          // the longest any one operation waits for a peer
  std::size_t bucket_bytes = 16u << 20;  // gradient bytes per message
  // true: sum_tree adds in the fixed pairwise order (bits independent of the world size for
  // powers of two; 2·log2(P) gradient transfers per step). false: MPI_Allreduce (the MPI
  // library's ring or recursive-halving algorithm, ~2 transfers whatever P: what many ranks
  // need — docs/results.md, scaling), reproducible for a given P and MPI library but not
  // across world sizes.
  bool reproducible = true;
};

/// A communicator over an MPI communicator (not owned; MPI_COMM_WORLD by default).
class Mpi {
 public:
  explicit Mpi(MPI_Comm comm = MPI_COMM_WORLD, const MpiOptions& options = {}) : comm_(comm), options_(options) {
    constexpr const char* api = "hybridseq::parallel::Mpi";
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) fail<config_error>(api, "MPI is not initialised (construct a parallel::MpiSession first)");
    if (!(options.timeout_seconds > 0))
      fail<value_error>(api, "timeout_seconds must be > 0, got ", options.timeout_seconds);
    if (options.bucket_bytes < 1024) fail<value_error>(api, "bucket_bytes must be >= 1024, got ", options.bucket_bytes);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::string_view name() const { return "mpi"; }
  const MpiOptions& options() const { return options_; }

  void allgather(std::span<const double> mine, std::span<double> all) {
    if (all.size() != mine.size() * std::size_t(size_))
      fail<value_error>("hybridseq::parallel::Mpi::allgather", "output holds ", all.size(), " values, expected ",
                        mine.size() * std::size_t(size_), " (", size_, " ranks x ", mine.size(), ")");
    MPI_Request request;
    check(MPI_Iallgather(mine.data(), int(mine.size()), MPI_DOUBLE, all.data(), int(mine.size()), MPI_DOUBLE, comm_,
                         &request),
          "allgather");
    wait(request, "allgather", -1);
  }

  /// Every rank's text on rank 0, in rank order (other ranks get an empty list): for tools that
  /// gather results, e.g. hybridseq-ablate's table of variants trained on different ranks.
  std::vector<std::string> gather_text(std::string_view mine) {
    const std::vector<double> length = {double(mine.size())};
    std::vector<double> lengths(std::size_t(size_), 0);
    allgather(length, lengths);
    std::vector<int> counts(static_cast<std::size_t>(size_)), offsets(static_cast<std::size_t>(size_));
    std::size_t total = 0;
    for (int r = 0; r < size_; ++r) {
      if (lengths[r] > double(std::numeric_limits<int>::max()) || total > std::size_t(std::numeric_limits<int>::max()))
        fail<value_error>("hybridseq::parallel::Mpi::gather_text", "rank ", r, "'s text of ", lengths[r],
                          " bytes exceeds what one MPI message carries");
      counts[r] = int(lengths[r]);
      offsets[r] = int(total);
      total += std::size_t(counts[r]);
    }
    std::string all(rank_ == 0 ? total : 0, '\0');
    MPI_Request request;
    check(MPI_Igatherv(mine.data(), int(mine.size()), MPI_CHAR, all.data(), counts.data(), offsets.data(), MPI_CHAR, 0,
                       comm_, &request),
          "gather_text");
    wait(request, "gather_text", -1);
    std::vector<std::string> out;
    if (rank_ == 0)
      for (int r = 0; r < size_; ++r) out.push_back(all.substr(std::size_t(offsets[r]), std::size_t(counts[r])));
    return out;
  }

  /// The fixed-order tree sum of communicator.hpp (or, with `reproducible` off, MPI_Allreduce),
  /// bucket by bucket, result on every rank.
  template <class T, class... P>
  void sum_tree(const Kokkos::View<T*, P...>& buffer) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "hybridseq::parallel::Mpi::sum_tree: float or double gradients");
    if (size_ == 1) return;
    // A device buffer goes through a host copy; for host memory this is the buffer itself.
    auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, buffer);
    const MPI_Datatype type = std::is_same_v<T, float> ? MPI_FLOAT : MPI_DOUBLE;
    const std::size_t n = host.extent(0);
    const std::size_t bucket = std::max<std::size_t>(1, options_.bucket_bytes / sizeof(T));
    incoming_.resize(std::min(n, bucket) * sizeof(T));
    T* theirs = reinterpret_cast<T*>(incoming_.data());
    for (std::size_t begin = 0; begin < n; begin += bucket) {
      const int count = int(std::min(bucket, n - begin));
      T* own = host.data() + begin;
      if (!options_.reproducible) {
        MPI_Request request;
        check(MPI_Iallreduce(MPI_IN_PLACE, own, count, type, MPI_SUM, comm_, &request), "sum_tree all-reduce");
        wait(request, "sum_tree (all-reduce)", -1);
        continue;
      }
      for (int d = 1; d < size_; d *= 2) {
        if (rank_ % (2 * d) == 0) {
          if (rank_ + d >= size_) continue;
          MPI_Request request;
          check(MPI_Irecv(theirs, count, type, rank_ + d, tag_, comm_, &request), "sum_tree receive");
          wait(request, "sum_tree (receiving a partial sum)", rank_ + d);
          for (int i = 0; i < count; ++i) own[i] = own[i] + theirs[i];  // lower ranks on the left, always
        } else {
          MPI_Request request;
          check(MPI_Isend(own, count, type, rank_ - d, tag_, comm_, &request), "sum_tree send");
          wait(request, "sum_tree (sending a partial sum)", rank_ - d);
          break;
        }
      }
      MPI_Request request;
      check(MPI_Ibcast(own, count, type, 0, comm_, &request), "sum_tree broadcast");
      wait(request, "sum_tree (broadcast of the sum)", 0);
    }
    Kokkos::deep_copy(buffer, host);
  }

 private:
  void check(int code, std::string_view what) const {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    detail::mpi_failed() = true;
    fail<io_error>("hybridseq::parallel::Mpi", "rank ", rank_, ": ", what, " failed: ", std::string(text, length));
  }

  /// Polls `request` until it completes or the deadline passes. Spins briefly (collectives of
  /// small messages finish in microseconds), then sleeps between polls so a rank waiting for
  /// a slow peer does not take that peer's core.
  void wait(MPI_Request& request, std::string_view what, int peer) {
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + std::chrono::duration<double>(options_.timeout_seconds);
    for (long polls = 0;; ++polls) {
      int done = 0;
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
      if (done) return;
      if (std::chrono::steady_clock::now() > deadline) {
        detail::mpi_failed() = true;
        fail<io_error>("hybridseq::parallel::Mpi", "rank ", rank_, " of ", size_, ": ", what, " timed out after ",
                       options_.timeout_seconds, " s waiting for ",
                       peer < 0 ? std::string("the other ranks") : "rank " + std::to_string(peer),
                       " (a rank died, hangs or runs different code)");
      }
      if (polls > 10000) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  MPI_Comm comm_;
  MpiOptions options_;
  int rank_ = 0, size_ = 1;
  int tag_ = 7301;  // the trainer's point-to-point messages; collectives are ordered by the communicator
  std::vector<std::byte> incoming_;
};

static_assert(Communicator<Mpi>);

}  // namespace hybridseq::parallel
