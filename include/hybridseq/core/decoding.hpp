#pragma once
/// \file
/// One decoding protocol over every decodable layer, so compositions need not ask which kind
/// each child is:
///
///   auto st = core::make_state(layer, batch);       // NoState for a position-wise layer
///   core::prefill(layer, ws, st, x, y);              // any T: continue from the state
///   auto snap = core::snapshot(layer, st);  core::restore(layer, st, snap);
///
/// A stateful layer (attention's KV cache, Mamba's conv window and scan state, GSS's modal
/// state) provides make_state / prefill / snapshot / restore itself (and `step` where it has
/// a faster one-token path); a position-wise layer decodes by its forward on the new tokens.
/// Compositions fan the protocol over their children with the *_states helpers below.

#include <cstdint>
#include <type_traits>

#include "concepts.hpp"
#include "flat_tuple.hpp"
#include "workspace.hpp"

namespace hybridseq::core {

/// The state of a layer that keeps none across time.
struct NoState {};

namespace detail {
template <class L>
auto state_of() {
  if constexpr (Stateful<L>)
    return std::type_identity<typename L::State>{};
  else
    return std::type_identity<NoState>{};
}
}  // namespace detail

/// The per-sequence decoding state of layer L (NoState for position-wise layers).
template <class L>
using state_t = typename decltype(detail::state_of<L>())::type;

template <DecodableBranch L>
state_t<L> make_state(const L& layer, int batch) {
  if constexpr (Stateful<L>)
    return layer.make_state(batch);
  else
    return NoState{};
}

/// Consumes x (B, T, d_in) from the state and writes y (B, T, d_out): equal, up to rounding,
/// to the layer's forward over everything consumed so far followed by x.
template <DecodableBranch L>
void prefill(const L& layer, Workspace<typename L::execution_space>& ws, state_t<L>& state,
             Tensor<const typename L::scalar_type***, typename L::execution_space> x,
             Tensor<typename L::scalar_type***, typename L::execution_space> y) {
  if constexpr (HasStepPath<L>) {
    if (x.extent(1) == 1)
      layer.step(ws, state, x, y);
    else
      layer.prefill(ws, state, x, y);
  } else if constexpr (Stateful<L>) {
    layer.prefill(ws, state, x, y);
  } else {
    WorkspaceScope scope(ws);  // what forward saves for backward is dropped at once
    typename L::Saved saved;
    layer.forward(ws, x, y, saved);
  }
}

/// Refuses, before any state changes, continuing `batch` sequences by `time` tokens that the
/// state cannot take (a KV cache without room, a state of another batch). Layers with such
/// limits say so with a `check_fits(state, batch, time)` member; compositions ask every child,
/// so a model refuses a call before its first layer consumes anything.
template <DecodableBranch L>
void check_fits(const L& layer, const state_t<L>& state, std::int64_t batch, std::int64_t time) {
  if constexpr (requires { layer.check_fits(state, batch, time); }) layer.check_fits(state, batch, time);
}

/// An independent deep copy of a state.
template <DecodableBranch L>
state_t<L> snapshot(const L& layer, const state_t<L>& state) {
  if constexpr (Stateful<L>)
    return layer.snapshot(state);
  else
    return NoState{};
}

/// Overwrites `state` with `snap` (same batch).
template <DecodableBranch L>
void restore(const L& layer, state_t<L>& state, const state_t<L>& snap) {
  if constexpr (Stateful<L>) layer.restore(state, snap);
}

// ---- the protocol fanned over a composition's children (a FlatTuple of layers) ----

/// One state per child.
template <class... Ls>
using states_t = FlatTuple<state_t<Ls>...>;

template <class... Ls>
states_t<Ls...> make_states(const FlatTuple<Ls...>& children, int batch) {
  states_t<Ls...> st;
  for_each_indexed(children, [&](const auto& child, auto i) { get<i>(st) = make_state(child, batch); });
  return st;
}

template <class... Ls>
void check_states_fit(const FlatTuple<Ls...>& children, const states_t<Ls...>& st, std::int64_t batch,
                      std::int64_t time) {
  for_each_indexed(children, [&](const auto& child, auto i) { check_fits(child, get<i>(st), batch, time); });
}

template <class... Ls>
states_t<Ls...> snapshot_states(const FlatTuple<Ls...>& children, const states_t<Ls...>& st) {
  states_t<Ls...> out;
  for_each_indexed(children, [&](const auto& child, auto i) { get<i>(out) = snapshot(child, get<i>(st)); });
  return out;
}

template <class... Ls>
void restore_states(const FlatTuple<Ls...>& children, states_t<Ls...>& st, const states_t<Ls...>& snap) {
  for_each_indexed(children, [&](const auto& child, auto i) { restore(child, get<i>(st), get<i>(snap)); });
}

}  // namespace hybridseq::core
