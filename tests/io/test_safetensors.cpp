// Tests for include/hybridseq/io/safetensors.hpp: round trips, half-precision conversions,
// interoperability with the Python safetensors library (both directions, via committed
// goldens from tests/reference/golden_io.py) and every refusal of a malformed file.

#include <catch2/catch.hpp>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <hybridseq/io/safetensors.hpp>

#include "io/temp_dir.hpp"
#include "support/golden.hpp"
#include <unistd.h>

namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using namespace hybridseq::io;

/// This file's temp directories: hybridseq_io_test_<random>_<n>.
struct TempDir : hybridseq::testing::TempDir {
  TempDir() : hybridseq::testing::TempDir("hybridseq_io_test_") {}
};

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  REQUIRE(out);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out);
}

/// The 8-byte little-endian length prefix.
std::string length_prefix(std::uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out;
}

/// A safetensors file with the given header text and `data_bytes` zero bytes of data.
std::string make_file(const std::string& header, std::size_t data_bytes) {
  return length_prefix(header.size()) + header + std::string(data_bytes, '\0');
}

/// Writes `bytes` to a file in `dir` and returns the exception message SafetensorsFile::open
/// gives for it, after checking that it is an io_error naming the API and the path.
std::string open_error(const TempDir& dir, const std::string& bytes) {
  const fs::path p = dir.file("bad.safetensors");
  write_bytes(p, bytes);
  try {
    (void)SafetensorsFile::open(p);
  } catch (const hybridseq::io_error& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Contains("hybridseq::io::read_safetensors"));
    CHECK_THAT(msg, Contains(p.string()));
    return msg;
  }
  FAIL("SafetensorsFile::open accepted a malformed file");
  return {};
}

/// The same for the file make_file(header, data_bytes).
std::string open_error(const TempDir& dir, const std::string& header, std::size_t data_bytes) {
  return open_error(dir, make_file(header, data_bytes));
}

/// A header entry, its fields' JSON text as given: "name":{"dtype":…,"shape":…,"data_offsets":…}.
std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + R"(":{"dtype":)" + dtype + R"(,"shape":)" + shape + R"(,"data_offsets":)" + offsets + "}";
}

/// A header of these entries, in order.
std::string header_of(std::initializer_list<std::string> entries) {
  std::string out = "{";
  for (const auto& e : entries) out += (out.size() > 1 ? "," : "") + e;
  return out + "}";
}

/// The header of one tensor "t".
std::string one_tensor(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return header_of({entry("t", dtype, shape, offsets)});
}

/// The interop content (also written by tests/reference/golden_io.py): see check_interop.
SafetensorsWriter interop_writer() {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  std::vector<float> a;
  for (int i = 0; i < 6; ++i) a.push_back(0.5f * static_cast<float>(i) - 1.0f);
  w.add<float>("a_f32", a, {2, 3});
  w.add<double>("b_f64", std::vector<double>{1e-300, -2.0, 3.25, 1e300}, {4});
  w.add_as("c_f16", Dtype::F16, std::vector<float>{1.0f, -2.5f, 65504.0f}, {3});
  w.add_as("d_bf16", Dtype::BF16, std::vector<float>{1.0f, -0.15625f, 3.0e38f, 1e-3f}, {2, 2});
  w.add<std::int64_t>("e_i64", std::vector<std::int64_t>{-1, 0, 9007199254740993}, {3});
  w.add<float>("f_scalar", std::vector<float>{7.0f}, {});
  return w;
}

/// Checks that `f` holds exactly the interop content.
void check_interop(const SafetensorsFile& f) {
  CHECK(f.metadata() == std::map<std::string, std::string>{{"format", "pt"}});
  std::vector<std::string> names;
  for (const auto& t : f.tensors()) names.push_back(t.name);
  CHECK(names == std::vector<std::string>{"a_f32", "b_f64", "c_f16", "d_bf16", "e_i64", "f_scalar"});

  CHECK(f.info("a_f32").dtype == Dtype::F32);
  CHECK(f.read<float>("a_f32", {2, 3}) == std::vector<float>{-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f});

  CHECK(f.info("b_f64").dtype == Dtype::F64);
  CHECK(f.read<double>("b_f64", {4}) == std::vector<double>{1e-300, -2.0, 3.25, 1e300});

  CHECK(f.info("c_f16").dtype == Dtype::F16);
  CHECK(f.read<float>("c_f16", {3}) == std::vector<float>{1.0f, -2.5f, 65504.0f});

  // bfloat16 keeps 8 significant bits: 3.0e38 and 1e-3 are rounded (to nearest even).
  CHECK(f.info("d_bf16").dtype == Dtype::BF16);
  const std::vector<std::uint16_t> bf16_bits{0x3F80, 0xBE20, 0x7F62, 0x3A83};
  std::vector<double> bf16_values;
  for (auto b : bf16_bits) bf16_values.push_back(hybridseq::io::bfloat16_to_float(b));
  CHECK(bf16_values[2] == 3.00405527047391e+38);
  CHECK(bf16_values[3] == 0.00099945068359375);
  CHECK(f.read<double>("d_bf16", {2, 2}) == bf16_values);

  // 2^53 + 1 is not a double: the I64 path must never go through floating point.
  CHECK(f.info("e_i64").dtype == Dtype::I64);
  CHECK(f.read<std::int64_t>("e_i64", {3}) == std::vector<std::int64_t>{-1, 0, 9007199254740993});

  CHECK(f.info("f_scalar").shape.empty());
  CHECK(f.info("f_scalar").numel() == 1);
  CHECK(f.read<float>("f_scalar", std::vector<std::int64_t>{}) == std::vector<float>{7.0f});
}

const fs::path golden_dir = hybridseq::testing::golden_dir();

}  // namespace

