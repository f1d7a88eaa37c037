#pragma once
/// \file
/// A generation session over a language model: prefill a prompt, then sample one token per
/// sequence per step (greedy, or temperature with optional top-k), with snapshot/restore of
/// the whole model's recurrent state (KV caches, conv windows, SSM states) at any position.
///
/// Sampling draws from a counter-based stream keyed by (seed, sequence, position), so a
/// session's output does not depend on how it was split into calls.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/parameter.hpp"
#include "../core/rng.hpp"
#include "../core/threads.hpp"
#include "../core/workspace.hpp"

namespace hybridseq::decode {

struct Sampling {
  double temperature = 0;  // 0: greedy (argmax)
  int top_k = 0;           // 0: the whole vocabulary
  std::uint64_t seed = 0;
};

template <class Model>
class Session {
  static_assert(core::require_decodable_branch<typename Model::body_type>(),
                "hybridseq::decode::Session: every layer of the model must decode token by token");

 public:
  using Space = typename Model::execution_space;
  using T = typename Model::scalar_type;
  using State = typename Model::State;
  Session(const Model& model, int batch)
      : thread_check_("hybridseq::decode::Session"),
        model_(model),
        batch_(checked_batch(batch)),
        state_(model.make_state(batch_)),
        step_ids_("session.step_ids", batch_, 1),
        step_logits_("session.step_logits", batch_, 1, model.vocab_size()),
        last_rows_("session.last_rows", batch_, model.vocab_size()),
        last_rows_host_(Kokkos::create_mirror_view(last_rows_)) {
    core::check_parameters_usable(model, "hybridseq::decode::Session");
  }

  /// Consumes `tokens` (B × len, row-major) after everything so far; keeps the last logits.
  void prefill(const std::vector<std::int32_t>& tokens, int len) {
    constexpr const char* api = "hybridseq::decode::Session::prefill";
    core::check_library_thread<Space>(api);
    if (len < 1 || tokens.size() != std::size_t(batch_) * len)
      fail<shape_error>(api, "got ", tokens.size(), " tokens for batch ", batch_, " × len ", len);
    const int V = int(model_.vocab_size());
    // A generated token's ids and logits go to buffers made with the session (no allocation
    // per token); a prompt's (B × len × V logits) are freed when prefill returns, not kept.
    const bool one = len == 1;
    const auto ids = one ? step_ids_ : Tensor<std::int32_t**, Space>("session.ids", batch_, len);
    const auto logits = one ? step_logits_ : Tensor<T***, Space>("session.logits", batch_, len, V);
    using HostIds = Kokkos::View<const std::int32_t**, Kokkos::LayoutRight, Kokkos::HostSpace,
                                 Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    Kokkos::deep_copy(ids, HostIds(tokens.data(), batch_, len));
    model_.prefill(ws_, state_, ids, logits);
    // Only the last position's rows, what sampling reads, come back to the host.
    Kokkos::deep_copy(last_rows_, Kokkos::subview(logits, Kokkos::ALL, len - 1, Kokkos::ALL));
    Kokkos::deep_copy(last_rows_host_, last_rows_);
    last_.resize(std::size_t(batch_) * V);
    for (int b = 0; b < batch_; ++b)
      for (int v = 0; v < V; ++v) last_[std::size_t(b) * V + v] = double(last_rows_host_(b, v));
  }

  /// Generates `count` tokens per sequence (B × count, row-major), feeding each back in.
  std::vector<std::int32_t> generate(int count, const Sampling& sampling = {}) {
    constexpr const char* api = "hybridseq::decode::Session::generate";
    if (last_.empty()) fail<config_error>(api, "prefill a prompt (at least one token) before generating");
    if (sampling.temperature < 0 || !std::isfinite(sampling.temperature) || sampling.top_k < 0)
      fail<value_error>(api, "temperature must be finite and >= 0 and top_k >= 0, got ", sampling.temperature, ", ",
                        sampling.top_k);
    std::vector<std::int32_t> out(std::size_t(batch_) * count);
    std::vector<std::int32_t> next(batch_);
    for (int i = 0; i < count; ++i) {
      for (int b = 0; b < batch_; ++b) next[b] = pick(b, sampling);
      for (int b = 0; b < batch_; ++b) out[std::size_t(b) * count + i] = next[b];
      prefill(next, 1);
    }
    return out;
  }

