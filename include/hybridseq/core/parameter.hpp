#pragma once
/// \file
/// Parameters and the one mechanism that reaches them: the parameter visitor.
///
/// A module lists its parameters and sub-modules in `visit_parameters`:
///   template <class Visit> void visit_parameters(Visit&& visit) {
///     visit("weight", weight_);  // a Parameter
///     visit("fc1", fc1_);        // a sub-module
///   }
/// `for_each_parameter(module, f)` walks that tree and calls `f(dotted_name, parameter)` with
/// stable names (`blocks.3.attn.wqkv`). Initialisation, zero_grad, parameter counts,
/// safetensors save/load and the optimizer are all built on it, so there is one way to
/// enumerate parameters.
///
/// Each parameter starts in allocations of its own. `make_contiguous(module)` moves them into
/// one allocation for the values and one for the gradients (the Trainer does, as llm.c does at
/// model creation), so that the per-step passes over every parameter — zero_grad, the gradient
/// norm, clipping, the optimizer — run as one loop over memory: one parallel region per pass
/// instead of one per tensor. Those passes walk `for_each_run`, which merges parameters that
/// sit back to back in memory; over separately allocated parameters it visits them one by one.

#include <array>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "error.hpp"
#include "huge_pages.hpp"
#include "parallel.hpp"
#include "rng.hpp"
#include "spaces.hpp"

namespace hybridseq::core {

/// What a parameter is, for decisions that depend on it (weight decay, DeepNorm scaling).
enum class Role { weight, bias, norm_gain, embedding, scalar };

/// Weight decay applies to matrices only: not to norms, biases, embeddings or scalars.
constexpr bool decays(Role r) {
  return r == Role::weight;
}

/// A trainable tensor of rank ≤ 4 with its gradient, stored flat; layers view it shaped.
template <Scalar T, ExecutionSpace Space>
class Parameter {
 public:
  using scalar_type = T;
  using execution_space = Space;
  static constexpr int max_rank = 4;

  Parameter(std::initializer_list<std::int64_t> shape, Role role, Init init) : role_(role), init_(init) {
    if (shape.size() > max_rank)
      fail<shape_error>("hybridseq::core::Parameter", "rank ", shape.size(), " exceeds ", max_rank);
    std::size_t n = 1;
    for (auto e : shape) {
      shape_[rank_++] = e;
      n *= static_cast<std::size_t>(e);
    }
    value_ = Tensor<T*, Space>("hybridseq::param", n);
    grad_ = Tensor<T*, Space>("hybridseq::grad", n);
  }

  /// Flat storage (numel) of the value and of its gradient.
  const Tensor<T*, Space>& value() const { return value_; }
  const Tensor<T*, Space>& grad() const { return grad_; }

  /// The value or gradient viewed with the parameter's shape: `weight.shaped<T**>()`.
  template <class DataType>
  Tensor<DataType, Space> shaped() const {
    return reshape<DataType>(value_);
  }
  template <class DataType>
  Tensor<DataType, Space> shaped_grad() const {
    return reshape<DataType>(grad_);
  }

  int rank() const { return rank_; }
  std::int64_t extent(int r) const { return shape_[r]; }
  std::array<std::int64_t, max_rank> shape() const { return shape_; }
  std::int64_t numel() const { return static_cast<std::int64_t>(value_.extent(0)); }
  Role role() const { return role_; }
  const Init& init() const { return init_; }
  /// Replaces how `initialize` fills the value (a model-wide scheme, see use_normal_init).
  void set_init(const Init& init) { init_ = init; }

  /// Moves the value and the gradient into `value` and `grad` (numel elements each, e.g. slices
  /// of one allocation: make_contiguous), copying both; the parameter uses them from now on.
  /// Views taken earlier from value() or grad() keep the old storage.
  void relocate(const Tensor<T*, Space>& value, const Tensor<T*, Space>& grad) {
    if (value.extent(0) != value_.extent(0) || grad.extent(0) != grad_.extent(0))
      fail<shape_error>("hybridseq::core::Parameter::relocate", "new storage holds ", value.extent(0), " values and ",
                        grad.extent(0), " gradients; the parameter has ", value_.extent(0));
    Kokkos::deep_copy(value, value_);
    Kokkos::deep_copy(grad, grad_);
    value_ = value;
    grad_ = grad;
  }