// -------------------------------------------------------------------------------------------
// Round trips
// -------------------------------------------------------------------------------------------

TEST_CASE("safetensors: every dtype round-trips, including 0-d and empty tensors", "[io][host]") {
  TempDir dir;
  const fs::path p = dir.file("all.safetensors");

  const std::vector<float> f32{1.5f,
                               -0.0f,
                               std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::infinity(),
                               -3.25f};
  const std::vector<double> f64{std::numeric_limits<double>::lowest(), 0.1, std::numeric_limits<double>::denorm_min(),
                                2.0};
  const std::vector<std::int32_t> i32{std::numeric_limits<std::int32_t>::min(), -1, 0,
                                      std::numeric_limits<std::int32_t>::max()};
  const std::vector<std::int64_t> i64{std::numeric_limits<std::int64_t>::min(),
                                      std::numeric_limits<std::int64_t>::max()};
  // Values exactly representable in half / bfloat16, so the round trip is exact.
  const std::vector<float> f16{0.5f, -1024.0f, 0.0009765625f, 6.103515625e-05f};
  const std::vector<float> bf16{1.0f, -2.0f, 0.15625f, 256.0f};

  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  w.set_metadata("note", "quote \" backslash \\ newline \n tab \t unicode \xc3\xa9");
  w.add<float>("f32", f32, {2, 3});
  w.add<double>("f64", f64, {4});
  w.add<std::int32_t>("i32", i32, {2, 1, 2});
  w.add<std::int64_t>("i64", i64, {2});
  w.add_as("f16", Dtype::F16, f16, {2, 2});
  w.add_as("bf16", Dtype::BF16, bf16, {4});
  w.add_as("f32_as_f64", Dtype::F64, f32, {6});
  w.add<double>("scalar", std::vector<double>{42.0}, {});
  w.add<float>("empty", std::vector<float>{}, {0});
  w.add<std::int64_t>("empty_2d", std::vector<std::int64_t>{}, {3, 0});
  w.add<float>("weird \"name\"\\/\x01", std::vector<float>{1.0f}, {1});
  w.write(p);

  const std::string bytes = read_bytes(p);
  // Header padded to a multiple of 8, like the reference writer.
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  CHECK(header_len % 8 == 0);
  CHECK(bytes[8] == '{');

  const SafetensorsFile f = SafetensorsFile::open(p);
  CHECK(f.path() == p);
  CHECK(f.metadata().size() == 2);
  CHECK(f.metadata().at("note") == "quote \" backslash \\ newline \n tab \t unicode \xc3\xa9");
  CHECK(f.tensors().size() == 11);
  CHECK(f.tensors().front().name == "bf16");  // sorted by name

  const auto f32_back = f.read<float>("f32", {2, 3});
  REQUIRE(f32_back.size() == f32.size());
  for (std::size_t i = 0; i < f32.size(); ++i) {
    CHECK(std::bit_cast<std::uint32_t>(f32_back[i]) == std::bit_cast<std::uint32_t>(f32[i]));
  }
  CHECK(f.read<double>("f64", {4}) == f64);
  CHECK(f.read<std::int32_t>("i32", {2, 1, 2}) == i32);
  CHECK(f.read<std::int64_t>("i32") == std::vector<std::int64_t>(i32.begin(), i32.end()));
  CHECK(f.read<std::int64_t>("i64", {2}) == i64);
  CHECK(f.read<float>("f16", {2, 2}) == f16);
  CHECK(f.read<float>("bf16", {4}) == bf16);
  CHECK(f.read<double>("f32_as_f64").size() == 6);
  CHECK(f.read<double>("f32_as_f64")[0] == 1.5);
  CHECK(f.read<double>("f32") == std::vector<double>(f32.begin(), f32.end()));
  CHECK(f.read<float>("f64")[1] == 0.1f);  // F64 -> float rounds to nearest

  const auto& scalar = f.info("scalar");
  CHECK(scalar.shape.empty());
  CHECK(scalar.numel() == 1);
  CHECK(scalar.dtype == Dtype::F64);
  CHECK(f.read<double>("scalar", std::vector<std::int64_t>{}) == std::vector<double>{42.0});

  CHECK(f.info("empty").numel() == 0);
  CHECK(f.info("empty").nbytes() == 0);
  CHECK(f.read<float>("empty", {0}).empty());
  CHECK(f.read<std::int64_t>("empty_2d", {3, 0}).empty());
  CHECK(f.info("empty_2d").shape == std::vector<std::int64_t>{3, 0});
  CHECK(f.read<float>("weird \"name\"\\/\x01") == std::vector<float>{1.0f});

  CHECK(f.contains("f16"));
  CHECK_FALSE(f.contains("f1"));
  CHECK_FALSE(f.contains("f160"));
}

TEST_CASE("safetensors: output is deterministic and independent of insertion order", "[io][host]") {
  SafetensorsWriter a, b;
  a.add<float>("x", std::vector<float>{1, 2}, {2});
  a.add<std::int32_t>("a", std::vector<std::int32_t>{3}, {1});
  a.set_metadata("k2", "v2");
  a.set_metadata("k1", "v1");
  b.set_metadata("k1", "v1");
  b.set_metadata("k2", "v2");
  b.add<std::int32_t>("a", std::vector<std::int32_t>{3}, {1});
  b.add<float>("x", std::vector<float>{1, 2}, {2});
  CHECK(a.serialize() == b.serialize());
  const std::string bytes = a.serialize();
  const std::string header = R"({"__metadata__":{"k1":"v1","k2":"v2"},)"
                             R"("a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]},)"
                             R"("x":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  CHECK(bytes.substr(8, header.size()) == header);
}

