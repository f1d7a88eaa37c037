// Weights files against a model: missing, extra and mis-shaped tensors are refused clearly.
#include <catch2/catch.hpp>

#include <filesystem>
#include <vector>

#include <hybridseq/io/parameters.hpp>
#include <hybridseq/layers.hpp>

using namespace hybridseq;
using Catch::Matchers::Contains;

namespace {
using S = Kokkos::Serial;
using Ffn = layers::Ffn<layers::FfnShape{4, 6}, float, S>;

std::filesystem::path temp(const char* name) {
  return std::filesystem::temp_directory_path() / name;
}
}  // namespace

TEST_CASE("load_parameters refuses a parameter missing from the file", "[io][host]") {
  Ffn ffn;
  io::SafetensorsWriter w;
  std::vector<float> w1(24), b1(6), w2(24);
  w.add<float>("fc1.weight", w1, {6, 4});
  w.add<float>("fc1.bias", b1, {6});
  w.add<float>("fc2.weight", w2, {4, 6});
  const auto path = temp("hybridseq_missing.safetensors");
  w.write(path);
  REQUIRE_THROWS_AS(io::load_parameters(ffn, path), io_error);
  REQUIRE_THROWS_WITH(io::load_parameters(ffn, path), Contains("hybridseq::io::load_parameters") &&
                                                          Contains("has no tensor 'fc2.bias'") &&
                                                          Contains("shape (4)"));
  std::filesystem::remove(path);
}

TEST_CASE("load_parameters refuses tensors the model does not have, unless allowed", "[io][host]") {
  Ffn ffn;
  core::initialize(ffn, 5);
  io::SafetensorsWriter w;
  io::add_parameters(w, ffn);
  std::vector<float> extra(3);
  w.add<float>("fc3.weight", extra, {3});
  const auto path = temp("hybridseq_extra.safetensors");
  w.write(path);
  REQUIRE_THROWS_WITH(io::load_parameters(ffn, path),
                      Contains("has 1 tensor(s) the model does not have: 'fc3.weight'"));
  REQUIRE_NOTHROW(io::load_parameters(ffn, path, {.prefix = "", .allow_extra = true}));
  std::filesystem::remove(path);
}

TEST_CASE("load_parameters refuses a shape mismatch with both shapes", "[io][host]") {
  layers::Ffn<layers::FfnShape{4, 8}, float, S> wider;
  const auto path = temp("hybridseq_shape.safetensors");
  io::save_parameters(wider, path);
  Ffn ffn;
  REQUIRE_THROWS_WITH(io::load_parameters(ffn, path),
                      Contains("tensor 'fc1.weight' has shape (8,4) but the model's parameter has shape (6,4)"));
  std::filesystem::remove(path);
}

TEST_CASE("save/load converts dtypes and keeps metadata", "[io][host]") {
  Ffn a, b;
  core::initialize(a, 1);
  const auto path = temp("hybridseq_f64.safetensors");
  io::save_parameters<double>(a, path, {{"model", "ffn"}});
  const auto file = io::SafetensorsFile::open(path);
  REQUIRE(file.metadata().at("model") == "ffn");
  REQUIRE(file.info("fc1.weight").dtype == io::Dtype::F64);
  io::load_parameters(b, file);
  std::vector<float> va, vb;
  core::for_each_parameter(a, [&](std::string_view, auto& p) {
    for (std::size_t i = 0; i < p.value().extent(0); ++i) va.push_back(p.value()(i));
  });
  core::for_each_parameter(b, [&](std::string_view, auto& p) {
    for (std::size_t i = 0; i < p.value().extent(0); ++i) vb.push_back(p.value()(i));
  });
  REQUIRE(va == vb);
  std::filesystem::remove(path);
}
