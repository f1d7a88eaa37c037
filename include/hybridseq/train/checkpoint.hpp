#pragma once
/// \file
/// Training checkpoints in one safetensors file: parameters (`params/<name>`, in the model's
/// own precision so a resumed run is bit-identical), AdamW moments (`adamw.m/<name>`,
/// `adamw.v/<name>`, fp32), and metadata — the step, the optimizer's step count, the data
/// stream's seed (the data "RNG state": batches are a pure function of (seed, step)), and any
/// caller entries (model name, task).
///
/// Checkpoints are durable and checked: written through a temporary file, fsync and rename
/// (io::SafetensorsWriter::write), with a CRC-32 over the tensors and metadata that every load
/// verifies. Loading is strict and all or nothing: the whole file is checked against the whole
/// model and optimizer first (every name, shape and dtype, non-negative steps, a well-formed
/// seed, finite values, the checksum), and only then is anything written; a refused load leaves
/// the model and the optimizer exactly as they were.

#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include "../core/error.hpp"
#include "../core/parameter.hpp"
#include "../io/parameters.hpp"
#include "../io/safetensors.hpp"
#include "adamw.hpp"

namespace hybridseq::train {

/// The checkpoint format this code writes and reads ("2": with a checksum).
inline constexpr std::string_view checkpoint_version = "2";

struct CheckpointInfo {
  std::int64_t step = 0;                          // optimizer steps completed
  std::uint64_t data_seed = 0;                    // the batch stream: batch k = f(data_seed, k)
  std::map<std::string, std::string> metadata{};  // free-form (model, task, ...)
};

template <class Model, class Optimizer>
void save_checkpoint(const std::filesystem::path& path, Model& model, const Optimizer& optimizer,
                     const CheckpointInfo& info) {
  if (info.step < 0)
    fail<value_error>("hybridseq::train::save_checkpoint", path.string(), ": step must be >= 0, got ", info.step);
  io::SafetensorsWriter writer;
  for (const auto& [k, v] : info.metadata) writer.set_metadata(k, v);
  writer.set_metadata("hybridseq.checkpoint", std::string(checkpoint_version));
  writer.set_metadata("step", std::to_string(info.step));
  writer.set_metadata("data_seed", std::to_string(info.data_seed));
  writer.set_metadata("adamw_step", std::to_string(optimizer.step_count()));
  writer.add_checksum();
  io::add_parameters<typename Model::scalar_type>(writer, model, "params/");
  optimizer.for_each_moment([&](std::string_view name, const auto& m, const auto& v) {
    for (auto [prefix, view] : {std::pair{"adamw.m/", m}, std::pair{"adamw.v/", v}}) {
      auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, view);
      writer.add<float>(prefix + std::string(name), std::span<const float>(host.data(), host.extent(0)),
                        {std::int64_t(host.extent(0))});
    }
  });
  writer.write(path);  // temporary file, fsync, rename, fsync of the directory
}

/// A checkpoint checked against a model and its optimizer and read, not yet applied.
struct StagedCheckpoint {
  CheckpointInfo info;
  io::StagedWrites writes;  // parameters, moments and the optimizer's step count
  void apply() { writes.apply(); }
};

/// Checks the checkpoint at `path` against `model` and `optimizer` and reads it whole,
/// changing nothing (see the file comment); `apply()` on the result restores it.
template <class Model, class Optimizer>
StagedCheckpoint stage_checkpoint(const std::filesystem::path& path, Model& model, Optimizer& optimizer,
                                  std::string_view api = "hybridseq::train::load_checkpoint") {
  const auto file = io::SafetensorsFile::open(path);  // verifies the checksum when there is one
  const auto& meta = file.metadata();
  auto entry = [&](std::string_view key) -> const std::string& {
    const auto it = meta.find(std::string(key));
    if (it == meta.end())
      fail<io_error>(api, path.string(), " is not a hybridseq checkpoint (no '", key, "' metadata)");
    return it->second;
  };
  if (const auto& version = entry("hybridseq.checkpoint"); version != checkpoint_version)
    fail<io_error>(api, path.string(), ": unsupported checkpoint version '", version, "' (this build reads version ",
                   checkpoint_version, ")");
  if (!file.has_checksum()) fail<io_error>(api, path.string(), " has no '", io::checksum_key, "' checksum metadata");
  // Whole decimal numbers only: std::stoll would take "12abc", std::stoull "-1".
  auto integer = [&]<class I>(std::string_view key, I) {
    const std::string& text = entry(key);
    I value{};
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || end != text.data() + text.size() || text.empty())
      fail<io_error>(api, path.string(), ": metadata '", key, "' is '", text, "', not a whole number in [",
                     std::numeric_limits<I>::min(), ", ", std::numeric_limits<I>::max(), "]");
    if constexpr (std::is_signed_v<I>)
      if (value < 0) fail<io_error>(api, path.string(), ": metadata '", key, "' is ", value, ", must be >= 0");
    return value;
  };
  StagedCheckpoint staged;
  staged.info.metadata = meta;
  staged.info.step = integer("step", std::int64_t{});
  staged.info.data_seed = integer("data_seed", std::uint64_t{});
  const std::int64_t adamw_step = integer("adamw_step", std::int64_t{});

  // Parameters (strict: every name, every shape, the model's own dtype, finite values).
  staged.writes = io::stage_parameters(
      model, file, {.prefix = "params/", .allow_extra = false, .exact_dtype = true, .require_finite = true}, api);
  // The moments, also by name.
  std::size_t moments = 0;
  optimizer.for_each_moment([&](std::string_view name, const auto& m, const auto& v) {
    for (auto [prefix, view] : {std::pair{"adamw.m/", m}, std::pair{"adamw.v/", v}}) {
      const std::string key = prefix + std::string(name);
      if (!file.contains(key)) fail<io_error>(api, path.string(), " has no optimizer tensor '", key, "'");
      const auto& info = file.info(key);
      if (info.dtype != io::Dtype::F32 || info.shape.size() != 1 || std::size_t(info.numel()) != view.extent(0))
        fail<io_error>(api, path.string(), ": '", key, "' is ", info.dtype, " ", io::detail::format_shape(info.shape),
                       ", the optimizer's moment is F32 (", view.extent(0), ")");
      auto data = file.read<float>(key);
      io::detail::check_finite(api, file, key, data);
      staged.writes.add([view, data = std::move(data)] {
        Kokkos::deep_copy(view, Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                                    data.data(), data.size()));
      });
      ++moments;
    }
  });
  std::size_t tensors = 0;
  for (const auto& t : file.tensors()) tensors += t.name.rfind("params/", 0) == 0 ? 0 : 1;
  if (tensors != moments)
    fail<io_error>(api, path.string(), " has ", tensors, " optimizer tensors, the model's optimizer has ", moments,
                   " (a checkpoint of a different model?)");
  staged.writes.add([&optimizer, adamw_step] { optimizer.set_step_count(adamw_step); });
  return staged;
}

/// Restores parameters and optimizer state, all or nothing; returns the step and data seed to
/// resume from.
template <class Model, class Optimizer>
CheckpointInfo load_checkpoint(const std::filesystem::path& path, Model& model, Optimizer& optimizer) {
  auto staged = stage_checkpoint(path, model, optimizer);
  staged.apply();
  return staged.info;
}

}  // namespace hybridseq::train
