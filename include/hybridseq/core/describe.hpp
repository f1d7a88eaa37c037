#pragma once
/// \file
/// `describe(model)`: the module tree as text, one line per module (PyTorch's module repr,
/// dlib's net printing), walked by `for_each_module`:
///
///   Pha  params=2470
///     embed  Embedding  weight (11, 8)  params=88
///     body  Repeat  params=2286
///       body.0  DeepNorm  params=1143
///         body.0.block  ParallelBlock  params=1127
///         ...
///           body.0.block.mixer  SoftplusMixer  logits (3)  params=3
///         body.0.norm  LayerNorm  weight (8)  bias (8)  params=16
///       ...
///   total  params=2470
///
/// Each line: indentation by depth, the dotted name, the module's kind, the shapes of its own
/// parameters and the parameter count of the module with everything below it. The kind is
/// the type's name without namespaces and template arguments (`hybridseq::compose::
/// ParallelBlock<...>` → `ParallelBlock`; a compose::Named child shows the layer it names),
/// unless the module names itself with a `describe_name()` function or a
/// `static constexpr std::string_view kind`.
///
/// `describe(workspace)` lists the bytes each allocation label held at the workspace's peak.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

#include "parameter.hpp"
#include "workspace.hpp"

#if __has_include(<cxxabi.h>)
#include <cxxabi.h>
#define HYBRIDSEQ_HAS_CXXABI 1
#else
#define HYBRIDSEQ_HAS_CXXABI 0
#endif

namespace hybridseq::core {

namespace detail {

/// The readable name of a type (`typeid(T).name()` demangled where the ABI allows).
inline std::string demangle(const char* mangled) {
#if HYBRIDSEQ_HAS_CXXABI
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  if (status == 0 && out) return out.get();
#endif
  return mangled;
}

/// `ns::Outer<A, B>::Inner<C>` → `Inner`: template arguments dropped, then namespaces and
/// enclosing classes. MSVC's "class " / "struct " prefixes go too.
inline std::string bare_type_name(std::string_view full) {
  std::string flat;
  int depth = 0;
  for (char c : full) {
    if (c == '<')
      ++depth;
    else if (c == '>')
      depth = std::max(0, depth - 1);
    else if (depth == 0)
      flat += c;
  }
  for (std::string_view prefix : {"class ", "struct "})
    if (std::string_view(flat).starts_with(prefix)) flat.erase(0, prefix.size());
  const auto colon = flat.rfind("::");
  if (colon != std::string::npos) flat.erase(0, colon + 2);
  while (!flat.empty() && flat.back() == ' ') flat.pop_back();
  return flat;
}

/// The layer a naming wrapper `W<name, Layer> : Layer` (with a static `child_name`, as
/// compose::Named) stands for; void for any other type.
template <class M>
struct named_layer {
  using type = void;
};
template <template <auto, class> class W, auto N, class L>
struct named_layer<W<N, L>> {
  using type = L;
};

}  // namespace detail

/// What `describe` calls a module of type M: its `describe_name()`, its static `kind`, the
/// kind of the layer a naming wrapper holds, or its type's bare name.
template <class M>
std::string module_kind(const M& m) {
  using Named = typename detail::named_layer<M>::type;
  if constexpr (requires {
                  { m.describe_name() } -> std::convertible_to<std::string_view>;
                })
    return std::string(std::string_view(m.describe_name()));
  else if constexpr (requires {
                       { M::kind } -> std::convertible_to<std::string_view>;
                     })
    return std::string(std::string_view(M::kind));
  else if constexpr (requires { M::child_name; } && std::derived_from<M, Named>)
    return module_kind(static_cast<const Named&>(m));
  else
    return detail::bare_type_name(detail::demangle(typeid(M).name()));
}

/// One module of the tree, as `describe` prints it.
struct ModuleSummary {
  std::string name;  // dotted path from the root; empty for the root
  std::string kind;
  int depth = 0;  // 0 for the root
  /// The module's own parameters (not its children's): local name and shape.
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> parameters;
  std::int64_t parameter_count = 0;  // its own and all its descendants'
};

/// The tree in pre-order (a module before its children), one summary per module.
template <HasParameters Module>
std::vector<ModuleSummary> summarize(Module& module) {
  std::vector<ModuleSummary> out;
  std::vector<std::string> ancestors;  // paths of the modules enclosing the current one
  for_each_module(module, [&](std::string_view path, auto& m) {
    const auto encloses = [&](const std::string& a) {
      return a.empty() || (path.size() > a.size() && path.starts_with(a) && path[a.size()] == '.');
    };
    while (!ancestors.empty() && !encloses(ancestors.back())) ancestors.pop_back();
    ModuleSummary s;
    s.name = std::string(path);
    s.kind = module_kind(m);
    s.depth = static_cast<int>(ancestors.size());
    m.visit_parameters([&](std::string_view name, auto& child) {
      if constexpr (is_parameter<std::remove_const_t<std::remove_reference_t<decltype(child)>>>::value) {
        std::vector<std::int64_t> shape;
        for (int r = 0; r < child.rank(); ++r) shape.push_back(child.extent(r));
        s.parameters.emplace_back(std::string(name), std::move(shape));
      }
    });
    s.parameter_count = parameter_count(m);
    out.push_back(std::move(s));
    ancestors.emplace_back(path);
  });
  return out;
}

/// Prints the tree (format in the file comment) and a final `total  params=N` line.
template <HasParameters Module>
void describe(std::ostream& os, Module& module) {
  const auto tree = summarize(module);
  for (const auto& s : tree) {
    os << std::string(2 * static_cast<std::size_t>(s.depth), ' ');
    if (!s.name.empty()) os << s.name << "  ";
    os << s.kind;
    for (const auto& [name, shape] : s.parameters) {
      os << "  " << name << " (";
      for (std::size_t r = 0; r < shape.size(); ++r) os << (r ? ", " : "") << shape[r];
      os << ')';
    }
    os << "  params=" << s.parameter_count << '\n';
  }
  os << "total  params=" << (tree.empty() ? 0 : tree.front().parameter_count) << '\n';
}

template <HasParameters Module>
std::string describe(Module& module) {
  std::ostringstream os;
  describe(os, module);
  return os.str();
}

/// The workspace's peak and the bytes each label held at it, largest first:
///   peak  bytes=4096
///     attention.qkv  bytes=2048
template <ExecutionSpace Space>
void describe(std::ostream& os, const Workspace<Space>& ws) {
  const auto by_label = ws.peak_by_label();
  std::vector<std::pair<std::string, std::size_t>> rows(by_label.begin(), by_label.end());
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  os << "peak  bytes=" << ws.peak_bytes() << '\n';
  for (const auto& [label, bytes] : rows) os << "  " << label << "  bytes=" << bytes << '\n';
}

template <ExecutionSpace Space>
std::string describe(const Workspace<Space>& ws) {
  std::ostringstream os;
  describe(os, ws);
  return os.str();
}

}  // namespace hybridseq::core