 private:
  template <class DataType>
  Tensor<DataType, Space> reshape(const Tensor<T*, Space>& flat) const {
    using V = Tensor<DataType, Space>;
    static_assert(std::is_same_v<std::remove_const_t<typename V::value_type>, T>,
                  "hybridseq::core::Parameter::shaped: scalar type differs from the parameter's");
    if (static_cast<int>(V::rank) != rank_)
      fail<shape_error>("hybridseq::core::Parameter::shaped", "requested rank ", V::rank,
                        " but the parameter has rank ", rank_);
    if constexpr (V::rank == 1)
      return V(flat.data(), shape_[0]);
    else if constexpr (V::rank == 2)
      return V(flat.data(), shape_[0], shape_[1]);
    else if constexpr (V::rank == 3)
      return V(flat.data(), shape_[0], shape_[1], shape_[2]);
    else
      return V(flat.data(), shape_[0], shape_[1], shape_[2], shape_[3]);
  }

  Tensor<T*, Space> value_, grad_;  // (numel)
  std::array<std::int64_t, max_rank> shape_{};
  int rank_ = 0;
  Role role_;
  Init init_;
};

template <class P>
struct is_parameter : std::false_type {};
template <class T, class S>
struct is_parameter<Parameter<T, S>> : std::true_type {};

namespace detail {
/// Accepts any parameter: the probe of HasParameters. A named type rather than a lambda:
/// nvcc 13 evaluates a requires-expression that holds a lambda to false.
struct AnyParameterVisitor {
  template <class P>
  void operator()(std::string_view, P&) const {}
};
}  // namespace detail

/// Anything that lists its parameters and sub-modules.
template <class M>
concept HasParameters = requires(M& m, detail::AnyParameterVisitor visit) {
  m.visit_parameters(visit);
};

namespace detail {
inline std::string join(std::string_view prefix, std::string_view name) {
  if (prefix.empty()) return std::string(name);
  std::string s(prefix);
  s += '.';
  s += name;
  return s;
}

template <class Node, class F>
void walk(const std::string& path, Node& node, F& f) {
  if constexpr (is_parameter<std::remove_const_t<Node>>::value) {
    f(std::string_view(path), node);
  } else {
    static_assert(HasParameters<Node>,
                  "hybridseq::core::for_each_parameter: a member passed to visit() is neither a "
                  "Parameter nor a module with visit_parameters()");
    node.visit_parameters([&](std::string_view name, auto& child) { walk(join(path, name), child, f); });
  }
}
}  // namespace detail

/// Calls `f(name, parameter)` for every parameter of `module`, in declaration order.
template <class Module, class F>
void for_each_parameter(Module& module, F&& f, std::string_view prefix = "") {
  detail::walk(std::string(prefix), module, f);
}

namespace detail {
template <class Node, class F>
void walk_modules(const std::string& path, Node& node, F& f) {
  if constexpr (!is_parameter<std::remove_const_t<Node>>::value) {
    f(std::string_view(path), node);
    node.visit_parameters([&](std::string_view name, auto& child) { walk_modules(join(path, name), child, f); });
  }
}
}  // namespace detail

/// Calls `f(name, module)` for `module` and every sub-module below it (pre-order), e.g. to
/// set a runtime option on every layer of one kind or to read every mixer's weights.
template <class Module, class F>
void for_each_module(Module& module, F&& f, std::string_view prefix = "") {
  detail::walk_modules(std::string(prefix), module, f);
}

/// Number of scalar parameters.
template <class Module>
std::int64_t parameter_count(Module& module) {
  std::int64_t n = 0;
  for_each_parameter(module, [&](std::string_view, auto& p) { n += p.numel(); });
  return n;
}

/// Calls `f(name, parameter)` for every parameter of `module` in storage order: the parameters
/// whose role decays (core::decays) first, then the others, each group in declaration order.
/// make_contiguous lays parameters out in this order and the optimizer keeps its moments in it,
/// so that each group is one run of memory with one weight-decay setting.
template <class Module, class F>
void for_each_parameter_in_storage_order(Module& module, F&& f) {
  for (const bool decaying : {true, false})
    for_each_parameter(module, [&](std::string_view name, auto& p) {
      if (decays(p.role()) == decaying) f(name, p);
    });
}

namespace detail {
/// The run being gathered by for_each_run for one scalar type: `n` elements from `first`.
template <class T, class Space>
struct PendingRun {
  T* first = nullptr;
  std::int64_t n = 0;
  template <class F>
  void add(const Tensor<T*, Space>& v, F& f) {
    if (first != nullptr && first + n == v.data()) {
      n += std::int64_t(v.extent(0));
      return;
    }
    flush(f);
    first = v.data();
    n = std::int64_t(v.extent(0));
  }
  template <class F>
  void flush(F& f) {
    if (first != nullptr && n > 0) f(Tensor<T*, Space>(first, n));
    first = nullptr;
    n = 0;
  }
};
}  // namespace detail

/// for_each_run's selectors: which storage of a parameter to walk.
struct Values {
  template <class P>
  auto operator()(P& p) const {
    return p.value();
  }
};
struct Gradients {
  template <class P>
  auto operator()(P& p) const {
    return p.grad();
  }
};

/// Calls `f(run)` over the storage `select(parameter)` (Values or Gradients) of every
/// parameter of `module`, merging parameters that sit back to back in memory into one flat run
/// (a Tensor<T*, Space> without ownership): after make_contiguous one run per scalar type,
/// otherwise one per parameter (always, for a module that names no `execution_space`). Covers
/// every element exactly once, in storage order.
template <class Module, class Select, class F>
void for_each_run(Module& module, const Select& select, F&& f) {
  if constexpr (!requires { typename Module::execution_space; }) {
    for_each_parameter_in_storage_order(module, [&](std::string_view, auto& p) { f(select(p)); });
  } else {
    using Space = typename Module::execution_space;
    detail::PendingRun<float, Space> floats;
    detail::PendingRun<double, Space> doubles;
    for_each_parameter_in_storage_order(module, [&](std::string_view, auto& p) {
      using P = std::remove_reference_t<decltype(p)>;
      static_assert(std::is_same_v<typename P::execution_space, Space>,
                    "hybridseq::core::for_each_run: every parameter must live in the module's execution space");
      if constexpr (std::is_same_v<typename P::scalar_type, float>)
        floats.add(select(p), f);
      else
        doubles.add(select(p), f);
    });
    floats.flush(f);
    doubles.flush(f);
  }
}

/// Moves every parameter of `module` into one allocation for the values and one for the
/// gradients (per scalar type), in storage order (for_each_parameter_in_storage_order), with
/// their current contents; see the file comment for why. Views taken earlier from a
/// parameter's value() or grad() keep the old storage: take them after this call.
template <class Module>
void make_contiguous(Module& module) {
  using Space = typename Module::execution_space;
  const auto place = [&]<class T>(std::type_identity<T>) {
    std::int64_t total = 0, runs = 0;  // of T's gradients, as they lie now
    for_each_run(module, Gradients{}, [&](const auto& run) {
      if constexpr (std::is_same_v<typename std::decay_t<decltype(run)>::value_type, T>) {
        total += std::int64_t(run.extent(0));
        ++runs;
      }
    });
    if (total == 0 || runs == 1) return;  // nothing to move, or already contiguous (a second Trainer)
    const Tensor<T*, Space> values(Kokkos::view_alloc("hybridseq::params", Kokkos::WithoutInitializing), total);
    const Tensor<T*, Space> grads(Kokkos::view_alloc("hybridseq::grads", Kokkos::WithoutInitializing), total);
    advise_huge_pages(values);
    advise_huge_pages(grads);
    std::int64_t at = 0;
    for_each_parameter_in_storage_order(module, [&](std::string_view, auto& p) {
      // An empty parameter keeps its own (empty) storage: a slice would share the next one's
      // address, and gradients are told apart by address (core::GradientListener).
      if constexpr (std::is_same_v<typename std::remove_reference_t<decltype(p)>::scalar_type, T>) {
        if (p.numel() == 0) return;
        const auto slice = std::make_pair(at, at + p.numel());
        p.relocate(Tensor<T*, Space>(values, slice), Tensor<T*, Space>(grads, slice));
        at += p.numel();
      }
    });
  };
  place(std::type_identity<float>{});
  place(std::type_identity<double>{});
}

/// Zeroes every gradient (backward accumulates, the caller zeroes).
template <class Module>
void zero_grad(Module& module) {
  for_each_run(module, Gradients{}, [](const auto& run) { zero(run); });
}

/// The GPT-2 / Hugging Face scheme over a whole module, in place of its layers' own: every
/// matrix (a rank-2 weight: projections, an untied head, Mamba's dt projection, GSS's C) and
/// the embedding table drawn from N(0, std), every bias 0; convolution kernels, norm gains
/// and scalars (A_log, D, mixing and temperature scalars) keep their layers' initialisation.
/// Takes effect at the next `initialize`.
template <class Module>
void use_normal_init(Module& module, double std) {
  if (!(std > 0 && std < 1e6)) fail<value_error>("hybridseq::core::use_normal_init", "std is ", std, ", must be > 0");
  for_each_parameter(module, [&](std::string_view, auto& p) {
    if ((p.role() == Role::weight && p.rank() == 2) || p.role() == Role::embedding) p.set_init(Init::normal(std));
    if (p.role() == Role::bias) p.set_init(Init::zeros());
  });
}

/// Initialises every parameter from its `Init`, with a random stream derived from its dotted
/// name: the same seed gives the same parameters on every execution space, and adding a
/// parameter elsewhere in the model does not change the others. Then every module with an
/// `after_initialize()` hook runs it (e.g. PHA's DeepNorm β-init), so no initialisation step
/// can be skipped by calling this one entry point.
template <class Module>
void initialize(Module& module, std::uint64_t seed) {
  for_each_parameter(module, [&](std::string_view name, auto& p) {
    using Space = typename std::remove_reference_t<decltype(p)>::execution_space;
    if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Space::memory_space>::accessible) {
      fill(Space{}, p.value(), p.init(), seed, stream_of(name));
    } else {
      // Drawn on the host and copied: a GPU's log and cos round differently from the host's,
      // and a model must start from the same values on every execution space.
      auto host = Kokkos::create_mirror_view(p.value());
      fill(Kokkos::DefaultHostExecutionSpace{}, host, p.init(), seed, stream_of(name));
      Kokkos::deep_copy(p.value(), host);
    }
  });
  for_each_module(module, [](std::string_view, auto& m) {
    if constexpr (requires { m.after_initialize(); }) m.after_initialize();
  });
}

}  // namespace hybridseq::core

