#pragma once
/// \file
/// ParallelBlock: N branches read the same input, a mixer combines their outputs (PHA's
/// GSS ‖ attention ‖ FFN, Hymba's parallel heads, Falcon-H1's parallel attention + SSM).
///
///   h_b = Branch_b(x);   y = Mixer(h_1, …, h_N)
///
/// Branches are held in a flat tuple (constant instantiation depth). Backward runs the mixer
/// backward, then each branch's backward accumulating into the same dx.

#include <array>
#include <string>
#include <type_traits>
#include <utility>

#include "../core/check.hpp"
#include "../core/concepts.hpp"
#include "../core/decoding.hpp"
#include "../core/dropout.hpp"
#include "../core/flat_tuple.hpp"
#include "../core/gradient_listener.hpp"
#include "../core/options.hpp"
#include "../core/workspace.hpp"
#include "named.hpp"

namespace hybridseq::compose {

namespace detail {
template <class First, class... Rest>
struct first_of {
  using type = First;
};
}  // namespace detail

template <class Mixer, class... Branches>
class ParallelBlock {
  static_assert(sizeof...(Branches) >= 1, "hybridseq::compose::ParallelBlock: needs at least one branch");
  using First = typename detail::first_of<Branches...>::type;
  static_assert((core::Branch<Branches> && ...),
                "hybridseq::compose::ParallelBlock: every branch must model hybridseq::core::Branch "
                "(scalar_type, execution_space, d_in/d_out, Saved, forward)");
  static_assert((std::is_same_v<typename Branches::scalar_type, typename First::scalar_type> && ...),
                "hybridseq::compose::ParallelBlock: all branches must use the same scalar type");
  static_assert((std::is_same_v<typename Branches::execution_space, typename First::execution_space> && ...),
                "hybridseq::compose::ParallelBlock: all branches must use the same execution space");
  static_assert(((Branches::d_in == First::d_in && Branches::d_out == First::d_out) && ...),
                "hybridseq::compose::ParallelBlock: all branches must map the same width to the same width");
  static_assert(core::Mixer<Mixer>, "hybridseq::compose::ParallelBlock: the mixer must model hybridseq::core::Mixer");
  static_assert(Mixer::arity == int(sizeof...(Branches)),
                "hybridseq::compose::ParallelBlock: the mixer's arity does not match the number of branches");
  static_assert(std::is_same_v<typename Mixer::scalar_type, typename First::scalar_type>,
                "hybridseq::compose::ParallelBlock: the mixer's scalar type differs from the branches'");

  static constexpr int N = int(sizeof...(Branches));

 public:
  using scalar_type = typename First::scalar_type;
  using execution_space = typename First::execution_space;
  using T = scalar_type;
  using Space = execution_space;
  static constexpr int d_in = First::d_in;
  static constexpr int d_out = First::d_out;
  static constexpr int arity = N;

  /// One Options per branch (in order), the mixer's, and the dropout of every branch output
  /// in training passes (not of a skip path: an Identity branch is never dropped).
  struct Options {
    core::FlatTuple<core::options_t<Branches>...> branches{};
    core::options_t<Mixer> mixer{};
    core::OutputDropout dropout{};

    template <std::size_t I>
    auto& branch() {
      return core::get<I>(branches);
    }
    template <std::size_t I>
    const auto& branch() const {
      return core::get<I>(branches);
    }
    template <class F>
    void for_each_child(F&& f) {
      core::for_each(branches, f);
      f(mixer);
      f(dropout);
    }
  };
  struct Saved {
    core::FlatTuple<typename Branches::Saved...> branch;
    std::array<Tensor<T***, Space>, N> h;  // branch outputs (B, T, D), after dropout
    std::array<core::DropoutMask, N> dropout{};
    typename Mixer::Saved mix;
  };