  /// Logits (B × V) of the last consumed position.
  const std::vector<double>& last_logits() const { return last_; }
  std::int64_t length() const { return state_.length; }

  /// The whole decoding state at one position. Opaque: only a session makes one, and it
  /// remembers the model and batch it was taken from, because its state tree is sized by them
  /// (KV-cache capacity, batch) and restoring it anywhere else would copy between Views of
  /// different extents. A default-constructed Snapshot holds nothing and restores nowhere.
  class Snapshot {
   public:
    Snapshot() = default;
    bool empty() const { return model_ == nullptr; }

   private:
    friend class Session;
    Snapshot(const Model* model, int batch, State state, std::vector<double> last)
        : model_(model), batch_(batch), state_(std::move(state)), last_(std::move(last)) {}
    const Model* model_ = nullptr;
    int batch_ = 0;
    State state_{};
    std::vector<double> last_;
  };
  Snapshot snapshot() const { return Snapshot(&model_, batch_, model_.snapshot(state_), last_); }

  /// Returns the session to `s`, taken from a session over this same model object with the
  /// same batch (this one, or another over the same model); anything else is refused before
  /// the state changes.
  void restore(const Snapshot& s) {
    constexpr const char* api = "hybridseq::decode::Session::restore";
    if (s.empty()) fail<value_error>(api, "the snapshot is empty (default-constructed, not taken from a session)");
    if (s.model_ != &model_)
      fail<value_error>(api, "the snapshot was taken from a session over another model (",
                        static_cast<const void*>(s.model_), ", this session's is ", static_cast<const void*>(&model_),
                        ")");
    if (s.batch_ != batch_)
      fail<shape_error>(api, "the snapshot holds ", s.batch_, " sequences; this session holds ", batch_);
    model_.restore(state_, s.state_);
    last_ = s.last_;
  }

 private:
  static int checked_batch(int batch) {
    if (batch < 1) fail<value_error>("hybridseq::decode::Session", "batch must be >= 1, got ", batch);
    return batch;
  }

  std::int32_t pick(int b, const Sampling& s) const {
    const int V = int(model_.vocab_size());
    const double* l = last_.data() + std::size_t(b) * V;
    if (s.temperature == 0) return std::int32_t(std::max_element(l, l + V) - l);
    std::vector<int> order(V);
    std::iota(order.begin(), order.end(), 0);
    const int k = s.top_k > 0 ? std::min(s.top_k, V) : V;
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int c) { return l[a] > l[c]; });
    const double top = l[order[0]];
    std::vector<double> p(k);
    double total = 0;
    for (int i = 0; i < k; ++i) total += (p[i] = std::exp((l[order[i]] - top) / s.temperature));
    const core::CounterRng rng(s.seed, std::uint64_t(b));
    double u = rng.uniform(std::uint64_t(state_.length)) * total;
    for (int i = 0; i < k; ++i)
      if ((u -= p[i]) <= 0) return order[i];
    return order[k - 1];
  }

  core::LibraryThreadCheck<Space> thread_check_;  // first: refuses before the state allocates
  const Model& model_;
  int batch_;
  State state_;
  core::Workspace<Space> ws_;
  Tensor<std::int32_t**, Space> step_ids_;                  // (B, 1): a generated token's input
  Tensor<T***, Space> step_logits_;                         // (B, 1, V): its logits
  Tensor<T**, Space> last_rows_;                            // (B, V): the last position's logits
  typename Tensor<T**, Space>::HostMirror last_rows_host_;  // the same, on the host (itself on CPUs)
  std::vector<double> last_;                                // empty until the first prefill
};

}  // namespace hybridseq::decode
