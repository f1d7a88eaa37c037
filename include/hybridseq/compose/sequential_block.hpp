#pragma once
/// \file
/// SequentialBlock: layers applied one after another, y = L_n(…L_1(x)). Used for a branch
/// followed by its own norm (PHA's per-branch RMSNorm) and for sequential ablations of
/// parallel blocks.

#include <array>
#include <string>
#include <type_traits>

#include "../core/concepts.hpp"
#include "../core/decoding.hpp"
#include "../core/flat_tuple.hpp"
#include "../core/gradient_listener.hpp"
#include "../core/options.hpp"
#include "../core/workspace.hpp"
#include "named.hpp"

namespace hybridseq::compose {

template <class... Layers>
class SequentialBlock {
  static_assert(sizeof...(Layers) >= 1, "hybridseq::compose::SequentialBlock: needs at least one layer");
  static_assert((core::Branch<Layers> && ...),
                "hybridseq::compose::SequentialBlock: every layer must model hybridseq::core::Branch");
  using Tuple = core::FlatTuple<Layers...>;
  static constexpr int N = int(sizeof...(Layers));
  using First = core::element_t<0, Tuple>;
  using Last = core::element_t<N - 1, Tuple>;
  static_assert((std::is_same_v<typename Layers::scalar_type, typename First::scalar_type> && ...),
                "hybridseq::compose::SequentialBlock: all layers must use the same scalar type");
  static_assert((std::is_same_v<typename Layers::execution_space, typename First::execution_space> && ...),
                "hybridseq::compose::SequentialBlock: all layers must use the same execution space");
  static constexpr bool widths_chain() {
    constexpr std::array<int, N> in{Layers::d_in...}, out{Layers::d_out...};
    for (int i = 1; i < N; ++i)
      if (in[i] != out[i - 1]) return false;
    return true;
  }
  static_assert(widths_chain(), "hybridseq::compose::SequentialBlock: each layer's d_in must equal the previous d_out");

 public:
  using scalar_type = typename First::scalar_type;
  using execution_space = typename First::execution_space;
  using T = scalar_type;
  using Space = execution_space;
  static constexpr int d_in = First::d_in;
  static constexpr int d_out = Last::d_out;

  /// One Options per layer, in order.
  struct Options {
    core::FlatTuple<core::options_t<Layers>...> layers{};

    template <std::size_t I>
    auto& layer() {
      return core::get<I>(layers);
    }
    template <std::size_t I>
    const auto& layer() const {
      return core::get<I>(layers);
    }
    template <class F>
    void for_each_child(F&& f) {
      core::for_each(layers, f);
    }
  };
  struct Saved {
    core::FlatTuple<typename Layers::Saved...> layer;
    std::array<Tensor<T***, Space>, N> out;  // intermediate outputs; out[N−1] is y's view
  };

  explicit SequentialBlock(const Options& o = {})
      : layers_(core::generate_flat_tuple<Layers...>(
            [&](auto i) { return core::construct<core::element_t<i, Tuple>>(core::get<i>(o.layers)); })) {}

  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& s) const {
    Tensor<const T***, Space> in = x;
    core::for_each_indexed(layers_, [&](const auto& layer, auto i) {
      using L = std::remove_cvref_t<decltype(layer)>;
      if constexpr (i() + 1 == N)
        s.out[i] = y;
      else
        s.out[i] = ws.template allocate<T***>("sequential_block.out", x.extent(0), x.extent(1), L::d_out);
      layer.forward(ws, in, s.out[i], core::get<i>(s.layer));
      in = s.out[i];
    });
  }

  void backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    core::WorkspaceScope scope(ws);
    Tensor<const T***, Space> grad = dy;
    backward_from<N - 1>(ws, s, grad, dx);
  }

  /// Arena use (core::Footprint): forward holds every output but the last under the layers'
  /// saves; backward holds the input gradient of every layer after the first, last to first.
  core::Footprint workspace(const core::WorkspaceQuery& q) const {
    std::array<core::Footprint, N> f;
    core::for_each_indexed(layers_, [&](const auto& layer, auto i) { f[i] = layer.workspace(q); });
    constexpr std::array<int, N> widths{Layers::d_in...};
    core::ArenaSteps fwd, bwd;
    const auto rows_of = [&](int i) { return core::padded_bytes<T>(q.batch * q.time * widths[i]); };
    for (int i = 0; i < N; ++i) fwd.hold(i + 1 < N ? rows_of(i + 1) : 0).forward(f[i]);
    for (int i = N - 1; i >= 0; --i) bwd.hold(i > 0 ? rows_of(i) : 0).backward(f[i]);
    return {fwd.level(), fwd.peak(), bwd.peak()};
  }

  // ---- decoding: available when every layer decodes; one state per layer ----
  static constexpr bool decodable = (core::DecodableBranch<Layers> && ...);
  using State = core::states_t<Layers...>;

  State make_state(int batch) const requires decodable { return core::make_states(layers_, batch); }
  void prefill(core::Workspace<Space>& ws, State& st, Tensor<const T***, Space> x,
               Tensor<T***, Space> y) const requires decodable {
    core::WorkspaceScope scope(ws);
    Tensor<const T***, Space> in = x;
    core::for_each_indexed(layers_, [&](const auto& layer, auto i) {
      using L = std::remove_cvref_t<decltype(layer)>;
      Tensor<T***, Space> out = y;
      if constexpr (i() + 1 < N)
        out = ws.template allocate<T***>("sequential_block.out", x.extent(0), x.extent(1), L::d_out);
      core::prefill(layer, ws, core::get<i>(st), in, out);
      in = out;
    });
  }
  void check_fits(const State& st, std::int64_t batch, std::int64_t time) const requires decodable {
    core::check_states_fit(layers_, st, batch, time);
  }
  State snapshot(const State& st) const requires decodable { return core::snapshot_states(layers_, st); }
  void restore(State& st, const State& snap) const requires decodable { core::restore_states(layers_, st, snap); }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    core::for_each_indexed(
        layers_, [&](auto& layer, auto i) { visit(child_name<std::remove_cvref_t<decltype(layer)>>(i), layer); });
  }

  template <std::size_t I>
  auto& layer() {
    return core::get<I>(layers_);
  }
  template <std::size_t I>
  const auto& layer() const {
    return core::get<I>(layers_);
  }

 private:
  template <int I>
  void backward_from(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> grad,
                     Tensor<T***, Space> dx) {
    auto& layer = core::get<I>(layers_);
    if constexpr (I == 0) {
      layer.backward(ws, core::get<0>(s.layer), grad, dx);
      core::gradients_final(ws, layer);
    } else {
      using L = std::remove_cvref_t<decltype(layer)>;
      auto d_in_grad =
          ws.template allocate_zeroed<T***>("sequential_block.grad", grad.extent(0), grad.extent(1), L::d_in);
      layer.backward(ws, core::get<I>(s.layer), grad, d_in_grad);
      core::gradients_final(ws, layer);
      backward_from<I - 1>(ws, s, d_in_grad, dx);
    }
  }

  Tuple layers_;
};

}  // namespace hybridseq::compose