TEST_CASE("safetensors: a file without tensors or metadata", "[io][host]") {
  TempDir dir;
  const fs::path p = dir.file("empty.safetensors");
  SafetensorsWriter{}.write(p);
  CHECK(read_bytes(p) == length_prefix(8) + "{}      ");
  const SafetensorsFile f = SafetensorsFile::open(p);
  CHECK(f.tensors().empty());
  CHECK(f.metadata().empty());
}

// -------------------------------------------------------------------------------------------
// Half-precision conversions
// -------------------------------------------------------------------------------------------

TEST_CASE("safetensors: F16 and BF16 conversions of known bit patterns", "[io][host]") {
  using namespace hybridseq::io;
  constexpr float inf = std::numeric_limits<float>::infinity();

  SECTION("binary16 -> float") {
    CHECK(half_to_float(0x3C00) == 1.0f);
    CHECK(half_to_float(0xC100) == -2.5f);
    CHECK(half_to_float(0x7BFF) == 65504.0f);
    CHECK(half_to_float(0x0001) == std::ldexp(1.0f, -24));     // smallest subnormal
    CHECK(half_to_float(0x03FF) == std::ldexp(1023.0f, -24));  // largest subnormal
    CHECK(half_to_float(0x0400) == std::ldexp(1.0f, -14));     // smallest normal
    CHECK(half_to_float(0x8001) == -std::ldexp(1.0f, -24));
    CHECK(half_to_float(0x7C00) == inf);
    CHECK(half_to_float(0xFC00) == -inf);
    CHECK(std::isnan(half_to_float(0x7E00)));
    CHECK(std::isnan(half_to_float(0x7C01)));  // signalling NaN stays NaN, not inf
    CHECK(std::signbit(half_to_float(0x8000)));
    CHECK(half_to_float(0x8000) == 0.0f);
  }
  SECTION("float -> binary16, round to nearest even") {
    CHECK(float_to_half(1.0f) == 0x3C00);
    CHECK(float_to_half(-2.5f) == 0xC100);
    CHECK(float_to_half(65504.0f) == 0x7BFF);
    CHECK(float_to_half(65519.0f) == 0x7BFF);  // below the halfway point to 65536
    CHECK(float_to_half(65520.0f) == 0x7C00);  // halfway: ties to even -> overflow to inf
    CHECK(float_to_half(std::ldexp(1.0f, -24)) == 0x0001);
    CHECK(float_to_half(std::ldexp(1.0f, -25)) == 0x0000);  // tie between 0 and 2^-24 -> 0
    CHECK(float_to_half(std::ldexp(1.5f, -25)) == 0x0001);
    CHECK(float_to_half(std::ldexp(3.0f, -25)) == 0x0002);             // 1.5 ulp: tie -> even (2)
    CHECK(float_to_half(std::ldexp(1023.5f, -24)) == 0x0400);          // subnormal rounds up to normal
    CHECK(float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);      // tie -> even
    CHECK(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);  // tie -> even (up)
    CHECK(float_to_half(inf) == 0x7C00);
    CHECK(float_to_half(-inf) == 0xFC00);
    CHECK(float_to_half(1e10f) == 0x7C00);
    CHECK(float_to_half(-0.0f) == 0x8000);
    CHECK((float_to_half(std::numeric_limits<float>::quiet_NaN()) & 0x7FFF) > 0x7C00);
    // Every half value survives half -> float -> half.
    for (std::uint32_t h = 0; h <= 0xFFFF; ++h) {
      const auto bits = static_cast<std::uint16_t>(h);
      if ((bits & 0x7FFF) > 0x7C00) continue;  // NaNs: checked above
      REQUIRE(float_to_half(half_to_float(bits)) == bits);
    }
  }
  SECTION("bfloat16 <-> float") {
    CHECK(bfloat16_to_float(0x3F80) == 1.0f);
    CHECK(bfloat16_to_float(0xC020) == -2.5f);
    CHECK(bfloat16_to_float(0x0001) == std::ldexp(1.0f, -133));  // smallest subnormal
    CHECK(bfloat16_to_float(0x7F80) == inf);
    CHECK(bfloat16_to_float(0xFF80) == -inf);
    CHECK(std::isnan(bfloat16_to_float(0x7FC0)));
    CHECK(float_to_bfloat16(1.0f) == 0x3F80);
    CHECK(float_to_bfloat16(-2.5f) == 0xC020);
    CHECK(float_to_bfloat16(65504.0f) == 0x4780);  // rounds up to 65536
    CHECK(float_to_bfloat16(std::ldexp(1.0f, -133)) == 0x0001);
    CHECK(float_to_bfloat16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);        // tie -> even (down)
    CHECK(float_to_bfloat16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);    // tie -> even (up)
    CHECK(float_to_bfloat16(std::numeric_limits<float>::max()) == 0x7F80);  // overflow -> inf
    CHECK(float_to_bfloat16(inf) == 0x7F80);
    CHECK(float_to_bfloat16(-inf) == 0xFF80);
    const std::uint16_t nan = float_to_bfloat16(std::bit_cast<float>(0x7F800001u));
    CHECK(std::isnan(bfloat16_to_float(nan)));  // a NaN with a low payload does not become inf
  }
  SECTION("conversions through a file") {
    TempDir dir;
    const fs::path p = dir.file("half.safetensors");
    const std::vector<float> v{
        1.0f, -2.5f, 65504.0f, std::ldexp(1.0f, -24), inf, std::numeric_limits<float>::quiet_NaN()};
    SafetensorsWriter w;
    w.add_as("h", Dtype::F16, v, {6});
    w.add_as("b", Dtype::BF16, v, {6});
    w.write(p);
    const std::string bytes = read_bytes(p);
    const SafetensorsFile f = SafetensorsFile::open(p);
    const std::size_t data = bytes.size() - 24;  // two tensors of 12 bytes
    auto u16 = [&](std::size_t at) {
      return static_cast<std::uint16_t>(static_cast<unsigned char>(bytes[at]) |
                                        static_cast<unsigned char>(bytes[at + 1]) << 8);
    };
    // "b" sorts before "h": BF16 data first.
    CHECK(u16(data + 0) == 0x3F80);
    CHECK(u16(data + 12) == 0x3C00);
    CHECK(u16(data + 12 + 2) == 0xC100);
    CHECK(u16(data + 12 + 4) == 0x7BFF);
    CHECK(u16(data + 12 + 6) == 0x0001);
    CHECK(u16(data + 12 + 8) == 0x7C00);
    const auto h = f.read<double>("h");
    CHECK(h[0] == 1.0);
    CHECK(h[1] == -2.5);
    CHECK(h[2] == 65504.0);
    CHECK(h[3] == std::ldexp(1.0, -24));
    CHECK(h[4] == std::numeric_limits<double>::infinity());
    CHECK(std::isnan(h[5]));
    const auto b = f.read<float>("b");
    CHECK(b[2] == 65536.0f);
    CHECK(std::isnan(b[5]));
  }
}

