#pragma once
/// \file
/// The NCCL backend of parallel::Communicator (parallel/communicator.hpp), for GPU ranks. Only
/// this header includes nccl.h and cuda_runtime.h: link the program with NCCL and the CUDA
/// runtime (CMake: CUDA::cudart and libnccl). One rank per GPU; the ranks find each other
/// through an ncclUniqueId that one rank creates and sends to the others (with MPI_Bcast, say):
///
///   ncclUniqueId id;
///   if (rank == 0) id = hybridseq::parallel::Nccl::unique_id();
///   MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
///   cudaSetDevice(local_rank);
///   hybridseq::parallel::Nccl nccl(rank, size, id);
///   hybridseq::train::Trainer trainer(model, options, nccl);
///
/// `Nccl::single()` is the one-rank communicator (no id to share).
///
/// The fixed-order tree sum needs no kernel of its own: level d of the tree is a set of
/// two-rank communicators (split once, at construction), and a two-operand ncclReduce is one
/// addition per element — commutative, so exactly `own + theirs` as the MPI backend and the
/// trainer add. Every rank therefore gets the same bits as on MPI or on one process. Buffers in
/// CUDA memory are used in place; host buffers are staged through a device buffer of
/// `NcclOptions::bucket_bytes`.
///
/// The communicator is non-blocking (ncclConfig_t::blocking = 0) and every wait is polled
/// against `NcclOptions::timeout_seconds`: a peer that does not answer makes this rank abort
/// the communicator (ncclCommAbort) and throw io_error naming the operation and the timeout.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include <Kokkos_Core.hpp>

#include "../core/error.hpp"
#include "communicator.hpp"
#include <cuda_runtime.h>
#include <nccl.h>

namespace hybridseq::parallel {

struct NcclOptions {
  double timeout_seconds = 300;          // the longest any one operation waits for a peer
  std::size_t bucket_bytes = 64u << 20;  // staging buffer for host gradients
};

/// A communicator over NCCL on the current CUDA device. Copies share one NCCL communicator.
class Nccl {
 public:
  /// A fresh clique id, made by one rank and handed to all (ncclGetUniqueId).
  static ncclUniqueId unique_id() {
    ncclUniqueId id;
    check_call(ncclGetUniqueId(&id), "ncclGetUniqueId", -1);
    return id;
  }

  /// Rank `rank` of `size` of the clique `id`, on the current CUDA device.
  Nccl(int rank, int size, const ncclUniqueId& id, const NcclOptions& options = {})
      : state_(std::make_shared<State>()) {
    constexpr const char* api = "hybridseq::parallel::Nccl";
    if (size < 1 || rank < 0 || rank >= size)
      fail<value_error>(api, "rank ", rank, " of ", size, ": expected 0 <= rank < size");
    if (!(options.timeout_seconds > 0))
      fail<value_error>(api, "timeout_seconds must be > 0, got ", options.timeout_seconds);
    if (options.bucket_bytes < 1024) fail<value_error>(api, "bucket_bytes must be >= 1024, got ", options.bucket_bytes);
    auto& s = *state_;
    s.rank = rank;
    s.size = size;
    s.options = options;
    check_cuda(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaEventCreateWithFlags(&s.written, cudaEventDisableTiming), "cudaEventCreate");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every call returns at once; wait() polls with a deadline
    const ncclResult_t init = ncclCommInitRankConfig(&s.world, size, id, rank, &config);
    s.wait(init, s.world, "ncclCommInitRank", -1);
    // Level d of the tree: rank r (r mod d = 0) pairs with r ± d; the lower one is rank 0 of
    // the pair (key = r), the root of the pair's reduction.
    for (int d = 1; d < size; d *= 2) {
      const bool holds = rank % d == 0;
      const int low = rank - rank % (2 * d);
      const bool paired = holds && low + d < size;
      ncclComm_t pair = nullptr;
      const ncclResult_t split =
          ncclCommSplit(s.world, paired ? low / (2 * d) : NCCL_SPLIT_NOCOLOR, rank, &pair, &config);
      s.wait(split, s.world, "ncclCommSplit", -1);
      s.levels.push_back(pair);
    }
    check_cuda(cudaMalloc(&s.staging, options.bucket_bytes), "cudaMalloc (staging buffer)");
  }

