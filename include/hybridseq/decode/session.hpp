#pragma once
/// \file
/// A generation session over a language model: prefill a prompt, then sample one token per
/// sequence per step (greedy, or temperature with optional top-k), with snapshot/restore of
/// the whole model's recurrent state (KV caches, conv windows, SSM states) at any position.
///
/// Sampling runs where the logits live (kernels::sample_tokens: its definition, and why a GPU's
/// pick can differ from the host's at a rounding boundary) and draws from a counter-based stream
/// keyed by (seed, sequence, position), so a session's output does not depend on how it was split
/// into calls. A generated token feeds the next step on the device; only the B ids come back.

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/parameter.hpp"
#include "../core/rng.hpp"
#include "../core/threads.hpp"
#include "../core/workspace.hpp"
#include "../kernels/sampling.hpp"

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
        next_("session.next", batch_),
        next_host_(Kokkos::create_mirror_view(next_)),
        step_ids_(next_.data(), batch_, 1),
        step_logits_("session.step_logits", batch_, 1, model.vocab_size()),
        last_rows_("session.last_rows", batch_, model.vocab_size()) {
    core::check_parameters_usable(model, "hybridseq::decode::Session");
  }

  /// Consumes `tokens` (B × len, row-major) after everything so far; keeps the last logits.
  void prefill(const std::vector<std::int32_t>& tokens, int len) {
    constexpr const char* api = "hybridseq::decode::Session::prefill";
    core::check_library_thread<Space>(api);
    if (len < 1 || tokens.size() != std::size_t(batch_) * len)
      fail<shape_error>(api, "got ", tokens.size(), " tokens for batch ", batch_, " × len ", len);
    // A generated token's ids and logits go to buffers made with the session (no allocation
    // per token); a prompt's (B × len × V logits) are freed when prefill returns, not kept.
    const bool one = len == 1;
    const auto ids = one ? step_ids_ : Tensor<std::int32_t**, Space>("session.ids", batch_, len);
    using HostIds = Kokkos::View<const std::int32_t**, Kokkos::LayoutRight, Kokkos::HostSpace,
                                 Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    Kokkos::deep_copy(ids, HostIds(tokens.data(), batch_, len));
    consume(ids);
  }

  /// Generates `count` tokens per sequence (B × count, row-major), feeding each back in.
  std::vector<std::int32_t> generate(int count, const Sampling& sampling = {}) {
    constexpr const char* api = "hybridseq::decode::Session::generate";
    core::check_library_thread<Space>(api);
    if (!primed_) fail<config_error>(api, "prefill a prompt (at least one token) before generating");
    if (count < 0) fail<value_error>(api, "count must be >= 0, got ", count);
    if (sampling.temperature < 0 || !std::isfinite(sampling.temperature) || sampling.top_k < 0)
      fail<value_error>(api, "temperature must be finite and >= 0 and top_k >= 0, got ", sampling.temperature, ", ",
                        sampling.top_k);
    std::vector<std::int32_t> out(std::size_t(batch_) * count);
    for (int i = 0; i < count; ++i) {
      kernels::sample_tokens<T>(Space{}, last_rows_,
                                {.temperature = sampling.temperature,
                                 .top_k = sampling.top_k,
                                 .seed = sampling.seed,
                                 .position = std::uint64_t(state_.length)},
                                next_);
      Kokkos::deep_copy(next_host_, next_);
      for (int b = 0; b < batch_; ++b) out[std::size_t(b) * count + i] = next_host_(b);
      consume(step_ids_);
    }
    return out;
  }

  /// Logits (B × V, row-major) of the last consumed position, copied to the host; empty before
  /// the first prefill.
  std::vector<double> last_logits() const {
    if (!primed_) return {};
    const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, last_rows_);
    std::vector<double> out(host.size());
    for (std::size_t b = 0; b < host.extent(0); ++b)
      for (std::size_t v = 0; v < host.extent(1); ++v) out[b * host.extent(1) + v] = double(host(b, v));
    return out;
  }
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
    Snapshot(const Model* model, int batch, State state, Tensor<T**, Space> last)
        : model_(model), batch_(batch), state_(std::move(state)), last_(std::move(last)) {}
    const Model* model_ = nullptr;
    int batch_ = 0;
    State state_{};
    Tensor<T**, Space> last_;  // the last position's logits; empty before the first prefill
  };
  Snapshot snapshot() const {
    Tensor<T**, Space> last;
    if (primed_) {
      last = Tensor<T**, Space>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "session.snapshot.last_rows"),
                                last_rows_.extent(0), last_rows_.extent(1));
      Kokkos::deep_copy(last, last_rows_);
    }
    return Snapshot(&model_, batch_, model_.snapshot(state_), last);
  }

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
    primed_ = s.last_.extent(0) > 0;
    if (primed_) Kokkos::deep_copy(last_rows_, s.last_);
  }

 private:
  static int checked_batch(int batch) {
    if (batch < 1) fail<value_error>("hybridseq::decode::Session", "batch must be >= 1, got ", batch);
    return batch;
  }

  /// Runs the model over `ids` (B × len) after everything so far and keeps the last position's
  /// logits (on the device: sampling reads them there).
  void consume(const Tensor<std::int32_t**, Space>& ids) {
    const std::int64_t len = ids.extent(1);
    const auto logits =
        len == 1 ? step_logits_ : Tensor<T***, Space>("session.logits", batch_, len, model_.vocab_size());
    model_.prefill(ws_, state_, ids, logits);
    Kokkos::deep_copy(last_rows_, Kokkos::subview(logits, Kokkos::ALL, len - 1, Kokkos::ALL));
    primed_ = true;
  }

  core::LibraryThreadCheck<Space> thread_check_;  // first: refuses before the state allocates
  const Model& model_;
  int batch_;
  State state_;
  core::Workspace<Space> ws_;
  Tensor<std::int32_t*, Space> next_;                            // (B): a generated token per sequence
  typename Tensor<std::int32_t*, Space>::HostMirror next_host_;  // the same, on the host
  Tensor<std::int32_t**, Space> step_ids_;                       // (B, 1) over next_: the model's input
  Tensor<T***, Space> step_logits_;                              // (B, 1, V): its logits
  Tensor<T**, Space> last_rows_;                                 // (B, V): the last position's logits
  bool primed_ = false;                                          // a prompt has been consumed
};

}  // namespace hybridseq::decode