// -------------------------------------------------------------------------------------------
// Interoperability with the Python safetensors library
// -------------------------------------------------------------------------------------------

TEST_CASE("safetensors: reads the file written by the Python library", "[io][host]") {
  const SafetensorsFile f = SafetensorsFile::open(golden_dir / "io_python_written.safetensors");
  check_interop(f);
  // Python lays data out by (alignment desc, name), unlike this writer: offsets differ.
  CHECK(f.info("e_i64").begin == 0);
}

TEST_CASE("safetensors: the writer reproduces the committed C++ golden byte for byte", "[io][host]") {
  // io_cpp_written.safetensors is checked by tests/reference/golden_io.py check_cpp_written
  // with the Python library, so equality here means Python reads what this writer writes.
  TempDir dir;
  const fs::path p = dir.file("interop.safetensors");
  interop_writer().write(p);
  const fs::path golden = golden_dir / "io_cpp_written.safetensors";
  CHECK(read_bytes(p) == read_bytes(golden));
  CHECK(interop_writer().serialize() == read_bytes(golden));
  check_interop(SafetensorsFile::open(p));
}

TEST_CASE("safetensors: reads any field order, whitespace and string escapes", "[io][host]") {
  TempDir dir;
  const fs::path p = dir.file("hand_written.safetensors");
  const std::string header =
      "{ \"__metadata__\" : { \"k\\u00e9\" : \"v\\n\" },\n"
      "  \"t\\u0000\\\"\" : { \"data_offsets\" : [ 0 , 4 ] , \"shape\" : [ ] , \"dtype\" : \"I32\" } }\t ";
  std::string data(4, '\0');
  data[0] = 7;
  write_bytes(p, make_file(header, 0) + data);
  const SafetensorsFile f = SafetensorsFile::open(p);
  CHECK(f.metadata() == std::map<std::string, std::string>{{"k\xc3\xa9", "v\n"}});
  const std::string name("t\0\"", 3);
  REQUIRE(f.contains(name));
  CHECK(f.info(name).shape.empty());
  CHECK(f.read<std::int32_t>(name) == std::vector<std::int32_t>{7});
}

// -------------------------------------------------------------------------------------------
// Refusals: reading
// -------------------------------------------------------------------------------------------

TEST_CASE("safetensors: refuses a truncated file", "[io][host]") {
  TempDir dir;
  std::string bytes = interop_writer().serialize();
  bytes.resize(bytes.size() - 3);
  CHECK_THAT(open_error(dir, bytes), Contains("truncated") && Contains("f_scalar"));
}

TEST_CASE("safetensors: refuses a file shorter than 8 bytes", "[io][host]") {
  TempDir dir;
  CHECK_THAT(open_error(dir, "abc"), Contains("file is 3 bytes, shorter than"));
  CHECK_THAT(open_error(dir, ""), Contains("file is 0 bytes"));
}

TEST_CASE("safetensors: refuses an oversized header length", "[io][host]") {
  TempDir dir;
  CHECK_THAT(open_error(dir, length_prefix(1000) + "{}"), Contains("header length 1000 exceeds the 2 bytes"));
  // A length whose + 8 would overflow must not wrap around.
  CHECK_THAT(open_error(dir, length_prefix(~std::uint64_t{0}) + "{}"), Contains("header length 18446744073709551615"));
  // Cutting into the header also shows up as an oversized length.
  std::string bytes = interop_writer().serialize();
  bytes.resize(40);
  CHECK_THAT(open_error(dir, bytes), Contains("oversized header"));
}

