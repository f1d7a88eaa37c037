#pragma once
/// \file
/// Residual connections around a block f of width D.
///
///   PreNormResidual<f, Norm>:  y = α·x + f(Norm(x)), α = 1 by default (GPT-2/Llama pre-norm; Mamba "x +
///   Mixer(RMSNorm(x))";
///                              α > 1 is PHA's "pre-norm with DeepNorm-scaled residual" reading)
///   DeepNorm<f, Norm>:         y = Norm(α·x + f(x)),  α = (2L)^{1/4}   (Wang et al. 2022, post-norm)
///
/// α is a runtime option (a float: a new depth must not make a new type); `deepnorm_alpha(L)`
/// and `deepnorm_beta(L)` = (8L)^{−1/4} give the paper's values for an L-layer decoder.
///
/// Options::dropout drops f's output in training passes (core/dropout.hpp), before it joins
/// the residual stream: y = α·x + drop(f(Norm(x))), y = Norm(α·x + drop(f(x))).

#include <cmath>
#include <string>

#include "../core/check.hpp"
#include "../core/concepts.hpp"
#include "../core/decoding.hpp"
#include "../core/dropout.hpp"
#include "../core/error.hpp"
#include "../core/options.hpp"
#include "../core/parallel.hpp"
#include "../core/workspace.hpp"

namespace hybridseq::compose {

inline double deepnorm_alpha(int layers) {
  return std::pow(2.0 * layers, 0.25);
}
inline double deepnorm_beta(int layers) {
  return std::pow(8.0 * layers, -0.25);
}

namespace detail {
template <class T, class Space>
void add_scaled(Tensor<T***, Space> y, T a, Tensor<const T***, Space> x) {  // y += a·x
  const auto fy = core::flat(y);
  const auto fx = core::flat(x);
  core::parallel_for(
      "hybridseq::compose::residual_add", Space{}, fy.extent(0), 1,
      KOKKOS_LAMBDA(std::int64_t i) { fy(i) += a * fx(i); });
}

template <class Block, class Norm>
constexpr bool residual_compatible() {
  static_assert(core::Branch<Block> && core::Branch<Norm>, "hybridseq::compose: residual parts must be Branches");
  static_assert(Block::d_in == Block::d_out,
                "hybridseq::compose: a residual block must keep its width (d_in == d_out)");
  static_assert(Norm::d_in == Block::d_in && Norm::d_out == Block::d_in,
                "hybridseq::compose: the residual's norm must have the block's width");
  static_assert(std::is_same_v<typename Block::scalar_type, typename Norm::scalar_type> &&
                    std::is_same_v<typename Block::execution_space, typename Norm::execution_space>,
                "hybridseq::compose: the block and its norm must share scalar type and execution space");
  return true;
}

/// What both residual forms share: the options (α, the block's, the norm's), the children,
/// and decoding, whose state is the block's (the norm is position-wise).
template <class Block, class Norm>
class ResidualParts {
  static_assert(residual_compatible<Block, Norm>());

 public:
  using scalar_type = typename Block::scalar_type;
  using execution_space = typename Block::execution_space;
  static constexpr int d_in = Block::d_in;
  static constexpr int d_out = Block::d_out;

  struct Options {
    double alpha = 1.0;             // residual scale (deepnorm_alpha(L) for DeepNorm)
    core::OutputDropout dropout{};  // on the block's output, in training passes
    core::options_t<Block> block{};
    core::options_t<Norm> norm{};

    template <class F>
    void for_each_child(F&& f) {
      f(block);
      f(norm);
      f(dropout);
    }
  };

  static constexpr bool decodable = core::DecodableBranch<Block> && core::DecodableBranch<Norm>;
  using State = core::state_t<Block>;

  State make_state(int batch) const requires decodable { return core::make_state(block_, batch); }
  void check_fits(const State& st, std::int64_t batch, std::int64_t time) const requires decodable {
    core::check_fits(block_, st, batch, time);
  }
  State snapshot(const State& st) const requires decodable { return core::snapshot(block_, st); }
  void restore(State& st, const State& snap) const requires decodable { core::restore(block_, st, snap); }

  Block& block() { return block_; }
  const Block& block() const { return block_; }
  double alpha() const { return alpha_; }

 protected:
  ResidualParts(const Options& o, const char* api)
      : api_(api),
        dropout_(o.dropout.p),
        block_(core::construct<Block>(o.block)),
        norm_(core::construct<Norm>(o.norm)) {
    set_alpha(o.alpha);
    core::check_dropout(api, "Options::dropout.p", o.dropout.p);
  }

  /// The block output's mask for this pass (the identity outside training passes).
  core::DropoutMask draw_dropout(core::Workspace<execution_space>& ws) const { return ws.dropout().next(dropout_); }

 public:
  void set_alpha(double alpha) {
    if (!(alpha > 0) || !std::isfinite(alpha)) fail<value_error>(api_, "alpha must be finite and > 0, got ", alpha);
    alpha_ = alpha;
  }

 protected:
  const char* api_;
  double alpha_ = 1.0;
  double dropout_ = 0.0;
  Block block_;
  Norm norm_;
};
}  // namespace detail

/// y = α·x + Block(Norm(x)).
template <class Block, class Norm>
class PreNormResidual : public detail::ResidualParts<Block, Norm> {
  using Parts = detail::ResidualParts<Block, Norm>;
  using Parts::alpha_;
  using Parts::block_;
  using Parts::norm_;

 public:
  using T = typename Parts::scalar_type;
  using Space = typename Parts::execution_space;
  using Options = typename Parts::Options;
  using Parts::d_in;
  using Parts::decodable;
  using State = typename Parts::State;

