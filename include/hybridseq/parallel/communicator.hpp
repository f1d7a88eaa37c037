#pragma once
/// \file
/// The communication interface of data-parallel training, and its single-process backend.
///
/// A communicator connects the `size()` ranks of one training job; the trainer
/// (train/trainer.hpp) needs three operations from it:
///
///   allgather(mine, all)   every rank's `mine` (doubles, the same count on every rank) into
///                          `all`, rank r's at [r·n, (r+1)·n): losses, token counts, stop
///                          requests, model fingerprints;
///   sum_tree_start(buffer) begins the element-wise sum of every rank's `buffer` (a flat
///                          gradient or a piece of one, Tensor<T*, Space>), in place on every
///                          rank, added in one fixed pairwise order over ranks: for d = 1, 2,
///                          4, …, rank r with r mod 2d = 0 adds rank r + d's partial to its own
///                          (own + theirs), then rank 0's total goes to all. For a power-of-two
///                          world this is the balanced binary tree over ranks, which is what
///                          lets a run on P ranks reproduce one on 1 rank bit for bit (see the
///                          trainer). Every rank starts the same pieces in the same order; a
///                          piece must not be touched until sum_tree_finish returns;
///   sum_tree_progress()    moves the started sums on without waiting (the trainer calls it
///                          between the modules of backward, so transfers overlap compute);
///   sum_tree_finish()      waits until every started sum is complete;
///   rank(), size(), name() who this is, how many there are, and the backend (for messages).
///
/// Backends: `SingleProcess` (here; the trainer's default, no dependency, nothing to set up),
/// `parallel::Mpi` (parallel/mpi.hpp: needs mpi.h, host memory) and `parallel::Nccl`
/// (parallel/nccl.hpp: needs nccl.h, Kokkos::Cuda memory). Only code that includes those
/// headers needs MPI or NCCL; the rest of the library never does.
///
/// A backend must never hang without a message: every wait has a deadline, and a rank that
/// misses it makes the waiting rank throw an error naming the operation, the peer and the
/// timeout (MPI and NCCL backends).

#include <algorithm>
#include <concepts>
#include <span>
#include <string_view>

#include "../core/error.hpp"

namespace hybridseq::parallel {

template <class C>
concept Communicator = requires(C& c, const C& cc, std::span<const double> mine, std::span<double> all) {
  { cc.rank() } -> std::convertible_to<int>;
  { cc.size() } -> std::convertible_to<int>;
  { cc.name() } -> std::convertible_to<std::string_view>;
  c.allgather(mine, all);
  c.sum_tree_progress();
  c.sum_tree_finish();
  // and `template <class T, class Space> void sum_tree_start(Tensor<T*, Space>)` (not expressible here)
};

/// One process, no communication: the sum over one rank is the rank's own buffer.
struct SingleProcess {
  int rank() const { return 0; }
  int size() const { return 1; }
  std::string_view name() const { return "single-process"; }
  void allgather(std::span<const double> mine, std::span<double> all) const {
    if (all.size() != mine.size())
      fail<value_error>("hybridseq::parallel::SingleProcess::allgather", "output holds ", all.size(),
                        " values, expected ", mine.size(), " (1 rank x ", mine.size(), ")");
    std::copy(mine.begin(), mine.end(), all.begin());
  }
  template <class View>
  void sum_tree_start(const View&) const {}
  void sum_tree_progress() const {}
  void sum_tree_finish() const {}
};

static_assert(Communicator<SingleProcess>);

}  // namespace hybridseq::parallel
