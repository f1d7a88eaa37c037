#pragma once
/// \file
/// Repeat<Block>: N runtime copies of one block type applied in sequence, so depth does not
/// multiply types (dlib's `repeat`). Parameters are named "<i>.<…>"; give the Repeat itself
/// a name in the parent ("blocks") to get `blocks.3.attn.wqkv`.

#include <string>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/decoding.hpp"
#include "../core/error.hpp"
#include "../core/gradient_listener.hpp"
#include "../core/options.hpp"
#include "../core/workspace.hpp"

namespace hybridseq::compose {

template <class Block>
class Repeat {
  static_assert(core::Branch<Block>, "hybridseq::compose::Repeat: the repeated block must be a Branch");
  static_assert(Block::d_in == Block::d_out, "hybridseq::compose::Repeat: a repeated block must keep its width");

 public:
  using scalar_type = typename Block::scalar_type;
  using execution_space = typename Block::execution_space;
  using T = scalar_type;
  using Space = execution_space;
  static constexpr int d_in = Block::d_in;
  static constexpr int d_out = Block::d_out;

  /// The depth and the options every copy is built from.
  struct Options {
    int count = 1;
    core::options_t<Block> block{};

    template <class F>
    void for_each_child(F&& f) {
      f(block);
    }
  };
  struct Saved {
    std::vector<typename Block::Saved> block;
    std::vector<Tensor<T***, Space>> out;  // out[i] = output of block i; the last is y
  };

  explicit Repeat(const Options& o = {}) {
    if (o.count < 1) fail<value_error>("hybridseq::compose::Repeat", "count must be >= 1, got ", o.count);
    blocks_.reserve(o.count);
    for (int i = 0; i < o.count; ++i) blocks_.push_back(core::construct<Block>(o.block));
  }

  int size() const { return int(blocks_.size()); }
  Block& operator[](int i) { return blocks_[i]; }
  const Block& operator[](int i) const { return blocks_[i]; }

  void forward(core::Workspace<Space>& ws, Tensor<const T***, Space> x, Tensor<T***, Space> y, Saved& s) const {
    const int n = size();
    s.block.assign(n, typename Block::Saved{});
    s.out.assign(n, Tensor<T***, Space>{});
    Tensor<const T***, Space> in = x;
    for (int i = 0; i < n; ++i) {
      s.out[i] = i + 1 == n ? y : ws.template allocate<T***>("repeat.out", x.extent(0), x.extent(1), d_out);
      blocks_[i].forward(ws, in, s.out[i], s.block[i]);
      in = s.out[i];
    }
  }

  void backward(core::Workspace<Space>& ws, const Saved& s, Tensor<const T***, Space> dy, Tensor<T***, Space> dx) {
    core::WorkspaceScope scope(ws);
    Tensor<const T***, Space> grad = dy;
    for (int i = size() - 1; i > 0; --i) {
      auto g = ws.template allocate_zeroed<T***>("repeat.grad", dy.extent(0), dy.extent(1), d_in);
      blocks_[i].backward(ws, s.block[i], grad, g);
      core::gradients_final(ws, blocks_[i]);
      grad = g;
    }
    blocks_[0].backward(ws, s.block[0], grad, dx);
    core::gradients_final(ws, blocks_[0]);
  }

  /// Arena use (core::Footprint): forward holds every block's output but the last under the
  /// blocks' saves; backward holds one input gradient per block after the first.
  core::Footprint workspace(const core::WorkspaceQuery& q) const {
    const std::size_t rows = core::padded_bytes<T>(q.batch * q.time * d_in);
    std::vector<core::Footprint> f;
    for (const auto& block : blocks_) f.push_back(block.workspace(q));
    core::ArenaSteps fwd, bwd;
    for (int i = 0; i < size(); ++i) fwd.hold(i + 1 < size() ? rows : 0).forward(f[i]);
    for (int i = size() - 1; i >= 0; --i) bwd.hold(i > 0 ? rows : 0).backward(f[i]);
    return {fwd.level(), fwd.peak(), bwd.peak()};
  }

  // ---- decoding: available when the block decodes ----
  static constexpr bool decodable = core::DecodableBranch<Block>;
  struct State {
    std::vector<core::state_t<Block>> block;
  };

  State make_state(int batch) const requires decodable {
    State st;
    for (const auto& b : blocks_) st.block.push_back(core::make_state(b, batch));
    return st;
  }
  void prefill(core::Workspace<Space>& ws, State& st, Tensor<const T***, Space> x,
               Tensor<T***, Space> y) const requires decodable {
    core::WorkspaceScope scope(ws);
    Tensor<const T***, Space> in = x;
    for (int i = 0; i < size(); ++i) {
      auto out = i + 1 == size() ? y : ws.template allocate<T***>("repeat.out", x.extent(0), x.extent(1), d_out);
      core::prefill(blocks_[i], ws, st.block[i], in, out);
      in = out;
    }
  }
  void check_fits(const State& st, std::int64_t batch, std::int64_t time) const requires decodable {
    for (int i = 0; i < size(); ++i) core::check_fits(blocks_[i], st.block[i], batch, time);
  }
  State snapshot(const State& st) const requires decodable {
    State out;
    for (int i = 0; i < size(); ++i) out.block.push_back(core::snapshot(blocks_[i], st.block[i]));
    return out;
  }
  void restore(State& st, const State& snap) const requires decodable {
    for (int i = 0; i < size(); ++i) core::restore(blocks_[i], st.block[i], snap.block[i]);
  }

  template <class Visit>
  void visit_parameters(Visit&& visit) {
    for (int i = 0; i < size(); ++i) visit(std::to_string(i), blocks_[i]);
  }

 private:
  std::vector<Block> blocks_;
};

}  // namespace hybridseq::compose