  /// The one-rank communicator.
  static Nccl single(const NcclOptions& options = {}) { return Nccl(0, 1, unique_id(), options); }

  int rank() const { return state_->rank; }
  int size() const { return state_->size; }
  std::string_view name() const { return "nccl"; }

  void allgather(std::span<const double> mine, std::span<double> all) {
    auto& s = *state_;
    const std::size_t bytes = mine.size_bytes(), total = bytes * std::size_t(s.size);
    if (all.size() != mine.size() * std::size_t(s.size))
      fail<value_error>("hybridseq::parallel::Nccl::allgather", "output holds ", all.size(), " values, expected ",
                        mine.size() * std::size_t(s.size), " (", s.size, " ranks x ", mine.size(), ")");
    if (total > s.options.bucket_bytes)
      fail<value_error>("hybridseq::parallel::Nccl::allgather", total, " bytes exceed the staging buffer of ",
                        s.options.bucket_bytes, " (NcclOptions::bucket_bytes)");
    auto* device = static_cast<double*>(s.staging);
    check_cuda(cudaMemcpyAsync(device + mine.size() * std::size_t(s.rank), mine.data(), bytes, cudaMemcpyHostToDevice,
                               s.stream),
               "cudaMemcpy (allgather)");
    s.wait(
        ncclAllGather(device + mine.size() * std::size_t(s.rank), device, mine.size(), ncclFloat64, s.world, s.stream),
        s.world, "allgather", -1);
    check_cuda(cudaMemcpyAsync(all.data(), device, total, cudaMemcpyDeviceToHost, s.stream), "cudaMemcpy (allgather)");
    s.sync("allgather");
  }

