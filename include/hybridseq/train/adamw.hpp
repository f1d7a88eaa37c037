#pragma once
/// \file
/// AdamW (Loshchilov & Hutter 2019): Adam with decoupled weight decay.
///
///   m ← β₁m + (1−β₁)g,  v ← β₂v + (1−β₂)g²
///   θ ← θ − lr·( m̂ / (√v̂ + ε) + λ·θ )      m̂, v̂ bias-corrected
///
/// The learning rate is not an option: every `step(lr)` is given it, by the trainer from its
/// `Schedule` (the one owner of the learning rate). Weight decay λ applies by default to the
/// parameters whose role decays (matrices: `DecayScope::matrices`), never to norms, biases,
/// embeddings or scalars; `DecayScope::all` decays every parameter. Moments are kept in float
/// (fp32) whatever the parameter type's precision would allow, as in PyTorch's default. State
/// is reached through the parameter visitor, so it follows the model's dotted names (for
/// checkpoints).

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/parameter.hpp"
#include "../kernels/elementwise.hpp"

#if HYBRIDSEQ_ISA_DISPATCH
#include <immintrin.h>
#endif

namespace hybridseq::train {

/// Which parameters weight decay applies to.
enum class DecayScope {
  matrices,  // Role::weight only (core::decays): not norms, biases, embeddings, scalars
  all,       // every parameter
};

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  DecayScope decay_scope = DecayScope::matrices;
};

namespace detail {
template <class T, class Space>
struct AdamWUpdate {
  Tensor<T*, Space> param;
  Tensor<const T*, Space> grad;
  Tensor<float*, Space> m, v;
  float beta1, beta2, eps, lr, decay, correction1, correction2;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    const float g = static_cast<float>(grad(i));
    const float mi = beta1 * m(i) + (1 - beta1) * g;
    const float vi = beta2 * v(i) + (1 - beta2) * g * g;
    m(i) = mi;
    v(i) = vi;
    const float mhat = mi / correction1, vhat = vi / correction2;
    param(i) -= static_cast<T>(lr * (mhat / (math::sqrt(vhat) + eps) + decay * static_cast<float>(param(i))));
  }

#if HYBRIDSEQ_ISA_DISPATCH
  // The host's vector loop (kernels::HostVectorLoop), for float parameters. libm's sqrt may
  // set errno (for a negative argument), a side effect that keeps the compiler from
  // vectorising the scalar loop; v̂ ≥ 0 here, and the vector instruction rounds the root
  // correctly, as sqrtf does. GCC's vector extensions have no square root, and an intrinsic
  // compiles only inside a function built for its ISA: hence a body per ISA, in intrinsics,
  // with the scalar arithmetic on vectors, contracted to FMAs as the compiler does in the
  // other copies.
  template <class S>
  HYBRIDSEQ_HOST_FORCEINLINE void vector_loop(const std::int64_t i,
                                              const std::int64_t end) const requires std::is_same_v<T, float> {
    static_assert(S::lanes == 16 || S::lanes == 8, "AdamW's vector loop: AVX-512 or AVX2 vectors");
    if constexpr (S::lanes == 16)
      loop_avx512(i, end);
    else
      loop_avx2(i, end);
  }
  [[HYBRIDSEQ_TARGET_AVX512]] void loop_avx512(std::int64_t i,
                                               const std::int64_t end) const requires std::is_same_v<T, float> {
    for (; i + 16 <= end; i += 16) {
      const __m512 g = _mm512_loadu_ps(&grad(i)), p = _mm512_loadu_ps(&param(i));
      const __m512 mi = beta1 * _mm512_loadu_ps(&m(i)) + (1 - beta1) * g;
      const __m512 vi = beta2 * _mm512_loadu_ps(&v(i)) + (1 - beta2) * g * g;
      _mm512_storeu_ps(&m(i), mi);
      _mm512_storeu_ps(&v(i), vi);
      const __m512 mhat = mi / correction1, vhat = vi / correction2;
      // The masked root with every lane set: GCC 12 warns (an error under -Werror) that
      // _mm512_sqrt_ps' undefined pass-through operand "may be used uninitialized".
      _mm512_storeu_ps(&param(i),
                       p - lr * (mhat / (_mm512_mask_sqrt_ps(vhat, __mmask16(0xffff), vhat) + eps) + decay * p));
    }
    for (; i < end; ++i) (*this)(i);
  }
  [[HYBRIDSEQ_TARGET_AVX2]] void loop_avx2(std::int64_t i,
                                           const std::int64_t end) const requires std::is_same_v<T, float> {
    for (; i + 8 <= end; i += 8) {
      const __m256 g = _mm256_loadu_ps(&grad(i)), p = _mm256_loadu_ps(&param(i));
      const __m256 mi = beta1 * _mm256_loadu_ps(&m(i)) + (1 - beta1) * g;
      const __m256 vi = beta2 * _mm256_loadu_ps(&v(i)) + (1 - beta2) * g * g;
      _mm256_storeu_ps(&m(i), mi);
      _mm256_storeu_ps(&v(i), vi);
      const __m256 mhat = mi / correction1, vhat = vi / correction2;
      _mm256_storeu_ps(&param(i), p - lr * (mhat / (_mm256_sqrt_ps(vhat) + eps) + decay * p));
    }
    for (; i < end; ++i) (*this)(i);
  }
#endif
};

/// The parameters one AdamW kernel updates: `n` elements from each pointer, one decay.
template <class T, class Space>
struct AdamWRun {
  T* param = nullptr;
  const T* grad = nullptr;
  float *m = nullptr, *v = nullptr;
  std::int64_t n = 0;
  float decay = 0;

