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
/// message of its full size. Every operation of a sum is non-blocking: sum_tree_start posts
/// what it can, sum_tree_progress (called by the trainer between the modules of backward)
/// moves each bucket on as its peers answer, so the transfers run while backward computes.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
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

  /// Begins the fixed-order tree sum of communicator.hpp (or, with `reproducible` off,
  /// MPI_Allreduce) of `buffer`, in messages of at most `bucket_bytes`; sum_tree_progress
  /// moves it on, sum_tree_finish completes it.
  template <class T, class... P>
  void sum_tree_start(const Kokkos::View<T*, P...>& buffer) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "hybridseq::parallel::Mpi::sum_tree_start: float or double gradients");
    if (size_ == 1) return;
    // A device buffer goes through a host copy; for host memory this is the buffer itself.
    auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, buffer);
    if (host.data() != buffer.data()) copy_back_.push_back([buffer, host] { Kokkos::deep_copy(buffer, host); });
    const std::size_t n = host.extent(0);
    const std::size_t bucket = std::max<std::size_t>(1, options_.bucket_bytes / sizeof(T));
    for (std::size_t begin = 0; begin < n; begin += bucket) {
      Bucket b;
      b.own = host.data() + begin;
      b.count = int(std::min(bucket, n - begin));
      b.type = std::is_same_v<T, float> ? MPI_FLOAT : MPI_DOUBLE;
      b.bytes = std::size_t(b.count) * sizeof(T);
      b.add = [](void* own, const void* theirs, int count) {
        T* o = static_cast<T*>(own);
        const T* t = static_cast<const T*>(theirs);
        for (int i = 0; i < count; ++i) o[i] = o[i] + t[i];  // lower ranks on the left, always
      };
      if (!options_.reproducible) {
        // A collective: posted here, in start order, which is the same on every rank.
        check(MPI_Iallreduce(MPI_IN_PLACE, b.own, b.count, b.type, MPI_SUM, comm_, &b.request), "sum_tree all-reduce");
        b.phase = Phase::all_reducing;
      }
      buckets_.push_back(b);
    }
    sum_tree_progress();
  }

  /// Moves every started bucket as far as it goes without waiting.
  void sum_tree_progress() {
    for (std::size_t i = 0; i < buckets_.size(); ++i) advance(i);
    // Broadcasts are collectives: posted in start order, as every rank posts them.
    while (next_broadcast_ < buckets_.size() && buckets_[next_broadcast_].phase == Phase::reduced) {
      Bucket& b = buckets_[next_broadcast_++];
      check(MPI_Ibcast(b.own, b.count, b.type, 0, comm_, &b.request), "sum_tree broadcast");
      b.phase = Phase::broadcasting;
      advance(next_broadcast_ - 1);
    }
  }

  /// Waits until every started bucket is summed on every rank. No wait is endless: a peer that
  /// lets `timeout_seconds` pass without any bucket moving is named in an io_error.
  void sum_tree_finish() {
    poll_until(
        [&] {
          sum_tree_progress();
          return std::all_of(buckets_.begin(), buckets_.end(), [](const Bucket& b) { return b.phase == Phase::done; });
        },
        [&] { sum_timed_out(); });
    for (const auto& copy : copy_back_) copy();
    copy_back_.clear();
    buckets_.clear();
    next_broadcast_ = 0;
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

  /// Polls `request` until it completes, within the deadline.
  void wait(MPI_Request& request, std::string_view what, int peer) {
    poll_until(
        [&] {
          int done = 0;
          check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
          return done != 0;
        },
        [&] { timed_out(what, peer < 0 ? std::string("the other ranks") : "rank " + std::to_string(peer)); });
  }

  /// Calls `poll()` until it returns true. Spins briefly (collectives of small messages finish
  /// in microseconds), then sleeps between polls so a rank waiting for a slow peer does not
  /// take that peer's core. Calls `on_timeout()` (which throws) once `timeout_seconds` pass
  /// without an MPI operation completing (completed_steps_, counted by advance()).
  template <class Poll, class OnTimeout>
  void poll_until(Poll poll, OnTimeout on_timeout) {
    auto last_move = std::chrono::steady_clock::now();
    std::size_t moves = completed_steps_;
    for (long polls = 0;; ++polls) {
      if (poll()) return;
      const auto now = std::chrono::steady_clock::now();
      if (completed_steps_ != moves) {
        moves = completed_steps_;
        last_move = now;
        polls = 0;
      } else if (now - last_move > std::chrono::duration<double>(options_.timeout_seconds)) {
        on_timeout();
      }
      if (polls > 10000) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  [[noreturn]] void timed_out(std::string_view what, const std::string& peer) {
    detail::mpi_failed() = true;
    fail<io_error>("hybridseq::parallel::Mpi", "rank ", rank_, " of ", size_, ": ", what, " timed out after ",
                   options_.timeout_seconds, " s waiting for ", peer, " (a rank died, hangs or runs different code)");
  }

  /// One message's worth of a started sum. Reproducible: the tree's levels d = 1, 2, 4, … in
  /// turn (receive a partial and add it, or send ours and stop), then the broadcast from rank
  /// 0; otherwise one all-reduce.
  enum class Phase { reducing, receiving, sending, reduced, broadcasting, all_reducing, done };
  struct Bucket {
    void* own = nullptr;
    int count = 0;
    MPI_Datatype type = MPI_FLOAT;
    std::size_t bytes = 0;
    void (*add)(void* own, const void* theirs, int count) = nullptr;
    Phase phase = Phase::reducing;
    int d = 1;  // the tree level this rank is at
    MPI_Request request = MPI_REQUEST_NULL;
  };

  /// Moves bucket i on until it waits for a peer (or is done).
  void advance(std::size_t i) {
    Bucket& b = buckets_[i];
    for (;;) {
      if (b.request != MPI_REQUEST_NULL) {
        int done = 0;
        check(MPI_Test(&b.request, &done, MPI_STATUS_IGNORE), "sum_tree");
        if (!done) return;
        ++completed_steps_;
        if (b.phase == Phase::receiving) {
          b.add(b.own, incoming_[i].data(), b.count);
          b.d *= 2;
          b.phase = Phase::reducing;
        } else if (b.phase == Phase::sending) {
          b.phase = Phase::reduced;  // this rank's part of the tree is over: on to the broadcast
        } else {
          b.phase = Phase::done;  // broadcast or all-reduce
        }
      }
      if (b.phase != Phase::reducing) return;
      if (b.d >= size_) {
        b.phase = Phase::reduced;
        return;
      }
      // Each bucket its own tag: buckets reach a level in any order, and a partial must meet
      // the receive of its own bucket.
      const int tag = tag_ + int(i % 16384);
      if (rank_ % (2 * b.d) == 0) {
        if (rank_ + b.d >= size_) {
          b.d *= 2;
          continue;
        }
        if (incoming_.size() <= i) incoming_.resize(i + 1);
        incoming_[i].resize(b.bytes);
        check(MPI_Irecv(incoming_[i].data(), b.count, b.type, rank_ + b.d, tag, comm_, &b.request), "sum_tree receive");
        b.phase = Phase::receiving;
      } else {
        check(MPI_Isend(b.own, b.count, b.type, rank_ - b.d, tag, comm_, &b.request), "sum_tree send");
        b.phase = Phase::sending;
      }
    }
  }

  /// The error of sum_tree_finish's deadline, naming what the first unfinished bucket waits for.
  [[noreturn]] void sum_timed_out() {
    std::string what = "sum_tree", peer = "the other ranks";
    for (const Bucket& b : buckets_) {
      if (b.phase == Phase::done) continue;
      if (b.phase == Phase::receiving) {
        what = "sum_tree (receiving a partial sum)";
        peer = "rank " + std::to_string(rank_ + b.d);
      } else if (b.phase == Phase::sending) {
        what = "sum_tree (sending a partial sum)";
        peer = "rank " + std::to_string(rank_ - b.d);
      } else if (b.phase == Phase::broadcasting) {
        what = "sum_tree (broadcast of the sum)";
        peer = "rank 0";
      } else if (b.phase == Phase::all_reducing) {
        what = "sum_tree (all-reduce)";
      }
      break;
    }
    timed_out(what, peer);
  }

  MPI_Comm comm_;
  MpiOptions options_;
  int rank_ = 0, size_ = 1;
  int tag_ = 7301;  // the first of the trainer's point-to-point tags; collectives are ordered by the communicator
  std::vector<Bucket> buckets_;                   // the started, unfinished sum's messages, in start order
  std::vector<std::vector<std::byte>> incoming_;  // bucket i's receive buffer (kept between steps)
  std::vector<std::function<void()>> copy_back_;  // host copies of device buffers, back after the sum
  std::size_t next_broadcast_ = 0;                // buckets before it have posted their broadcast
  std::size_t completed_steps_ = 0;               // MPI operations completed: sum_tree_finish's sign of life
};

static_assert(Communicator<Mpi>);

}  // namespace hybridseq::parallel
