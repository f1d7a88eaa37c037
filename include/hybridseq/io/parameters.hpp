#pragma once
/// \file
/// Saving and loading a module's parameters as safetensors, through the parameter visitor.
///
/// Tensor names are the parameters' dotted names (`blocks.3.attn.wqkv`), optionally under a
/// prefix. Loading is strict by default: a parameter missing from the file, a tensor in the
/// file that the model does not have, or a shape that differs are errors that name the file,
/// the tensor and both shapes.

#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "../core/parameter.hpp"
#include "safetensors.hpp"

namespace hybridseq::io {

namespace detail {
inline std::string shape_string(const std::int64_t* shape, int rank) {
  std::string s = "(";
  for (int r = 0; r < rank; ++r) {
    if (r) s += ',';
    s += std::to_string(shape[r]);
  }
  return s + ")";
}
}  // namespace detail

/// Adds every parameter of `module` (host copy, converted to `Stored`) to `writer`.
template <class Stored = float, class Module>
void add_parameters(SafetensorsWriter& writer, Module& module, const std::string& prefix = "") {
  core::for_each_parameter(module, [&](std::string_view name, auto& p) {
    auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, p.value());
    std::vector<Stored> data(host.data(), host.data() + host.extent(0));
    const auto shape = p.shape();
    writer.template add<Stored>(prefix + std::string(name), std::span<const Stored>(data),
                                std::vector<std::int64_t>(shape.begin(), shape.begin() + p.rank()));
  });
}

/// Writes `module`'s parameters to a safetensors file.
template <class Stored = float, class Module>
void save_parameters(Module& module, const std::filesystem::path& path,
                     const std::map<std::string, std::string>& metadata = {}) {
  SafetensorsWriter writer;
  for (const auto& [k, v] : metadata) writer.set_metadata(k, v);
  add_parameters<Stored>(writer, module);
  writer.write(path);
}

struct LoadOptions {
  std::string prefix;        // tensor name = prefix + dotted parameter name
  bool allow_extra = false;  // tolerate tensors under `prefix` that the model does not have
};

/// Loads every parameter of `module` from `file` (converting dtypes), strictly by default.
template <class Module>
void load_parameters(Module& module, const SafetensorsFile& file, const LoadOptions& options = {}) {
  constexpr const char* api = "hybridseq::io::load_parameters";
  std::set<std::string> expected;
  core::for_each_parameter(module, [&](std::string_view name, auto& p) {
    using P = std::remove_reference_t<decltype(p)>;
    using T = typename P::scalar_type;
    const std::string key = options.prefix + std::string(name);
    expected.insert(key);
    if (!file.contains(key))
      fail<io_error>(api, file.path().string(), " has no tensor '", key, "' for parameter of shape ",
                     detail::shape_string(p.shape().data(), p.rank()));
    const auto& info = file.info(key);
    const auto model_shape = p.shape();
    const bool same = static_cast<int>(info.shape.size()) == p.rank() &&
                      std::equal(info.shape.begin(), info.shape.end(), model_shape.begin());
    if (!same)
      fail<io_error>(api, file.path().string(), ": tensor '", key, "' has shape ",
                     detail::shape_string(info.shape.data(), static_cast<int>(info.shape.size())),
                     " but the model's parameter has shape ", detail::shape_string(model_shape.data(), p.rank()));
    std::vector<T> data = file.template read<T>(key);
    Kokkos::View<const T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> host(data.data(), data.size());
    Kokkos::deep_copy(p.value(), host);
  });
  if (options.allow_extra) return;
  std::string extra;
  int n_extra = 0;
  for (const auto& t : file.tensors()) {
    if (t.name.rfind(options.prefix, 0) != 0 || expected.count(t.name)) continue;
    if (n_extra++ < 5) extra += (extra.empty() ? "'" : ", '") + t.name + "'";
  }
  if (n_extra)
    fail<io_error>(api, file.path().string(), " has ", n_extra, " tensor(s) the model does not have: ", extra,
                   n_extra > 5 ? ", ..." : "");
}

/// Convenience: open `path` and load strictly.
template <class Module>
void load_parameters(Module& module, const std::filesystem::path& path, const LoadOptions& options = {}) {
  load_parameters(module, SafetensorsFile::open(path), options);
}

}  // namespace hybridseq::io