  /// Queues the fixed-order tree sum of communicator.hpp of `buffer` on the communicator's
  /// stream, result on every rank once sum_tree_finish returns. The GPU runs it beside the
  /// kernels queued after this call (backward's next modules).
  template <class T, class... P>
  void sum_tree_start(const Kokkos::View<T*, P...>& buffer) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "hybridseq::parallel::Nccl::sum_tree_start: float or double gradients");
    using Memory = typename Kokkos::View<T*, P...>::memory_space;
    constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, Memory>::accessible;
    auto& s = *state_;
    if constexpr (host) {
      Kokkos::fence();  // the host's writes are done before the stream copies the buffer
    } else {
      // Kokkos' kernels (and cuBLAS, on the same stream) wrote the buffer: the communicator's
      // stream waits for them on the GPU, and the host goes on queueing backward's kernels.
      check_cuda(cudaEventRecord(s.written, Kokkos::Cuda().cuda_stream()), "cudaEventRecord (sum_tree)");
      check_cuda(cudaStreamWaitEvent(s.stream, s.written, 0), "cudaStreamWaitEvent (sum_tree)");
    }
    const std::size_t n = buffer.extent(0);
    const std::size_t bucket = host ? s.options.bucket_bytes / sizeof(T) : n;
    for (std::size_t begin = 0; begin < n; begin += bucket) {
      const std::size_t count = std::min(bucket, n - begin);
      // Host buffers share one staging buffer: the stream runs its copies and reductions in order.
      T* data = host ? static_cast<T*>(s.staging) : buffer.data() + begin;
      if constexpr (host)
        check_cuda(cudaMemcpyAsync(data, buffer.data() + begin, count * sizeof(T), cudaMemcpyHostToDevice, s.stream),
                   "cudaMemcpy (sum_tree)");
      reduce_bucket(data, count);
      if constexpr (host)
        check_cuda(cudaMemcpyAsync(buffer.data() + begin, data, count * sizeof(T), cudaMemcpyDeviceToHost, s.stream),
                   "cudaMemcpy (sum_tree)");
    }
  }
  /// Nothing to do: the GPU moves the queued sums on by itself.
  void sum_tree_progress() {}
  /// Waits for every queued sum (within the deadline).
  void sum_tree_finish() { state_->sync("sum_tree"); }

 private:
  struct State {
    int rank = 0, size = 1;
    NcclOptions options;
    ncclComm_t world = nullptr;
    std::vector<ncclComm_t> levels;  // per tree level: this rank's pair, or null
    cudaStream_t stream = nullptr;
    cudaEvent_t written = nullptr;  // recorded on Kokkos' stream when a buffer to sum is written
    void* staging = nullptr;
    bool failed = false;

    State() = default;
    State(const State&) = delete;
    State& operator=(const State&) = delete;
    ~State() {
      // A failed communicator may have operations that never finish: abort, never finalise.
      for (ncclComm_t c : levels)
        if (c) failed ? ncclCommAbort(c) : ncclCommDestroy(c);
      if (world) failed ? ncclCommAbort(world) : ncclCommDestroy(world);
      if (staging) cudaFree(staging);
      if (written) cudaEventDestroy(written);
      if (stream) cudaStreamDestroy(stream);
    }

    /// Completes a non-blocking NCCL call on `comm`, within the deadline.
    void wait(ncclResult_t result, ncclComm_t comm, std::string_view what, int peer) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options.timeout_seconds);
      while (result == ncclInProgress) {
        if (std::chrono::steady_clock::now() > deadline) timeout(what, peer);
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        if (comm) ncclCommGetAsyncError(comm, &result);
      }
      if (result != ncclSuccess) {
        failed = true;
        check_call(result, what, rank);
      }
    }
    /// Waits for the stream (the operations queued on it), within the deadline.
    void sync(std::string_view what) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options.timeout_seconds);
      for (;;) {
        const cudaError_t e = cudaStreamQuery(stream);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) {
          failed = true;
          check_cuda(e, what);
        }
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(world, &async);
        if (async != ncclSuccess && async != ncclInProgress) {
          failed = true;
          check_call(async, what, rank);
        }
        if (std::chrono::steady_clock::now() > deadline) timeout(what, -1);
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    [[noreturn]] void timeout(std::string_view what, int peer) {
      failed = true;
      fail<io_error>("hybridseq::parallel::Nccl", "rank ", rank, " of ", size, ": ", what, " timed out after ",
                     options.timeout_seconds, " s waiting for ",
                     peer < 0 ? std::string("the other ranks") : "rank " + std::to_string(peer),
                     " (a rank died, hangs or runs different code)");
    }
  };

  template <class T>
  void reduce_bucket(T* data, std::size_t count) {
    auto& s = *state_;
    const ncclDataType_t type = std::is_same_v<T, float> ? ncclFloat32 : ncclFloat64;
    for (std::size_t level = 0, d = 1; level < s.levels.size(); ++level, d *= 2) {
      if (s.rank % int(d) != 0) break;  // this rank's partial went to its pair's root earlier
      if (!s.levels[level]) continue;   // no partner at this level
      const bool upper = s.rank % int(2 * d) != 0;
      s.wait(ncclReduce(data, data, count, type, ncclSum, 0, s.levels[level], s.stream), s.levels[level],
             "sum_tree (pair reduction)", upper ? s.rank - int(d) : s.rank + int(d));
    }
    s.wait(ncclBroadcast(data, data, count, type, 0, s.world, s.stream), s.world, "sum_tree (broadcast of the sum)", 0);
  }

  static void check_call(ncclResult_t result, std::string_view what, int rank) {
    if (result == ncclSuccess) return;
    fail<io_error>("hybridseq::parallel::Nccl", "rank ", rank, ": ", what, " failed: ", ncclGetErrorString(result));
  }
  static void check_cuda(cudaError_t e, std::string_view what) {
    if (e != cudaSuccess) fail<io_error>("hybridseq::parallel::Nccl", what, " failed: ", cudaGetErrorString(e));
  }

  std::shared_ptr<State> state_;
};

static_assert(Communicator<Nccl>);

}  // namespace hybridseq::parallel
