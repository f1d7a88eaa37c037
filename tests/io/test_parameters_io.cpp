// Weights files against a model: missing, extra and mis-shaped tensors are refused clearly.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
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

namespace {
/// Every parameter value of `m`, in visit order: compared before and after a refused load.
template <class Module>
std::vector<float> values_of(Module& m) {
  std::vector<float> out;
  core::for_each_parameter(m, [&](std::string_view, auto& p) {
    for (std::size_t i = 0; i < p.value().extent(0); ++i) out.push_back(p.value()(i));
  });
  return out;
}
}  // namespace

TEST_CASE("load_parameters is all or nothing: a refusal at the last tensor leaves the model unchanged", "[io][host]") {
  Ffn ffn, donor;
  core::initialize(ffn, 3);
  core::initialize(donor, 4);
  const auto before = values_of(ffn);
  REQUIRE(before != values_of(donor));
  // Every tensor right (different values) except the last one visited, fc2.bias.
  auto file_with_last = [&](auto&& add_last) {
    io::SafetensorsWriter w;
    core::for_each_parameter(donor, [&](std::string_view name, auto& p) {
      if (name == "fc2.bias") return;
      std::vector<float> v(p.value().data(), p.value().data() + p.value().extent(0));
      const auto shape = p.shape();
      w.add<float>(std::string(name), v, std::vector<std::int64_t>(shape.begin(), shape.begin() + p.rank()));
    });
    add_last(w);
    return io::SafetensorsFile::from_bytes(w.serialize(), "donor");
  };
  const auto wrong_shape =
      file_with_last([](auto& w) { w.template add<float>("fc2.bias", std::vector<float>(5), {5}); });
  REQUIRE_THROWS_WITH(io::load_parameters(ffn, wrong_shape),
                      Contains("hybridseq::io::load_parameters") && Contains("tensor 'fc2.bias' has shape (5)"));
  CHECK(values_of(ffn) == before);
  const auto integers =
      file_with_last([](auto& w) { w.template add<std::int32_t>("fc2.bias", std::vector<std::int32_t>(4), {4}); });
  REQUIRE_THROWS_WITH(io::load_parameters(ffn, integers), Contains("dtype I32, which cannot be read as float"));
  CHECK(values_of(ffn) == before);
  const auto nan = file_with_last([](auto& w) {
    w.template add<float>("fc2.bias", std::vector<float>{0, std::numeric_limits<float>::quiet_NaN(), 0, 0}, {4});
  });
  REQUIRE_THROWS_AS(io::load_parameters(ffn, nan, {.require_finite = true}), io_error);
  REQUIRE_THROWS_WITH(io::load_parameters(ffn, nan, {.require_finite = true}),
                      Contains("tensor 'fc2.bias' element 1 is nan (non-finite values refused)"));
  CHECK(values_of(ffn) == before);
  const auto wide = file_with_last([](auto& w) { w.template add<double>("fc2.bias", std::vector<double>(4), {4}); });
  REQUIRE_THROWS_WITH(io::load_parameters(ffn, wide, {.exact_dtype = true}),
                      Contains("tensor 'fc2.bias' is stored as F64 but the model's parameter is F32"));
  CHECK(values_of(ffn) == before);
  // Opt-in: without require_finite a NaN loads (the documented default, as in PyTorch).
  io::load_parameters(ffn, nan);
  CHECK(values_of(ffn) != before);
}