  struct Saved {
    typename Norm::Saved norm;
    Tensor<T***, Space> normed;  // (B, T, D)
    typename Block::Saved block;
    core::DropoutMask dropout{};
  };

  explicit PreNormResidual(const Options& o = {}) : Parts(o, "hybridseq::compose::PreNormResidual") {}

  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& s) const {
    s.normed = ws.template allocate<T***>("residual.normed", x.extent(0), x.extent(1), d_in);
    norm_.forward(ws, x, s.normed, s.norm);
    block_.forward(ws, s.normed, y, s.block);
    s.dropout = this->draw_dropout(ws);
    core::apply_dropout(Space{}, s.dropout, core::flat(y));
    detail::add_scaled<T, Space>(y, T(alpha_), x);
  }

  void backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    core::WorkspaceScope scope(ws);
    auto dn = ws.template allocate_zeroed<T***>("residual.dnormed", dy.extent(0), dy.extent(1), d_in);
    Tensor<const T***, Space> dblock = dy;
    if (s.dropout.active()) {  // the block sees the dropped gradient, the skip path all of it
      auto dropped = ws.template allocate<T***>("residual.ddropped", dy.extent(0), dy.extent(1), d_in);
      Kokkos::deep_copy(dropped, dy);
      core::apply_dropout(Space{}, s.dropout, core::flat(dropped));
      dblock = dropped;
    }
    block_.backward(ws, s.block, dblock, dn);
    norm_.backward(ws, s.norm, dn, dx);
    detail::add_scaled<T, Space>(dx, T(alpha_), dy);
  }

  /// Arena use (core::Footprint): forward holds `normed` under the norm's and the block's
  /// saves; backward holds dnormed (and the dropped copy of dy in training passes with
  /// dropout) while the block's, then the norm's backward run.
  core::Footprint workspace(const core::WorkspaceQuery& q) const {
    const std::size_t rows = core::padded_bytes<T>(q.batch * q.time * d_in);
    const core::Footprint n = norm_.workspace(q), f = block_.workspace(q);
    core::ArenaSteps fwd;
    fwd.hold(rows).forward(n).forward(f);
    return {fwd.level(), fwd.peak(), rows * (q.drops(this->dropout_) ? 2 : 1) + std::max(f.backward, n.backward)};
  }

  void prefill(core::Workspace<Space>& ws, State& st, Tensor<const T***, Space> x,
               Tensor<T***, Space> y) const requires decodable {
    core::WorkspaceScope scope(ws);
    auto normed = ws.template allocate<T***>("residual.normed", x.extent(0), x.extent(1), d_in);
    core::NoState none;
    core::prefill(norm_, ws, none, x, normed);
    core::prefill(block_, ws, st, normed, y);
    detail::add_scaled<T, Space>(y, T(alpha_), x);
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("norm", norm_);
    visit("block", block_);
  }
};

/// y = Norm(α·x + Block(x)).
template <class Block, class Norm>
class DeepNorm : public detail::ResidualParts<Block, Norm> {
  using Parts = detail::ResidualParts<Block, Norm>;
  using Parts::alpha_;
  using Parts::block_;
  using Parts::norm_;

 public:
  using T = typename Parts::scalar_type;
  using Space = typename Parts::execution_space;
  using Options = typename Parts::Options;
  using Parts::d_in;
  using Parts::decodable;
  using State = typename Parts::State;

  struct Saved {
    typename Block::Saved block;
    Tensor<T***, Space> z;  // α·x + f(x)
    typename Norm::Saved norm;
    core::DropoutMask dropout{};
  };

  explicit DeepNorm(const Options& o = {}) : Parts(o, "hybridseq::compose::DeepNorm") {}

  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& s) const {
    s.z = ws.template allocate<T***>("deepnorm.z", x.extent(0), x.extent(1), d_in);
    block_.forward(ws, x, s.z, s.block);
    s.dropout = this->draw_dropout(ws);
    core::apply_dropout(Space{}, s.dropout, core::flat(s.z));
    detail::add_scaled<T, Space>(s.z, T(alpha_), x);
    norm_.forward(ws, s.z, y, s.norm);
  }

  void backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    core::WorkspaceScope scope(ws);
    auto dz = ws.template allocate_zeroed<T***>("deepnorm.dz", dy.extent(0), dy.extent(1), d_in);
    norm_.backward(ws, s.norm, dy, dz);
    detail::add_scaled<T, Space>(dx, T(alpha_), dz);          // the skip path: all of dz
    core::apply_dropout(Space{}, s.dropout, core::flat(dz));  // the block: the dropped part
    block_.backward(ws, s.block, dz, dx);
  }

  /// Arena use (core::Footprint): forward holds z under the block's and the norm's saves;
  /// backward holds dz while the norm's, then the block's backward run.
  core::Footprint workspace(const core::WorkspaceQuery& q) const {
    const std::size_t rows = core::padded_bytes<T>(q.batch * q.time * d_in);
    const core::Footprint f = block_.workspace(q), n = norm_.workspace(q);
    core::ArenaSteps fwd;
    fwd.hold(rows).forward(f).forward(n);
    return {fwd.level(), fwd.peak(), rows + std::max(f.backward, n.backward)};
  }

  void prefill(core::Workspace<Space>& ws, State& st, Tensor<const T***, Space> x,
               Tensor<T***, Space> y) const requires decodable {
    core::WorkspaceScope scope(ws);
    auto z = ws.template allocate<T***>("deepnorm.z", x.extent(0), x.extent(1), d_in);
    core::prefill(block_, ws, st, x, z);
    detail::add_scaled<T, Space>(z, T(alpha_), x);
    core::NoState none;
    core::prefill(norm_, ws, none, z, y);
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    visit("block", block_);
    visit("norm", norm_);
  }
};

}  // namespace hybridseq::compose