TEST_CASE("safetensors: refuses a header that is not valid JSON", "[io][host]") {
  TempDir dir;
  CHECK_THAT(open_error(dir, R"({"a": )", 0), Contains("header is not valid JSON"));
  CHECK_THAT(open_error(dir, R"({"a": 1} x)", 0), Contains("not valid JSON"));
  CHECK_THAT(open_error(dir, "", 0), Contains("not valid JSON"));
  CHECK_THAT(open_error(dir, "{\"a\xff\": 1}", 0), Contains("not valid JSON"));
  CHECK_THAT(open_error(dir, R"({"a": 1,})", 0), Contains("not valid JSON"));  // trailing comma
  CHECK_THAT(open_error(dir, R"({'a': 1})", 0), Contains("not valid JSON"));
  CHECK_THAT(open_error(dir, R"({"a": 1 /* comment */})", 0), Contains("not valid JSON"));
  CHECK_THAT(open_error(dir, std::string("{\"a\0\": 1}", 9), 0), Contains("not valid JSON"));
  CHECK_THAT(open_error(dir, R"({"\ud800": 1})", 0), Contains("not valid JSON"));  // lone surrogate
  CHECK_THAT(open_error(dir, R"({"a": 1e999})", 0), Contains("not valid JSON: number overflow"));
  CHECK_THAT(open_error(dir, one_tensor(R"("F32")", "[01]", "[0,4]"), 4), Contains("not valid JSON"));
  CHECK_THAT(open_error(dir, R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", 4),
             Contains("not valid JSON: parse error at line 1"));  // truncated
}

TEST_CASE("safetensors: refuses JSON nested deeper than 64 levels", "[io][host]") {
  TempDir dir;
  // 64 levels parse (and are then refused for not being an object); 65 are refused while parsing.
  CHECK_THAT(open_error(dir, std::string(64, '[') + std::string(64, ']'), 0),
             Contains("not a JSON object (it is an array)"));
  CHECK_THAT(open_error(dir, std::string(65, '[') + std::string(65, ']'), 0),
             Contains("JSON nesting deeper than 64 levels"));
  // A megabyte of '[' is refused at the 65th, before the parser has built anything big.
  CHECK_THAT(open_error(dir, std::string(1 << 20, '['), 0), Contains("JSON nesting deeper than 64 levels"));
  CHECK_THAT(open_error(dir, R"({"__metadata__":{"k":)" + std::string(100, '['), 0),
             Contains("JSON nesting deeper than 64 levels"));
}

TEST_CASE("safetensors: refuses a header that is not an object", "[io][host]") {
  TempDir dir;
  CHECK_THAT(open_error(dir, "[1,2]", 0), Contains("not a JSON object (it is an array)"));
  CHECK_THAT(open_error(dir, R"("text")", 0), Contains("not a JSON object"));
  CHECK_THAT(open_error(dir, "null", 0), Contains("not a JSON object (it is null)"));
  CHECK_THAT(open_error(dir, "true", 0), Contains("not a JSON object (it is a boolean)"));
  CHECK_THAT(open_error(dir, R"({"t": [1]})", 0), Contains("tensor \"t\": entry must be an object"));
}

TEST_CASE("safetensors: refuses an unknown dtype", "[io][host]") {
  TempDir dir;
  CHECK_THAT(open_error(dir, one_tensor(R"("Q8")", "[1]", "[0,1]"), 1),
             Contains("unknown or unsupported dtype \"Q8\""));
  // Valid in safetensors but not supported here.
  CHECK_THAT(open_error(dir, one_tensor(R"("U8")", "[1]", "[0,1]"), 1), Contains("\"U8\""));
  CHECK_THAT(open_error(dir, one_tensor("32", "[1]", "[0,4]"), 4), Contains("unknown or unsupported dtype 32"));
}

TEST_CASE("safetensors: refuses missing, unknown and duplicate tensor fields", "[io][host]") {
  TempDir dir;
  CHECK_THAT(open_error(dir, R"({"t":{"dtype":"F32","shape":[1]}})", 4), Contains("missing field \"data_offsets\""));
  CHECK_THAT(open_error(dir, R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4),
             Contains("unknown field \"x\""));
  CHECK_THAT(open_error(dir, R"({"t":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4),
             Contains("duplicate field \"dtype\""));
}

TEST_CASE("safetensors: refuses overlapping offsets", "[io][host]") {
  TempDir dir;
  const std::string header =
      header_of({entry("a", R"("F32")", "[2]", "[0,8]"), entry("b", R"("F32")", "[2]", "[4,12]")});
  CHECK_THAT(open_error(dir, header, 12), Contains("tensors \"a\" [0,8] and \"b\" [4,12] overlap"));
  // Two tensors sharing the same bytes.
  const std::string same = header_of({entry("a", R"("F32")", "[1]", "[0,4]"), entry("b", R"("I32")", "[1]", "[0,4]")});
  CHECK_THAT(open_error(dir, same, 4), Contains("overlap"));
}

TEST_CASE("safetensors: refuses gaps in the data buffer", "[io][host]") {
  TempDir dir;
  const std::string between =
      header_of({entry("a", R"("F32")", "[1]", "[0,4]"), entry("b", R"("F32")", "[1]", "[8,12]")});
  CHECK_THAT(open_error(dir, between, 12), Contains("gap in the data buffer: bytes [4,8) between \"a\" and \"b\""));
  CHECK_THAT(open_error(dir, header_of({entry("a", R"("F32")", "[1]", "[4,8]")}), 8),
             Contains("first tensor \"a\" begins at byte 4"));
  CHECK_THAT(open_error(dir, header_of({entry("a", R"("F32")", "[1]", "[0,4]")}), 6),
             Contains("the tensors end at byte 4 but the data buffer has 6 bytes"));
  CHECK_THAT(open_error(dir, "{}", 1), Contains("gap"));
}

TEST_CASE("safetensors: refuses offsets that do not match shape x dtype size", "[io][host]") {
  TempDir dir;
  CHECK_THAT(open_error(dir, one_tensor(R"("F32")", "[2,3]", "[0,20]"), 20),
             Contains("[0,20] span 20 bytes, which does not match shape (2,3) x F32 (6 x 4 = 24 bytes)"));
  CHECK_THAT(open_error(dir, one_tensor(R"("BF16")", "[]", "[0,4]"), 4), Contains("shape () x BF16 (1 x 2 = 2 bytes)"));
  CHECK_THAT(open_error(dir, one_tensor(R"("F64")", "[4294967296,4294967296]", "[0,8]"), 8),
             Contains("too many elements"));
}

TEST_CASE("safetensors: refuses bad data_offsets", "[io][host]") {
  TempDir dir;
  // An F32 tensor of one element with these data_offsets, and 4 data bytes unless said otherwise.
  auto with_offsets = [&](const std::string& offsets, std::size_t data_bytes = 4) {
    return open_error(dir, one_tensor(R"("F32")", "[1]", offsets), data_bytes);
  };
  CHECK_THAT(with_offsets("[8,4]", 8), Contains("data_offsets [8,4] are not ordered"));
  CHECK_THAT(with_offsets("[4]"), Contains("two integers [begin, end], but it has 1 entries"));
  CHECK_THAT(with_offsets(R"({"a":0})"), Contains("but it is an object"));
  CHECK_THAT(with_offsets(R"([0,"4"])"), Contains("data_offsets [0,\"4\"] are not two non-negative integers"));
  CHECK_THAT(with_offsets("[-0,4]"), Contains("data_offsets [-0,4] are not two non-negative integers"));
  CHECK_THAT(with_offsets("[-4,0]"), Contains("data_offsets [-4,0] are not two non-negative integers"));
  CHECK_THAT(with_offsets("[0,4.0]"),
             Contains("data_offsets [0,4.0 (read as floating point)] are not two non-negative integers"));
  CHECK_THAT(with_offsets("null"), Contains("but it is null"));
  CHECK_THAT(with_offsets("[]"), Contains("but it has 0 entries"));
  // The largest u64 is a valid offset, so this fails the size check, not the integer check.
  CHECK_THAT(with_offsets("[0,18446744073709551615]"),
             Contains("data_offsets [0,18446744073709551615] span 18446744073709551615 bytes"));
  CHECK_THAT(with_offsets("[0,99999999999999999999]"), Contains("not two non-negative integers"));
}

TEST_CASE("safetensors: refuses duplicate names", "[io][host]") {
  TempDir dir;
  const std::string header =
      header_of({entry("a", R"("F32")", "[1]", "[0,4]"), entry("a", R"("F32")", "[1]", "[4,8]")});
  CHECK_THAT(open_error(dir, header, 8), Contains("duplicate entry \"a\""));
  CHECK_THAT(open_error(dir, R"({"__metadata__":{},"__metadata__":{}})", 0),
             Contains("duplicate entry \"__metadata__\""));
  CHECK_THAT(open_error(dir, R"({"__metadata__":{"k":"1","k":"2"}})", 0),
             Contains("duplicate key \"k\" in __metadata__"));
  // Deeper objects (never valid in a header) and objects inside arrays: the key is named.
  CHECK_THAT(open_error(dir, one_tensor(R"("F32")", R"({"a":1,"a":2})", "[0,4]"), 4),
             Contains("duplicate key \"a\" in the header"));
  CHECK_THAT(open_error(dir, R"([{"a":1,"a":2}])", 0), Contains("duplicate key \"a\" in the header"));
  // Equal keys in different objects are not duplicates.
  CHECK_THAT(open_error(dir, R"({"__metadata__":{"a":"x"},"a":{"a":1}})", 0),
             Contains("tensor \"a\": unknown field \"a\""));
}

TEST_CASE("safetensors: refuses shape entries that are not non-negative integers", "[io][host]") {
  TempDir dir;
  auto with_shape = [](const std::string& shape) { return make_file(one_tensor(R"("F32")", shape, "[0,4]"), 4); };
  CHECK_THAT(open_error(dir, with_shape("[-1]")), Contains("shape entry 0 is -1, not a non-negative integer"));
  CHECK_THAT(open_error(dir, with_shape("[1.5]")), Contains("shape entry 0 is 1.5"));
  CHECK_THAT(open_error(dir, with_shape("[1.0]")), Contains("shape entry 0 is 1.0"));
  CHECK_THAT(open_error(dir, with_shape("[1e0]")), Contains("shape entry 0 is 1.0 (read as floating point)"));
  CHECK_THAT(open_error(dir, with_shape(R"([1,"1"])")), Contains("shape entry 1 is \"1\""));
  CHECK_THAT(open_error(dir, with_shape("[true]")), Contains("shape entry 0 is true"));
  CHECK_THAT(open_error(dir, with_shape("[[1]]")), Contains("shape entry 0 is an array"));
  CHECK_THAT(open_error(dir, with_shape("[99999999999999999999]")),
             Contains("shape entry 0 is 1e+20 (read as floating point)"));
  // Fits a u64 but not an int64.
  CHECK_THAT(open_error(dir, with_shape("[9223372036854775808]")),
             Contains("shape entry 0 is 9223372036854775808, not a non-negative integer"));
  CHECK_THAT(open_error(dir, with_shape("[-0]")), Contains("shape entry 0 is -0"));
  CHECK_THAT(open_error(dir, with_shape("[null]")), Contains("shape entry 0 is null"));
  CHECK_THAT(open_error(dir, with_shape("{}")), Contains("shape must be an array"));
  CHECK_THAT(open_error(dir, with_shape(R"("")")), Contains("shape must be an array"));
  CHECK_THAT(open_error(dir, with_shape("1")), Contains("shape must be an array"));
}

TEST_CASE("safetensors: refuses __metadata__ that is not a string -> string object", "[io][host]") {
  TempDir dir;
  CHECK_THAT(open_error(dir, R"({"__metadata__":{"format":5}})", 0),
             Contains("__metadata__ must map strings to strings, but \"format\" is a number (5)"));
  CHECK_THAT(open_error(dir, R"({"__metadata__":{"format":{"x":"y"}}})", 0), Contains("\"format\" is an object"));
  CHECK_THAT(open_error(dir, R"({"__metadata__":{"format":null}})", 0), Contains("\"format\" is null"));
  CHECK_THAT(open_error(dir, R"({"__metadata__":{"format":false}})", 0), Contains("\"format\" is a boolean (false)"));
  CHECK_THAT(open_error(dir, R"({"__metadata__":{"format":["pt"]}})", 0), Contains("\"format\" is an array"));
  CHECK_THAT(open_error(dir, R"({"__metadata__":["pt"]})", 0),
             Contains("__metadata__ must be an object of strings, but it is an array"));
}

TEST_CASE("safetensors: refuses a missing file or a directory", "[io][host]") {
  TempDir dir;
  const fs::path p = dir.file("does_not_exist.safetensors");
  REQUIRE_THROWS_AS(SafetensorsFile::open(p), hybridseq::io_error);
  REQUIRE_THROWS_WITH(hybridseq::io::read_safetensors(p),
                      Contains("hybridseq::io::read_safetensors") && Contains(p.string()) && Contains("cannot open"));
  REQUIRE_THROWS_WITH(SafetensorsFile::open(dir.file("")),
                      Contains("cannot open the file for reading: it is not a regular file"));
}

TEST_CASE("safetensors: lookup and conversion errors name the tensor and the file", "[io][host]") {
  TempDir dir;
  const fs::path p = dir.file("interop.safetensors");
  interop_writer().write(p);
  const SafetensorsFile f = SafetensorsFile::open(p);

  REQUIRE_THROWS_AS(f.info("zzz"), hybridseq::io_error);
  REQUIRE_THROWS_WITH(f.info("zzz"), Contains("hybridseq::io::SafetensorsFile::info") && Contains(p.string()) &&
                                         Contains("no tensor named \"zzz\"") && Contains("a_f32, b_f64"));
  REQUIRE_THROWS_WITH(f.read<float>("zzz"),
                      Contains("hybridseq::io::SafetensorsFile::read") && Contains("no tensor named \"zzz\""));

  REQUIRE_THROWS_AS(f.read<float>("a_f32", {3, 2}), hybridseq::io_error);
  REQUIRE_THROWS_WITH(f.read<float>("a_f32", {3, 2}), Contains("tensor \"a_f32\" has shape (2,3), expected (3,2)"));
  REQUIRE_THROWS_WITH(f.read<float>("f_scalar", {1}), Contains("has shape (), expected (1)"));

  REQUIRE_THROWS_AS(f.read<std::int64_t>("a_f32"), hybridseq::io_error);
  REQUIRE_THROWS_WITH(f.read<std::int64_t>("a_f32"), Contains("dtype F32, which cannot be read as int64"));
  REQUIRE_THROWS_WITH(f.read<double>("e_i64"), Contains("dtype I64, which cannot be read as double"));
  REQUIRE_THROWS_WITH(f.read<std::int32_t>("e_i64"), Contains("element 2 = 9007199254740993 does not fit in int32"));
}

// -------------------------------------------------------------------------------------------
// Refusals: writing
// -------------------------------------------------------------------------------------------

TEST_CASE("safetensors: the writer refuses bad tensors", "[io][host]") {
  SafetensorsWriter w;
  const std::vector<float> six(6, 1.0f);
  w.add<float>("a", six, {2, 3});

  REQUIRE_THROWS_AS(w.add<float>("a", six, {6}), hybridseq::io_error);
  REQUIRE_THROWS_WITH(w.add<float>("a", six, {6}),
                      Contains("hybridseq::io::SafetensorsWriter::add") && Contains("duplicate tensor name \"a\""));
  REQUIRE_THROWS_WITH(w.add_as("a", Dtype::F16, six, {6}), Contains("duplicate tensor name \"a\""));
  REQUIRE_THROWS_AS(w.add<float>("__metadata__", six, {6}), hybridseq::io_error);

  REQUIRE_THROWS_AS(w.add<float>("b", six, {4}), hybridseq::shape_error);
  REQUIRE_THROWS_WITH(w.add<float>("b", six, {4}),
                      Contains("tensor \"b\": 6 elements given for shape (4) (4 elements)"));
  REQUIRE_THROWS_WITH(w.add<float>("b", six, {}), Contains("shape () (1 elements)"));
  REQUIRE_THROWS_AS(w.add<float>("b", six, {-2, -3}), hybridseq::shape_error);
  REQUIRE_THROWS_WITH(w.add<float>("b", six, {-2, -3}), Contains("negative extent"));
  REQUIRE_THROWS_AS(w.add_as("b", Dtype::BF16, six, {7}), hybridseq::shape_error);

  REQUIRE_THROWS_AS(w.add_as("b", Dtype::I32, six, {6}), hybridseq::value_error);
  REQUIRE_THROWS_WITH(w.add_as("b", Dtype::I32, six, {6}), Contains("target dtype I32 is not a float dtype"));
  REQUIRE_THROWS_AS(w.add<float>("\xff", six, {6}), hybridseq::value_error);
  REQUIRE_THROWS_AS(w.set_metadata("k", "\xc0\x80"), hybridseq::value_error);  // overlong NUL

  // Failed adds leave the writer unchanged.
  CHECK(w.serialize().find("\"b\"") == std::string::npos);
}

TEST_CASE("safetensors: the writer reports an unwritable path", "[io][host]") {
  TempDir dir;
  const fs::path p = dir.file("no_such_dir") / "x.safetensors";
  REQUIRE_THROWS_AS(SafetensorsWriter{}.write(p), hybridseq::io_error);
  REQUIRE_THROWS_WITH(SafetensorsWriter{}.write(p),
                      Contains("hybridseq::io::SafetensorsWriter::write") && Contains(p.string()));
}

TEST_CASE("safetensors: a write refused for its destination leaves no temporary file", "[io][host]") {
  TempDir dir;
  SafetensorsWriter w;
  w.add<float>("a", std::vector<float>{1, 2}, {2});
  // A directory where the file should go.
  const fs::path d = dir.file("a_directory");
  fs::create_directories(d);
  REQUIRE_THROWS_AS(w.write(d), hybridseq::io_error);
  REQUIRE_THROWS_WITH(w.write(d), Contains("hybridseq::io::SafetensorsWriter::write") && Contains(d.string()) &&
                                      Contains("is a directory"));
  CHECK_FALSE(fs::exists(hybridseq::io::temporary_path(d)));
  // A directory nobody may write to (root may write anywhere, so only checked otherwise).
  const fs::path locked = dir.file("locked");
  fs::create_directories(locked);
  fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
  if (::geteuid() != 0) {
    REQUIRE_THROWS_WITH(w.write(locked / "x.safetensors"),
                        Contains("cannot open the file for writing") && Contains("ermission denied"));
  }
  fs::permissions(locked, fs::perms::owner_all);
  CHECK(fs::is_empty(locked));
  // A stale temporary file from a killed write is replaced, and removed once written.
  const fs::path p = dir.file("x.safetensors");
  write_bytes(hybridseq::io::temporary_path(p), "torn");
  w.write(p);
  CHECK_FALSE(fs::exists(hybridseq::io::temporary_path(p)));
  CHECK(SafetensorsFile::open(p).read<float>("a") == std::vector<float>{1, 2});
  write_bytes(hybridseq::io::temporary_path(p), "torn");
  CHECK(hybridseq::io::remove_stale_temporary(p));
  CHECK_FALSE(fs::exists(hybridseq::io::temporary_path(p)));
  CHECK_FALSE(hybridseq::io::remove_stale_temporary(p));
}

TEST_CASE("safetensors: from_bytes validates like open, without a file", "[io][host]") {
  TempDir dir;
  const fs::path p = dir.file("interop.safetensors");
  interop_writer().write(p);
  const std::string bytes = read_bytes(p);
  const SafetensorsFile a = SafetensorsFile::open(p);
  const SafetensorsFile b = SafetensorsFile::from_bytes(bytes, "in-memory");
  CHECK(b.path() == "in-memory");
  REQUIRE(a.tensors().size() == b.tensors().size());
  for (std::size_t i = 0; i < a.tensors().size(); ++i) CHECK(a.tensors()[i].name == b.tensors()[i].name);
  CHECK(a.read<float>("a_f32") == b.read<float>("a_f32"));
  CHECK(a.metadata() == b.metadata());
  REQUIRE_THROWS_WITH(SafetensorsFile::from_bytes(std::string_view(bytes).substr(0, bytes.size() - 1), "cut"),
                      Contains("hybridseq::io::read_safetensors: cut: ") && Contains("truncated"));
  REQUIRE_THROWS_WITH(SafetensorsFile::from_bytes(std::string_view("1234"), "tiny"),
                      Contains("file is 4 bytes, shorter than the 8-byte header length prefix"));
}

TEST_CASE("safetensors: a checksum refuses any changed data byte or metadata value", "[io][host]") {
  SafetensorsWriter w;
  w.set_metadata("step", "12");
  w.add<float>("a", std::vector<float>{1.5f, -2.0f, 3.25f}, {3});
  w.add<std::int64_t>("b", std::vector<std::int64_t>{7, 8}, {2});
  SafetensorsWriter unchecked = w;
  w.add_checksum();
  const std::string good = w.serialize();
  const SafetensorsFile f = SafetensorsFile::from_bytes(good);
  REQUIRE(f.has_checksum());
  CHECK(f.metadata().at("step") == "12");
  CHECK_FALSE(SafetensorsFile::from_bytes(unchecked.serialize()).has_checksum());

  std::uint64_t header_len = 0;
  std::memcpy(&header_len, good.data(), 8);
  const std::size_t data_begin = 8 + header_len;
  REQUIRE(good.size() - data_begin == 3 * 4 + 2 * 8);
  for (std::size_t i = data_begin; i < good.size(); ++i) {
    INFO("data byte " << i - data_begin);
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    REQUIRE_THROWS_AS(SafetensorsFile::from_bytes(bad), hybridseq::io_error);
    REQUIRE_THROWS_WITH(SafetensorsFile::from_bytes(bad), Contains("checksum mismatch") && Contains("hybridseq.crc32"));
    // Without the checksum the same change reads as valid: the checksum is what refuses it.
    std::string plain = unchecked.serialize();
    char& twin = plain[plain.size() - (good.size() - i)];
    twin = static_cast<char>(twin ^ 0x10);
    CHECK_NOTHROW(SafetensorsFile::from_bytes(plain));
  }
  // A metadata value of the same length (the header stays valid JSON).
  std::string bad = good;
  const std::size_t step = bad.find("\"12\"");
  REQUIRE(step != std::string::npos);
  bad[step + 1] = '9';
  REQUIRE_THROWS_WITH(SafetensorsFile::from_bytes(bad), Contains("checksum mismatch"));
  REQUIRE_THROWS_WITH(SafetensorsWriter{}.set_metadata("hybridseq.crc32", "0"), Contains("reserved for the checksum"));
}

TEST_CASE("safetensors: Dtype helpers", "[io][host]") {
  using namespace hybridseq::io;
  for (Dtype d : {Dtype::F32, Dtype::F64, Dtype::F16, Dtype::BF16, Dtype::I32, Dtype::I64}) {
    CHECK(dtype_from_string(to_string(d)) == d);
  }
  CHECK(to_string(Dtype::BF16) == "BF16");
  CHECK(dtype_size(Dtype::F16) == 2);
  CHECK(dtype_size(Dtype::BF16) == 2);
  CHECK(dtype_size(Dtype::F32) == 4);
  CHECK(dtype_size(Dtype::I32) == 4);
  CHECK(dtype_size(Dtype::F64) == 8);
  CHECK(dtype_size(Dtype::I64) == 8);
  CHECK_FALSE(dtype_from_string("f32").has_value());
  CHECK_FALSE(dtype_from_string("Q8").has_value());
}
