#pragma once
/// \file
/// Saving and loading a module's parameters as safetensors, through the parameter visitor.
///
/// Tensor names are the parameters' dotted names (`blocks.3.attn.wqkv`), optionally under a
/// prefix. Loading is strict by default: a parameter missing from the file, a tensor in the
/// file that the model does not have, or a shape that differs are errors that name the file,
/// the tensor and both shapes.
///
/// Loading is all or nothing: the whole file is checked against the whole model and every
/// value is read and converted on the host first (`stage_parameters`); only then are the
/// parameters written. A refused load leaves the model exactly as it was.

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
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
  std::string prefix{};         // tensor name = prefix + dotted parameter name
  bool allow_extra = false;     // tolerate tensors under `prefix` that the model does not have
  bool exact_dtype = false;     // the stored dtype must be the parameter's own (no conversion)
  bool require_finite = false;  // refuse a NaN or ±inf value (the file is then corrupt or diverged)
};

/// Writes decided by a load and held back until everything has been checked: `apply` runs
/// them in order. They cannot fail (host vectors of the right size into existing Views).
class StagedWrites {
 public:
  void add(std::function<void()> write) { writes_.push_back(std::move(write)); }
  void apply() {
    for (auto& w : writes_) w();
    writes_.clear();
  }
  std::size_t size() const { return writes_.size(); }

 private:
  std::vector<std::function<void()>> writes_;
};

namespace detail {
/// io_error unless every value of tensor `key` is finite.
template <class T>
void check_finite(std::string_view api, const SafetensorsFile& file, const std::string& key, const std::vector<T>& v) {
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      fail<io_error>(api, file.path().string(), ": tensor '", key, "' element ", i, " is ", v[i],
                     " (non-finite values refused)");
}
}  // namespace detail

/// Checks `file` against every parameter of `module` and reads every value, changing
/// nothing; `apply()` on the result then writes them. Throws io_error naming the API, the file,
/// the tensor and the values that disagree.
template <class Module>
StagedWrites stage_parameters(Module& module, const SafetensorsFile& file, const LoadOptions& options = {},
                              std::string_view api = "hybridseq::io::load_parameters") {
  StagedWrites staged;
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
    if (options.exact_dtype && info.dtype != io::detail::native_dtype<T>())
      fail<io_error>(api, file.path().string(), ": tensor '", key, "' is stored as ", info.dtype,
                     " but the model's parameter is ", io::detail::native_dtype<T>());
    std::vector<T> data = file.template read<T>(key);
    if (options.require_finite) detail::check_finite(api, file, key, data);
    staged.add([view = p.value(), data = std::move(data)] {
      Kokkos::deep_copy(view, Kokkos::View<const T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                                  data.data(), data.size()));
    });
  });
  if (options.allow_extra) return staged;
  std::string extra;
  int n_extra = 0;
  for (const auto& t : file.tensors()) {
    if (t.name.rfind(options.prefix, 0) != 0 || expected.count(t.name)) continue;
    if (n_extra++ < 5) extra += (extra.empty() ? "'" : ", '") + t.name + "'";
  }
  if (n_extra)
    fail<io_error>(api, file.path().string(), " has ", n_extra, " tensor(s) the model does not have: ", extra,
                   n_extra > 5 ? ", ..." : "");
  return staged;
}

/// Loads every parameter of `module` from `file` (converting dtypes unless `exact_dtype`),
/// strictly by default, all or nothing.
template <class Module>
void load_parameters(Module& module, const SafetensorsFile& file, const LoadOptions& options = {}) {
  stage_parameters(module, file, options).apply();
}

/// Convenience: open `path` and load strictly.
template <class Module>
void load_parameters(Module& module, const std::filesystem::path& path, const LoadOptions& options = {}) {
  load_parameters(module, SafetensorsFile::open(path), options);
}

}  // namespace hybridseq::io