  /// Extends this run by the next parameter when all four arrays continue it and the decay
  /// agrees; otherwise returns false.
  bool extend(const AdamWRun& next) {
    if (param == nullptr || next.decay != decay || param + n != next.param || grad + n != next.grad ||
        m + n != next.m || v + n != next.v)
      return false;
    n += next.n;
    return true;
  }
};
}  // namespace detail

/// AdamW over every parameter of a module (all parameters in one execution space). Its moments
/// live in one allocation each, in core's storage order, so that over a model whose parameters
/// are contiguous (core::make_contiguous) a step is one kernel per weight-decay group instead
/// of one per tensor.
template <class Module, ExecutionSpace Space = typename Module::execution_space>
class AdamW {
 public:
  AdamW(Module& module, const AdamWOptions& options) : module_(module), options_(options) {
    if (!(options.beta1 >= 0 && options.beta1 < 1) || !(options.beta2 >= 0 && options.beta2 < 1) ||
        !(options.eps > 0) || !(options.weight_decay >= 0) || !std::isfinite(options.weight_decay) ||
        !(options.decay_scope == DecayScope::matrices || options.decay_scope == DecayScope::all))
      fail<value_error>("hybridseq::train::AdamW", "invalid options beta1=", options.beta1, " beta2=", options.beta2,
                        " eps=", options.eps, " weight_decay=", options.weight_decay,
                        " decay_scope=", static_cast<int>(options.decay_scope));
    std::vector<std::pair<std::string, std::int64_t>> placed;  // (name, numel), storage order
    std::int64_t total = 0;
    core::for_each_parameter_in_storage_order(module_, [&](std::string_view name, auto& p) {
      static_assert(std::is_same_v<typename std::remove_reference_t<decltype(p)>::execution_space, Space>,
                    "hybridseq::train::AdamW: every parameter must live in the optimizer's execution space");
      placed.emplace_back(std::string(name), p.numel());
      total += p.numel();
    });
    const Tensor<float*, Space> m("adamw.m", total), v("adamw.v", total);
    std::int64_t at = 0;
    for (auto& [name, numel] : placed) {
      const auto slice = std::make_pair(at, at + numel);
      states_.push_back({std::move(name), Tensor<float*, Space>(m, slice), Tensor<float*, Space>(v, slice)});
      at += numel;
    }
  }

  /// One update with learning rate `lr` (the schedule's, for this step); increments the step
  /// count. A negative or non-finite lr is a value_error (nothing is updated).
  void step(double lr) {
    if (!std::isfinite(lr) || lr < 0)
      fail<value_error>("hybridseq::train::AdamW::step", "learning rate must be finite and >= 0, got ", lr);
    ++step_;
    const float c1 = static_cast<float>(1 - std::pow(options_.beta1, double(step_)));
    const float c2 = static_cast<float>(1 - std::pow(options_.beta2, double(step_)));
    const auto update = [&]<class T>(const detail::AdamWRun<T, Space>& r) {
      if (r.n == 0) return;
      kernels::elementwise<T>(
          "hybridseq::train::AdamW::step", Space{}, r.n, 4,
          detail::AdamWUpdate<T, Space>{Tensor<T*, Space>(r.param, r.n), Tensor<const T*, Space>(r.grad, r.n),
                                        Tensor<float*, Space>(r.m, r.n), Tensor<float*, Space>(r.v, r.n),
                                        float(options_.beta1), float(options_.beta2), float(options_.eps), float(lr),
                                        r.decay, c1, c2});
    };
    std::tuple<detail::AdamWRun<float, Space>, detail::AdamWRun<double, Space>> runs;  // one pending per type
    std::size_t k = 0;
    core::for_each_parameter_in_storage_order(module_, [&](std::string_view, auto& p) {
      using T = typename std::remove_reference_t<decltype(p)>::scalar_type;
      const auto& s = states_[k++];
      const bool decayed = options_.decay_scope == DecayScope::all || core::decays(p.role());
      const float decay = decayed ? static_cast<float>(options_.weight_decay) : 0.0f;
      const detail::AdamWRun<T, Space> next{p.value().data(), p.grad().data(), s.m.data(),
                                            s.v.data(),       p.numel(),       decay};
      auto& run = std::get<detail::AdamWRun<T, Space>>(runs);
      if (!run.extend(next)) {
        update(run);
        run = next;
      }
    });
    update(std::get<0>(runs));
    update(std::get<1>(runs));
  }

  std::int64_t step_count() const { return step_; }
  const AdamWOptions& options() const { return options_; }

  /// The state a checkpoint must carry: `f(name, m, v)` per parameter (fp32 moments, numel),
  /// in the parameter visitor's order, and the step count (bias correction depends on it).
  template <class F>
  void for_each_moment(F&& f) const {
    for (const auto& s : states_) f(std::string_view(s.name), s.m, s.v);
  }
  void set_step_count(std::int64_t step) {
    if (step < 0) fail<value_error>("hybridseq::train::AdamW::set_step_count", "step must be >= 0, got ", step);
    step_ = step;
  }

 private:
  struct State {
    std::string name;            // the parameter's dotted name
    Tensor<float*, Space> m, v;  // (numel) first and second moments: slices of one allocation each
  };

  Module& module_;
  AdamWOptions options_;
  std::vector<State> states_;
  std::int64_t step_ = 0;
};

}  // namespace hybridseq::train