  explicit ParallelBlock(const Options& o = {})
      : branches_(core::generate_flat_tuple<Branches...>([&](auto i) {
          return core::construct<core::element_t<i, core::FlatTuple<Branches...>>>(core::get<i>(o.branches));
        })),
        mixer_(core::construct<Mixer>(o.mixer)),
        dropout_(o.dropout.p) {
    core::check_dropout("hybridseq::compose::ParallelBlock", "Options::dropout.p", o.dropout.p);
  }

  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& s) const {
    core::check_shape("hybridseq::compose::ParallelBlock::forward", "x", x, core::B, core::T, core::dim(d_in));
    core::for_each_indexed(branches_, [&](const auto& branch, auto i) {
      s.h[i] = ws.template allocate<T***>("parallel_block.h", x.extent(0), x.extent(1), d_out);
      branch.forward(ws, x, s.h[i], core::get<i>(s.branch));
      if constexpr (!is_skip_path<std::remove_cvref_t<decltype(branch)>>) {
        s.dropout[i] = ws.dropout().next(dropout_);
        core::apply_dropout(Space{}, s.dropout[i], core::flat(s.h[i]));
      }
    });
    mixer_.forward(s.h, y, s.mix);
  }

  void backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    core::WorkspaceScope scope(ws);
    std::array<Tensor<T***, Space>, N> dh;
    for (auto& d : dh) d = ws.template allocate<T***>("parallel_block.dh", dy.extent(0), dy.extent(1), d_out);
    mixer_.backward(s.mix, dy, dh);  // writes every dh[i]
    core::gradients_final(ws, mixer_);
    core::for_each_indexed(branches_, [&](auto& branch, auto i) {
      core::apply_dropout(Space{}, s.dropout[i], core::flat(dh[i]));
      branch.backward(ws, core::get<i>(s.branch), dh[i], dx);
      core::gradients_final(ws, branch);
    });
  }

  /// Arena use (core::Footprint): forward holds each branch's output under its saves;
  /// backward holds all N output gradients while the branches' backwards run in turn.
  core::Footprint workspace(const core::WorkspaceQuery& q) const {
    const std::size_t h = core::padded_bytes<T>(q.batch * q.time * d_out);
    core::ArenaSteps fwd;
    std::size_t branch_backward = 0;
    core::for_each(branches_, [&](const auto& branch) {
      const core::Footprint f = branch.workspace(q);
      fwd.hold(h).forward(f);
      branch_backward = std::max(branch_backward, f.backward);
    });
    return {fwd.level(), fwd.peak(), N * h + branch_backward};
  }

  // ---- decoding: available when every branch decodes; one state per branch ----
  static constexpr bool decodable = (core::DecodableBranch<Branches> && ...);
  using State = core::states_t<Branches...>;

  State make_state(int batch) const requires decodable { return core::make_states(branches_, batch); }

  /// Continues every branch from its state on x (B, T, D) and mixes: y (B, T, D).
  void prefill(core::Workspace<Space>& ws, State& st, Tensor<const T***, Space> x,
               Tensor<T***, Space> y) const requires decodable {
    core::WorkspaceScope scope(ws);
    std::array<Tensor<T***, Space>, N> h;
    core::for_each_indexed(branches_, [&](const auto& branch, auto i) {
      h[i] = ws.template allocate<T***>("parallel_block.h", x.extent(0), x.extent(1), d_out);
      core::prefill(branch, ws, core::get<i>(st), x, h[i]);
    });
    typename Mixer::Saved unused;
    mixer_.forward(h, y, unused);
  }
  void check_fits(const State& st, std::int64_t batch, std::int64_t time) const requires decodable {
    core::check_states_fit(branches_, st, batch, time);
  }
  State snapshot(const State& st) const requires decodable { return core::snapshot_states(branches_, st); }
  void restore(State& st, const State& snap) const requires decodable { core::restore_states(branches_, st, snap); }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    core::for_each_indexed(
        branches_, [&](auto& branch, auto i) { visit(child_name<std::remove_cvref_t<decltype(branch)>>(i), branch); });
    visit("mixer", mixer_);
  }

  /// The mixer's current weights (after training: which branch each layer relies on).
  auto mixing_weights() const { return mixer_.weights(); }

  template <std::size_t I>
  auto& branch() {
    return core::get<I>(branches_);
  }
  template <std::size_t I>
  const auto& branch() const {
    return core::get<I>(branches_);
  }

 private:
  template <class B>
  static constexpr bool is_skip_path = requires {
    requires B::skip_path;
  };

  core::FlatTuple<Branches...> branches_;
  Mixer mixer_;
  double dropout_;
};

}  // namespace hybridseq::compose