namespace hybridseq::core {

/// Refuses (value_error naming `api`) parameters that cannot give meaningful outputs: all of
/// them exactly zero — a model constructed but never initialised nor loaded (initialisers
/// never give every parameter 0: norm gains start at 1) — or any NaN or ±inf, naming the first
/// such parameter and element. The stateful entry points (Trainer, Session) call it once when
/// they are made; it copies each parameter to the host.
template <class Module>
void check_parameters_usable(const Module& module, std::string_view api) {
  bool any_nonzero = false;
  std::int64_t count = 0;
  // The visitor has no const form (it also serves writers); this walk only reads.
  for_each_parameter(const_cast<Module&>(module), [&](std::string_view name, auto& p) {
    const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, p.value());
    for (std::size_t i = 0; i < host.extent(0); ++i) {
      const double v = double(host(i));
      if (!std::isfinite(v))
        fail<value_error>(api, "parameter '", name, "' element ", i, " is ", v,
                          " (non-finite weights give garbage outputs; reload or re-initialise the model)");
      any_nonzero = any_nonzero || v != 0;
    }
    count += std::int64_t(host.extent(0));
  });
  if (count > 0 && !any_nonzero)
    fail<value_error>(api, "all ", count,
                      " parameters are 0: the model was never initialised (call core::initialize or "
                      "io::load_parameters first)");
}

}  // namespace hybridseq::core
