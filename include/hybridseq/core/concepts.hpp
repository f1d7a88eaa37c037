#pragma once
/// \file
/// The layer contracts, as concepts, and boundary checks that say in English which
/// requirement a type misses.
///
/// A *branch* maps a (B, T, d_in) sequence to (B, T, d_out). Forward fills an explicit
/// `Saved` struct with what backward needs; backward reads it and **accumulates** (+=) into
/// dx and the parameter gradients; the caller zeroes them. Decodable branches also carry a
/// per-sequence `State` and advance it one token at a time with `step`.
///
/// Concepts answer "is it?"; the `require_*` helpers, called at composition boundaries,
/// answer "why not?" with one static_assert per requirement, prefixed with the API name.

#include <concepts>
#include <type_traits>

#include "parameter.hpp"
#include "spaces.hpp"
#include "workspace.hpp"

namespace hybridseq::core {

namespace detail {
template <class L>
using In = Tensor<const typename L::scalar_type***, typename L::execution_space>;
template <class L>
using Out = Tensor<typename L::scalar_type***, typename L::execution_space>;
template <class L>
using Ws = Workspace<typename L::execution_space>;
}  // namespace detail

/// Declares its scalar type and execution space.
template <class L>
concept Module = requires {
  typename L::scalar_type;
  typename L::execution_space;
}
&&Scalar<typename L::scalar_type>&& ExecutionSpace<typename L::execution_space>;

template <class L>
concept HasWidths = requires {
  { L::d_in } -> std::convertible_to<int>;
  { L::d_out } -> std::convertible_to<int>;
};

template <class L>
concept HasForward = requires(const L& l, detail::Ws<L>& ws, detail::In<L> x, detail::Out<L> y,
                              typename L::Saved& saved) {
  l.forward(ws, x, y, saved);
};

template <class L>
concept HasBackward = requires(L& l, detail::Ws<L>& ws, const typename L::Saved& saved, detail::In<L> dy,
                               detail::Out<L> dx) {
  l.backward(ws, saved, dy, dx);
};

/// Carries a per-sequence decoding state: `make_state(batch)`, `prefill` (any T, continuing
/// from the state; T = 1 is one decoding step), `snapshot` and `restore`.
template <class L>
concept Stateful = requires(const L& l, detail::Ws<L>& ws, typename L::State& state, const typename L::State& snap,
                            detail::In<L> x, detail::Out<L> y) {
  typename L::State;
  { l.make_state(1) } -> std::same_as<typename L::State>;
  l.prefill(ws, state, x, y);
  { l.snapshot(snap) } -> std::same_as<typename L::State>;
  l.restore(state, snap);
};

/// A one-token path beside prefill, where a layer really has a faster one (Mamba's and GSS's
/// recurrent update); core::prefill takes it for T = 1.
template <class L>
concept HasStepPath = Stateful<L> &&
    requires(const L& l, detail::Ws<L>& ws, typename L::State& state, detail::In<L> x, detail::Out<L> y) {
  l.step(ws, state, x, y);
};

/// Position-wise layers (norms, linear maps, FFNs) carry no state across time: decoding
/// them is their forward on the new tokens. They say so with `position_wise = true`.
template <class L>
concept PositionWise = requires {
  requires L::position_wise;
};

/// What a position-wise layer of width D declares (a base of the norms, Identity and the
/// activation layer): scalar type, space, d_in = d_out = D, and position_wise.
template <int D, Scalar T, ExecutionSpace Space>
struct PositionWiseLayer {
  static_assert(D > 0, "hybridseq::layers: a position-wise layer's width must be positive");
  using scalar_type = T;
  using execution_space = Space;
  static constexpr int d_in = D;
  static constexpr int d_out = D;
  static constexpr bool position_wise = true;  // decodes by forward: no state across time
};

/// A sequence layer (B, T, d_in) → (B, T, d_out) with a forward pass.
template <class L>
concept Branch = Module<L> && HasWidths<L> && requires {
  typename L::Saved;
} && HasForward<L>;

/// A branch that can be trained: backward and visitable parameters.
template <class L>
concept TrainableBranch = Branch<L> && HasBackward<L> && HasParameters<L>;

/// A branch that can decode token by token: it carries a per-sequence `State` (Stateful), or
/// it is position-wise and needs none.
template <class L>
concept DecodableBranch = Branch<L> &&(Stateful<L> || PositionWise<L>);

/// Combines `arity` branch outputs of width `d` into one (B, T, d) tensor, with backward, which
/// writes (not adds to) every branch's output gradient: ParallelBlock does not clear them.
template <class M>
concept Mixer = Module<M> && requires {
  { M::arity } -> std::convertible_to<int>;
  typename M::Saved;
};

/// Boundary check for anything that will be trained (trainer, block composition).
template <class L>
consteval bool require_trainable_branch() {
  static_assert(Module<L>,
                "hybridseq: a branch must declare `scalar_type` (float or double) and "
                "`execution_space` (a Kokkos execution space)");
  static_assert(HasWidths<L>, "hybridseq: a branch must declare `static constexpr int d_in, d_out`");
  static_assert(
      requires { typename L::Saved; },
      "hybridseq: a branch must declare a `Saved` struct that forward fills for backward");
  static_assert(HasForward<L>,
                "hybridseq: a branch must have `forward(Workspace&, x (B,T,d_in), y (B,T,d_out), "
                "Saved&) const`");
  static_assert(HasBackward<L>,
                "hybridseq: this branch has no backward(Workspace&, const Saved&, dy, dx), so it "
                "cannot be trained");
  static_assert(HasParameters<L>, "hybridseq: a trainable branch must list its parameters in visit_parameters()");
  return true;
}

/// Boundary check for anything that will be decoded (decode sessions).
template <class L>
consteval bool require_decodable_branch() {
  static_assert(Branch<L>,
                "hybridseq: decoding needs a Branch (scalar_type, execution_space, "
                "d_in/d_out, Saved, forward)");
  static_assert(Stateful<L> || PositionWise<L>,
                "hybridseq: this branch has no make_state(batch), prefill(Workspace&, State&, x, y), "
                "snapshot and restore, and is not position-wise, so it cannot be decoded token by token");
  return true;
}

}  // namespace hybridseq::core
