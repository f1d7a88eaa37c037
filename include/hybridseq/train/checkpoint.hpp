#pragma once
/// \file
/// Training checkpoints in one safetensors file: parameters (`params/<name>`, in the model's
/// own precision so a resumed run is bit-identical), AdamW moments (`adamw.m/<name>`,
/// `adamw.v/<name>`, fp32), and metadata — the step, the optimizer's step count, the data
/// stream's seed (the data "RNG state": batches are a pure function of (seed, step)), and any
/// caller entries (model name, task). Loading is strict: a missing, extra or mis-shaped tensor
/// or a checkpoint of another model is an io_error naming the file and the tensor.

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "../core/parameter.hpp"
#include "../io/parameters.hpp"
#include "../io/safetensors.hpp"
#include "adamw.hpp"

namespace hybridseq::train {

struct CheckpointInfo {
  std::int64_t step = 0;                          // optimizer steps completed
  std::uint64_t data_seed = 0;                    // the batch stream: batch k = f(data_seed, k)
  std::map<std::string, std::string> metadata{};  // free-form (model, task, ...)
};

template <class Model, class Optimizer>
void save_checkpoint(const std::filesystem::path& path, Model& model, const Optimizer& optimizer,
                     const CheckpointInfo& info) {
  io::SafetensorsWriter writer;
  for (const auto& [k, v] : info.metadata) writer.set_metadata(k, v);
  writer.set_metadata("hybridseq.checkpoint", "1");
  writer.set_metadata("step", std::to_string(info.step));
  writer.set_metadata("data_seed", std::to_string(info.data_seed));
  writer.set_metadata("adamw_step", std::to_string(optimizer.step_count()));
  io::add_parameters<typename Model::scalar_type>(writer, model, "params/");
  optimizer.for_each_moment([&](std::string_view name, const auto& m, const auto& v) {
    for (auto [prefix, view] : {std::pair{"adamw.m/", m}, std::pair{"adamw.v/", v}}) {
      auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, view);
      writer.add<float>(prefix + std::string(name), std::span<const float>(host.data(), host.extent(0)),
                        {std::int64_t(host.extent(0))});
    }
  });
  // Write to a temporary name first: an interrupted save never leaves a torn checkpoint.
  const auto tmp = std::filesystem::path(path.string() + ".tmp");
  writer.write(tmp);
  std::filesystem::rename(tmp, path);
}

/// Restores parameters and optimizer state; returns the step and data seed to resume from.
template <class Model, class Optimizer>
CheckpointInfo load_checkpoint(const std::filesystem::path& path, Model& model, Optimizer& optimizer) {
  constexpr const char* api = "hybridseq::train::load_checkpoint";
  const auto file = io::SafetensorsFile::open(path);
  const auto& meta = file.metadata();
  auto number = [&](const char* key) -> std::string {
    const auto it = meta.find(key);
    if (it == meta.end())
      fail<io_error>(api, path.string(), " is not a hybridseq checkpoint (no '", key, "' metadata)");
    return it->second;
  };
  if (number("hybridseq.checkpoint") != "1")
    fail<io_error>(api, path.string(), ": unsupported checkpoint version '", number("hybridseq.checkpoint"), "'");
  CheckpointInfo info;
  info.metadata = meta;
  try {
    info.step = std::stoll(number("step"));
    info.data_seed = std::stoull(number("data_seed"));
    optimizer.set_step_count(std::stoll(number("adamw_step")));
  } catch (const std::logic_error&) {
    fail<io_error>(api, path.string(), ": malformed step/seed metadata");
  }
  // Parameters (strict: every name, every shape), then the moments, also by name.
  io::load_parameters(model, file, {.prefix = "params/", .allow_extra = false});
  std::size_t moments = 0;
  optimizer.for_each_moment([&](std::string_view name, const auto& m, const auto& v) {
    for (auto [prefix, view] : {std::pair{"adamw.m/", m}, std::pair{"adamw.v/", v}}) {
      const std::string key = prefix + std::string(name);
      if (!file.contains(key)) fail<io_error>(api, path.string(), " has no optimizer tensor '", key, "'");
      const auto data = file.read<float>(key);
      if (data.size() != view.extent(0))
        fail<io_error>(api, path.string(), ": '", key, "' holds ", data.size(), " values, the parameter has ",
                       view.extent(0));
      Kokkos::deep_copy(view, Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                                  data.data(), data.size()));
      ++moments;
    }
  });
  std::size_t tensors = 0;
  for (const auto& t : file.tensors()) tensors += t.name.rfind("params/", 0) == 0 ? 0 : 1;
  if (tensors != moments)
    fail<io_error>(api, path.string(), " has ", tensors, " optimizer tensors, the model's optimizer has ", moments,
                   " (a checkpoint of a different model?)");
  return info;
}

}  // namespace hybridseq::train
