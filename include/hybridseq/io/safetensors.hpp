#pragma once
/// \file
/// Reader and writer for the safetensors format (https://github.com/huggingface/safetensors).
///
/// Layout of a file:
///   bytes [0, 8)        N, the header length, as a little-endian u64
///   bytes [8, 8+N)      a JSON object: {"<name>": {"dtype": "F32", "shape": [2,3],
///                       "data_offsets": [begin, end]}, ..., "__metadata__": {"k": "v"}}
///   bytes [8+N, EOF)    the data buffer; offsets are relative to its first byte
///
/// The reader validates the file as strictly as the reference (Rust/Python) implementation
/// does — the tensors must tile the data buffer exactly, with no overlap and no gap — and
/// refuses anything else with an io_error naming the file and the offending values.
/// Supported dtypes: F32, F64, F16, BF16, I32, I64. Host-only code. The header JSON is parsed
/// and written with nlohmann-json; F16 and BF16 convert through Eigen::half and Eigen::bfloat16.
///
/// Integrity: a writer may store a CRC-32 (Boost.CRC) of the data buffer and of the other
/// metadata entries under `__metadata__["hybridseq.crc32"]`; a file that carries one is
/// verified whenever it is opened, so a flipped bit anywhere in the tensors or the metadata is
/// refused. Files are written durably: to `<path>.tmp`, fsync'ed, renamed over `<path>`, and
/// the directory fsync'ed (POSIX), so a crash leaves either the old file or the new one.

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>
#include <boost/crc.hpp>

#include "../core/error.hpp"
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

namespace hybridseq::io {

// The format stores little-endian data and the reader/writer copy it verbatim.
static_assert(std::endian::native == std::endian::little, "hybridseq::io::safetensors assumes a little-endian host");
static_assert(std::numeric_limits<float>::is_iec559 && std::numeric_limits<double>::is_iec559,
              "hybridseq::io::safetensors assumes IEEE-754 float and double");

// ---------------------------------------------------------------------------------------------
// Dtypes
// ---------------------------------------------------------------------------------------------

/// The element types this library reads and writes (a subset of the safetensors dtypes).
enum class Dtype { F32, F64, F16, BF16, I32, I64 };

/// The safetensors spelling of `d`: "F32", "F64", "F16", "BF16", "I32", "I64".
inline std::string to_string(Dtype d) {
  constexpr std::array<const char*, 6> names{"F32", "F64", "F16", "BF16", "I32", "I64"};  // in enum order
  const auto i = static_cast<std::size_t>(d);
  return i < names.size() ? names[i] : "<invalid Dtype>";
}

inline std::ostream& operator<<(std::ostream& os, Dtype d) {
  return os << to_string(d);
}

/// Bytes per element of `d`.
inline std::size_t dtype_size(Dtype d) {
  switch (d) {
    case Dtype::F16:
    case Dtype::BF16:
      return 2;
    case Dtype::F32:
    case Dtype::I32:
      return 4;
    case Dtype::F64:
    case Dtype::I64:
      return 8;
  }
  return 0;
}

/// True for F32, F64, F16, BF16.
inline bool is_floating(Dtype d) {
  return d != Dtype::I32 && d != Dtype::I64;
}

/// Parses the safetensors spelling ("F32", ...); nullopt for anything this library does not
/// support (including valid safetensors dtypes such as "U8" or "BOOL").
inline std::optional<Dtype> dtype_from_string(std::string_view s) {
  for (Dtype d : {Dtype::F32, Dtype::F64, Dtype::F16, Dtype::BF16, Dtype::I32, Dtype::I64}) {
    if (s == to_string(d)) return d;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Half-precision conversions (IEEE binary16 and bfloat16), through Eigen::half / Eigen::bfloat16
// ---------------------------------------------------------------------------------------------

/// binary16 bits -> float. Exact: every binary16 value (including subnormals and ±inf) is a
/// float; NaN stays NaN.
inline float half_to_float(std::uint16_t h) noexcept {
  return static_cast<float>(std::bit_cast<Eigen::half>(h));
}

/// float -> binary16 bits, rounding to nearest, ties to even. Values at or beyond 65520
/// become ±inf; tiny values become subnormals or ±0; NaN becomes a quiet NaN.
inline std::uint16_t float_to_half(float f) noexcept {
  return std::bit_cast<std::uint16_t>(Eigen::half(f));
}

/// bfloat16 bits -> float. Exact: bfloat16 is the top half of a float.
inline float bfloat16_to_float(std::uint16_t b) noexcept {
  return static_cast<float>(std::bit_cast<Eigen::bfloat16>(b));
}

/// float -> bfloat16 bits, rounding to nearest, ties to even (overflow rounds to ±inf, as in
/// PyTorch); NaN becomes a quiet NaN.
inline std::uint16_t float_to_bfloat16(float f) noexcept {
  return std::bit_cast<std::uint16_t>(Eigen::bfloat16(f));
}

// ---------------------------------------------------------------------------------------------
// Implementation details
// ---------------------------------------------------------------------------------------------

namespace detail {

/// Element types a tensor can be read into or written from.
template <class T>
concept SafetensorsElement =
    std::same_as<T, float> || std::same_as<T, double> || std::same_as<T, std::int32_t> || std::same_as<T, std::int64_t>;

template <SafetensorsElement T>
constexpr std::string_view element_name() {
  if constexpr (std::same_as<T, float>)
    return "float";
  else if constexpr (std::same_as<T, double>)
    return "double";
  else if constexpr (std::same_as<T, std::int32_t>)
    return "int32";
  else
    return "int64";
}

template <SafetensorsElement T>
constexpr Dtype native_dtype() {
  if constexpr (std::same_as<T, float>)
    return Dtype::F32;
  else if constexpr (std::same_as<T, double>)
    return Dtype::F64;
  else if constexpr (std::same_as<T, std::int32_t>)
    return Dtype::I32;
  else
    return Dtype::I64;
}

/// "(2,3)"; "()" for a 0-d tensor.
inline std::string format_shape(std::span<const std::int64_t> shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i != 0) out += ',';
    out += std::to_string(shape[i]);
  }
  return out + ")";
}

/// Product of non-negative extents, or nullopt if it does not fit in an int64.
inline std::optional<std::int64_t> checked_numel(std::span<const std::int64_t> shape) {
  std::int64_t n = 1;
  for (std::int64_t e : shape) {
    if (e < 0) return std::nullopt;
    if (e != 0 && n > std::numeric_limits<std::int64_t>::max() / e) return std::nullopt;
    n *= e;
  }
  return n;
}

/// Reads a `T` from possibly unaligned bytes (the data buffer has no alignment guarantee).
template <class T>
T load_unaligned(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

using Json = nlohmann::json;

/// A safetensors header nests three levels deep ({ "t": { "shape": [ ); allow generous slack.
/// The limit bounds the memory a hostile header (a megabyte of '[') can make the parser take.
inline constexpr int max_json_depth = 64;

/// The kind of a JSON value, as an error message names it.
inline std::string_view kind_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return "a number";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    default:
      return "binary data";  // not produced by the text parser
  }
}

/// How a JSON value looks in an error message: its JSON text for scalars, its kind otherwise.
inline std::string describe(const Json& v) {
  if (v.is_structured()) return std::string(kind_name(v));
  // nlohmann reads every integer without a sign as unsigned, so a signed zero was "-0".
  if (v.type() == Json::value_t::number_integer && v.get<std::int64_t>() == 0) return "-0";
  // A fraction, an exponent or an integer beyond 64 bits makes a double, shown as such.
  if (v.is_number_float()) return v.dump() + " (read as floating point)";
  return v.dump();
}

/// `v` as a `U` if it is a JSON integer written as plain digits (no sign, fraction or
/// exponent) whose value fits in `U`; nullopt otherwise.
template <class U>
std::optional<U> unsigned_integer(const Json& v) {
  if (!v.is_number_unsigned()) return std::nullopt;
  const auto x = v.get<std::uint64_t>();
  if (!std::in_range<U>(x)) return std::nullopt;
  return static_cast<U>(x);
}

/// Strict UTF-8 (no overlong forms, surrogates or code points above U+10FFFF): the reference
/// reader refuses headers that are not, so the writer must not emit them. nlohmann's
/// serializer performs exactly this check.
inline bool is_valid_utf8(const std::string& s) {
  try {
    (void)Json(s).dump();
    return true;
  } catch (const Json::type_error&) {
    return false;
  }
}

inline constexpr std::string_view read_api = "hybridseq::io::read_safetensors";

/// CRC-32 (IEEE 802.3, as zlib) of the data buffer followed by every metadata entry but the
/// checksum's own, as key NUL value NUL in key order: what `checksum_key` stores.
inline std::uint32_t content_crc32(std::span<const std::span<const char>> data,
                                   const std::map<std::string, std::string>& metadata, std::string_view skip) {
  boost::crc_32_type crc;
  for (const auto& bytes : data) crc.process_bytes(bytes.data(), bytes.size());
  for (const auto& [k, v] : metadata) {
    if (k == skip) continue;
    crc.process_bytes(k.data(), k.size() + 1);  // the terminating NUL separates key and value
    crc.process_bytes(v.data(), v.size() + 1);
  }
  return crc.checksum();
}

inline std::string hex32(std::uint32_t x) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", x);
  return buf;
}

}  // namespace detail

/// The `__metadata__` key under which a checksum is stored (8 lower-case hex digits).
inline constexpr std::string_view checksum_key = "hybridseq.crc32";

// ---------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------

/// One tensor entry of a safetensors header.
struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<std::int64_t> shape;  ///< empty for a 0-d (scalar) tensor
  std::size_t begin = 0;            ///< byte offset of the first element in the data buffer
  std::size_t end = 0;              ///< one past the last byte; end - begin == numel * dtype_size

  /// Number of elements: the product of `shape` (1 for a 0-d tensor).
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (std::int64_t e : shape) n *= e;
    return n;
  }
  /// Size in bytes in the file.
  std::size_t nbytes() const { return end - begin; }
};

/// A validated safetensors file, read whole into memory.
///
///   auto f = hybridseq::io::SafetensorsFile::open("model.safetensors");
///   std::vector<float> w = f.read<float>("layer0.weight", {128, 96});  // checks the shape
class SafetensorsFile {
 public:
  /// Reads and validates the whole file. Throws io_error (message starting
  /// "hybridseq::io::read_safetensors: <path>: ") if it cannot be read or is not a valid
  /// safetensors file with supported dtypes.
  static SafetensorsFile open(const std::filesystem::path& path);

  /// Validates `bytes` as a whole safetensors file held in memory (copied); `name` stands for
  /// the path in error messages. Same checks and errors as open().
  static SafetensorsFile from_bytes(std::span<const char> bytes, std::string name = "<memory>");

  /// Whether the file carries a checksum (it was verified when the file was opened).
  bool has_checksum() const { return metadata_.contains(std::string(checksum_key)); }

  /// The "__metadata__" entries (empty if the header has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  /// All tensors, ordered by name (byte-wise), whatever their order in the file.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

  /// Whether a tensor called `name` exists.
  bool contains(std::string_view name) const { return find(name) != nullptr; }

  /// The entry of tensor `name`; io_error naming it and the file if there is none.
  const TensorInfo& info(std::string_view name) const {
    return info_or_fail(name, "hybridseq::io::SafetensorsFile::info");
  }

  /// The elements of tensor `name` (row-major), converted to `T`:
  ///  - float dtypes (F32, F64, F16, BF16) read as float or double: F16/BF16/F32 widen exactly,
  ///    F64 -> float rounds to nearest (magnitudes beyond float's range become ±inf);
  ///  - integer dtypes (I32, I64) read as int32 or int64; narrowing that would change a value
  ///    is an io_error naming the element.
  /// Reading a float dtype as an integer type or vice versa is an io_error.
  template <detail::SafetensorsElement T>
  std::vector<T> read(std::string_view name) const {
    return read_impl<T>(info_or_fail(name, read_tensor_api), read_tensor_api);
  }

  /// As read(name), but first checks that the tensor has shape `expected_shape`; on mismatch
  /// throws io_error stating both shapes.
  template <detail::SafetensorsElement T>
  std::vector<T> read(std::string_view name, std::span<const std::int64_t> expected_shape) const {
    const TensorInfo& ti = info_or_fail(name, read_tensor_api);
    if (!std::ranges::equal(ti.shape, expected_shape)) {
      fail<io_error>(read_tensor_api, path_.string(), ": tensor \"", ti.name, "\" has shape ",
                     detail::format_shape(ti.shape), ", expected ", detail::format_shape(expected_shape));
    }
    return read_impl<T>(ti, read_tensor_api);
  }

  /// Convenience overload so that `read<float>("w", {128, 96})` works.
  template <detail::SafetensorsElement T>
  std::vector<T> read(std::string_view name, std::initializer_list<std::int64_t> expected_shape) const {
    return read<T>(name, std::span<const std::int64_t>(expected_shape.begin(), expected_shape.size()));
  }

  /// The path the file was opened from.
  const std::filesystem::path& path() const { return path_; }

 private:
  static constexpr std::string_view read_tensor_api = "hybridseq::io::SafetensorsFile::read";

  SafetensorsFile() = default;

  template <class... Args>
  [[noreturn]] void fail_file(const Args&... args) const {
    fail<io_error>(detail::read_api, path_.string(), ": ", args...);
  }

  const TensorInfo* find(std::string_view name) const {
    // tensors_ is sorted by name (see open), so a binary search suffices.
    const auto it =
        std::lower_bound(tensors_.begin(), tensors_.end(), name,
                         [](const TensorInfo& t, std::string_view n) { return std::string_view(t.name) < n; });
    return it != tensors_.end() && it->name == name ? &*it : nullptr;
  }

  const TensorInfo& info_or_fail(std::string_view name, std::string_view api) const {
    if (const TensorInfo* t = find(name)) return *t;
    std::string known;
    constexpr std::size_t max_listed = 10;
    for (std::size_t i = 0; i < tensors_.size() && i < max_listed; ++i) {
      known += (i == 0 ? "" : ", ") + tensors_[i].name;
    }
    if (tensors_.size() > max_listed) known += ", ...";
    fail<io_error>(api, path_.string(), ": no tensor named \"", name, "\" (the file has ", tensors_.size(), " tensor",
                   tensors_.size() == 1 ? "" : "s", tensors_.empty() ? "" : ": ", known, ")");
  }

  template <class T>
  std::vector<T> read_impl(const TensorInfo& ti, std::string_view api) const;

  void parse_header(std::string_view header);
  void parse_metadata(const detail::Json& v);
  void parse_tensor(const std::string& name, const detail::Json& v);
  void check_tiling(std::size_t data_size) const;
  void validate();

  std::filesystem::path path_;
  std::vector<char> bytes_;      // the whole file
  std::size_t data_offset_ = 0;  // 8 + header length: where offsets are measured from
  std::map<std::string, std::string> metadata_;
  std::vector<TensorInfo> tensors_;
};

/// Same as SafetensorsFile::open(path).
inline SafetensorsFile read_safetensors(const std::filesystem::path& path) {
  return SafetensorsFile::open(path);
}

inline SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile f;
  f.path_ = path;

  // Checked up front: an ifstream happily "opens" a directory and then reports a bogus size.
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    f.fail_file("cannot open the file for reading: ", ec ? ec.message() : "it does not exist");
  }
  if (!std::filesystem::is_regular_file(status)) {
    f.fail_file("cannot open the file for reading: it is not a regular file");
  }
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) f.fail_file("cannot determine the file size: ", ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) f.fail_file("cannot open the file for reading");
  f.bytes_.resize(static_cast<std::size_t>(size));
  if (!in.read(f.bytes_.data(), static_cast<std::streamsize>(size))) {
    f.fail_file("reading ", size, " bytes failed (the file changed while being read?)");
  }
  f.validate();
  return f;
}

inline SafetensorsFile SafetensorsFile::from_bytes(std::span<const char> bytes, std::string name) {
  SafetensorsFile f;
  f.path_ = std::move(name);
  f.bytes_.assign(bytes.begin(), bytes.end());
  f.validate();
  return f;
}

inline void SafetensorsFile::validate() {
  const std::size_t file_size = bytes_.size();

  if (file_size < 8) {
    fail_file("file is ", file_size, " bytes, shorter than the 8-byte header length prefix of a safetensors file");
  }
  const auto header_len = detail::load_unaligned<std::uint64_t>(bytes_.data());
  // Compared without adding 8 to header_len, which could overflow for a corrupt prefix.
  if (header_len > file_size - 8) {
    fail_file("oversized header: header length ", header_len, " exceeds the ", file_size - 8,
              " bytes that follow the length prefix (file size ", file_size, ")");
  }
  data_offset_ = 8 + static_cast<std::size_t>(header_len);
  parse_header(std::string_view(bytes_.data() + 8, static_cast<std::size_t>(header_len)));

  const std::size_t data_size = file_size - data_offset_;
  for (const TensorInfo& t : tensors_) {
    if (t.end > data_size) {
      fail_file("truncated: tensor \"", t.name, "\" has data_offsets [", t.begin, ",", t.end,
                "] but the data buffer has only ", data_size, " bytes");
    }
  }
  check_tiling(data_size);

  if (const auto it = metadata_.find(std::string(checksum_key)); it != metadata_.end()) {
    const std::span<const char> data(bytes_.data() + data_offset_, data_size);
    const std::string actual = detail::hex32(detail::content_crc32({&data, 1}, metadata_, checksum_key));
    if (it->second != actual) {
      fail_file("checksum mismatch: the header records ", checksum_key, " = ", it->second, " but the content's is ",
                actual, " (the file is corrupt)");
    }
  }

  std::sort(tensors_.begin(), tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
}

inline void SafetensorsFile::parse_header(std::string_view header) {
  using detail::Json;
  // nlohmann's DOM keeps only the last of duplicate keys, so they are refused as the parser
  // reports them (the reference reader refuses them too), and so is nesting beyond
  // max_json_depth. `open` holds the keys seen in each open object or array, innermost last.
  struct Container {
    bool object = false;
    std::set<std::string> keys;
    std::string last_key;
  };
  std::vector<Container> open;
  auto on_event = [&](int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        if (depth >= detail::max_json_depth) {
          fail_file("header is not a safetensors header: JSON nesting deeper than ", detail::max_json_depth, " levels");
        }
        open.push_back({event == Json::parse_event_t::object_start, {}, {}});
        break;
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        open.pop_back();
        break;
      case Json::parse_event_t::key: {
        std::string key = parsed.get<std::string>();
        if (!open.back().keys.insert(key).second) {
          if (open.size() == 1) fail_file("duplicate entry \"", key, "\" in the header");
          if (open.size() == 2 && open[0].object) {  // in the value of a top-level entry
            if (open[0].last_key == "__metadata__") fail_file("duplicate key \"", key, "\" in __metadata__");
            fail_file("tensor \"", open[0].last_key, "\": duplicate field \"", key, "\"");
          }
          fail_file("duplicate key \"", key, "\" in the header");
        }
        open.back().last_key = std::move(key);
        break;
      }
      case Json::parse_event_t::value:
        break;
    }
    return true;
  };

  Json root;
  try {
    root = Json::parse(header.begin(), header.end(), on_event);
  } catch (const Json::exception& e) {
    // what() is "[json.exception.parse_error.101] parse error at line 1, column 7: ...".
    const std::string_view what = e.what();
    const std::size_t id_end = what.find("] ");
    fail_file("header is not valid JSON: ", id_end == std::string_view::npos ? what : what.substr(id_end + 2));
  }

  if (!root.is_object()) {
    fail_file("header is not a JSON object (it is ", detail::kind_name(root), ")");
  }
  for (const auto& entry : root.items()) {
    if (entry.key() == "__metadata__") {
      parse_metadata(entry.value());
    } else {
      parse_tensor(entry.key(), entry.value());
    }
  }
}

inline void SafetensorsFile::parse_metadata(const detail::Json& v) {
  if (!v.is_object()) {
    fail_file("__metadata__ must be an object of strings, but it is ", detail::kind_name(v));
  }
  for (const auto& entry : v.items()) {
    if (!entry.value().is_string()) {
      fail_file("__metadata__ must map strings to strings, but \"", entry.key(), "\" is ",
                detail::kind_name(entry.value()),
                entry.value().is_number() || entry.value().is_boolean() ? " (" + entry.value().dump() + ")" : "");
    }
    metadata_.emplace(entry.key(), entry.value().get<std::string>());
  }
}

inline void SafetensorsFile::parse_tensor(const std::string& name, const detail::Json& v) {
  using detail::Json;
  if (!v.is_object()) {
    fail_file("tensor \"", name, "\": entry must be an object, but it is ", detail::kind_name(v));
  }
  for (const auto& entry : v.items()) {
    if (entry.key() != "dtype" && entry.key() != "shape" && entry.key() != "data_offsets") {
      fail_file("tensor \"", name, "\": unknown field \"", entry.key(), "\" (expected dtype, shape, data_offsets)");
    }
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(field)) fail_file("tensor \"", name, "\": missing field \"", field, "\"");
  }
  const Json& dtype = v.at("dtype");
  const Json& shape = v.at("shape");
  const Json& offsets = v.at("data_offsets");

  TensorInfo t;
  t.name = name;

  const std::optional<Dtype> d =
      dtype.is_string() ? dtype_from_string(dtype.get_ref<const std::string&>()) : std::nullopt;
  if (!d) {
    fail_file("tensor \"", name, "\": unknown or unsupported dtype ", detail::describe(dtype),
              " (supported: F32, F64, F16, BF16, I32, I64)");
  }
  t.dtype = *d;

  if (!shape.is_array()) {
    fail_file("tensor \"", name, "\": shape must be an array of non-negative integers, but it is ",
              detail::kind_name(shape));
  }
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const auto extent = detail::unsigned_integer<std::int64_t>(shape[i]);
    if (!extent) {
      fail_file("tensor \"", name, "\": shape entry ", i, " is ", detail::describe(shape[i]),
                ", not a non-negative integer");
    }
    t.shape.push_back(*extent);
  }

  if (!offsets.is_array() || offsets.size() != 2) {
    fail_file("tensor \"", name, "\": data_offsets must be an array of two integers [begin, end]",
              offsets.is_array() ? ", but it has " + std::to_string(offsets.size()) + " entries"
                                 : ", but it is " + std::string(detail::kind_name(offsets)));
  }
  const auto begin = detail::unsigned_integer<std::size_t>(offsets[0]);
  const auto end = detail::unsigned_integer<std::size_t>(offsets[1]);
  if (!begin || !end) {
    fail_file("tensor \"", name, "\": data_offsets [", detail::describe(offsets[0]), ",", detail::describe(offsets[1]),
              "] are not two non-negative integers");
  }
  if (*begin > *end) {
    fail_file("tensor \"", name, "\": data_offsets [", *begin, ",", *end, "] are not ordered (begin > end)");
  }
  t.begin = *begin;
  t.end = *end;

  const std::optional<std::int64_t> numel = detail::checked_numel(t.shape);
  const std::size_t elem = dtype_size(t.dtype);
  if (!numel || static_cast<std::uint64_t>(*numel) > std::numeric_limits<std::size_t>::max() / elem) {
    fail_file("tensor \"", name, "\": shape ", detail::format_shape(t.shape), " has too many elements");
  }
  const std::size_t expected_bytes = static_cast<std::size_t>(*numel) * elem;
  if (t.end - t.begin != expected_bytes) {
    fail_file("tensor \"", name, "\": data_offsets [", t.begin, ",", t.end, "] span ", t.end - t.begin,
              " bytes, which does not match shape ", detail::format_shape(t.shape), " x ", to_string(t.dtype), " (",
              *numel, " x ", elem, " = ", expected_bytes, " bytes)");
  }
  tensors_.push_back(std::move(t));
}

inline void SafetensorsFile::check_tiling(std::size_t data_size) const {
  // The reference implementation requires the tensors, ordered by offset, to cover the data
  // buffer exactly: each begins where the previous ended, and the last ends at the buffer end.
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const TensorInfo& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return std::pair(a->begin, a->end) < std::pair(b->begin, b->end);
  });
  std::size_t expected = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo* t : by_offset) {
    if (t->begin < expected) {
      fail_file("tensors \"", previous->name, "\" [", previous->begin, ",", previous->end, "] and \"", t->name, "\" [",
                t->begin, ",", t->end, "] overlap");
    }
    if (t->begin > expected) {
      if (previous == nullptr) {
        fail_file("gap in the data buffer: the first tensor \"", t->name, "\" begins at byte ", t->begin, ", not 0");
      }
      fail_file("gap in the data buffer: bytes [", expected, ",", t->begin, ") between \"", previous->name, "\" and \"",
                t->name, "\" belong to no tensor");
    }
    expected = t->end;
    previous = t;
  }
  if (expected != data_size) {
    fail_file("gap in the data buffer: the tensors end at byte ", expected, " but the data buffer has ", data_size,
              " bytes");
  }
}

template <class T>
std::vector<T> SafetensorsFile::read_impl(const TensorInfo& ti, std::string_view api) const {
  constexpr bool want_float = std::is_floating_point_v<T>;
  if (is_floating(ti.dtype) != want_float) {
    fail<io_error>(api, path_.string(), ": tensor \"", ti.name, "\" has dtype ", to_string(ti.dtype),
                   ", which cannot be read as ", detail::element_name<T>(), " (",
                   is_floating(ti.dtype) ? "float" : "integer", " dtypes read only as ",
                   is_floating(ti.dtype) ? "float or double" : "int32 or int64", ")");
  }
  const std::size_t n = static_cast<std::size_t>(ti.numel());
  const char* src = bytes_.data() + data_offset_ + ti.begin;
  std::vector<T> out(n);
  // Elements are copied one at a time through memcpy: the data carries no alignment guarantee.
  auto convert = [&]<class Stored>(auto to_t) {
    for (std::size_t i = 0; i < n; ++i) {
      out[i] = to_t(detail::load_unaligned<Stored>(src + i * sizeof(Stored)), i);
    }
  };
  if constexpr (want_float) {
    auto cast = [](auto v, std::size_t) { return static_cast<T>(v); };
    switch (ti.dtype) {
      case Dtype::F32:
        convert.template operator()<float>(cast);
        break;
      case Dtype::F64:
        convert.template operator()<double>(cast);
        break;
      case Dtype::F16:
        convert.template operator()<std::uint16_t>(
            [](std::uint16_t h, std::size_t) { return static_cast<T>(half_to_float(h)); });
        break;
      case Dtype::BF16:
        convert.template operator()<std::uint16_t>(
            [](std::uint16_t b, std::size_t) { return static_cast<T>(bfloat16_to_float(b)); });
        break;
      default:
        break;  // unreachable: integer dtypes were refused above
    }
  } else {
    auto narrow = [&](auto v, std::size_t i) {
      if (!std::in_range<T>(v)) {
        fail<io_error>(api, path_.string(), ": tensor \"", ti.name, "\" element ", i, " = ", v, " does not fit in ",
                       detail::element_name<T>());
      }
      return static_cast<T>(v);
    };
    switch (ti.dtype) {
      case Dtype::I32:
        convert.template operator()<std::int32_t>(narrow);
        break;
      case Dtype::I64:
        convert.template operator()<std::int64_t>(narrow);
        break;
      default:
        break;  // unreachable: float dtypes were refused above
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

/// Where write_file_durably stages `path`: `<path>.tmp`.
inline std::filesystem::path temporary_path(const std::filesystem::path& path) {
  return std::filesystem::path(path.string() + ".tmp");
}

/// Removes a temporary file that a killed write left next to `path`; true if there was one.
/// A program that writes `path` calls it when it starts (the Trainer does), so that a crash
/// leaves no stale temporary file beyond the next start.
inline bool remove_stale_temporary(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::remove(temporary_path(path), ec);
}

/// Writes `bytes` to `path` so that a crash at any moment leaves either the old file or the
/// new one (POSIX): to `<path>.tmp` (a stale one is replaced), fsync, rename over `path`,
/// fsync of the directory. Every system call is checked; on failure an io_error names the API,
/// the path and the system's reason (a directory at `path`, an unwritable directory, a full
/// disk), and the temporary file is removed.
inline void write_file_durably(const std::filesystem::path& path, std::string_view bytes,
                               std::string_view api = "hybridseq::io::write_file_durably") {
  auto fail_errno = [&](const std::filesystem::path& p, std::string_view what, int err) {
    fail<io_error>(api, p.string(), ": ", what, ": ", std::generic_category().message(err));
  };
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail<io_error>(api, path.string(), ": is a directory");
  const std::filesystem::path tmp = temporary_path(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_errno(tmp, "cannot open the file for writing", errno);
  // From here on a failure removes the temporary file: nothing half-written stays behind.
  auto abandon = [&](std::string_view what, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    fail_errno(tmp, what, err);
  };
  for (std::size_t done = 0; done < bytes.size();) {
    const ::ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) abandon("writing " + std::to_string(bytes.size()) + " bytes failed", n < 0 ? errno : EIO);
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) abandon("fsync failed", errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail_errno(tmp, "close failed", err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail_errno(path, "cannot replace the file", err);
  }
  // The rename is durable only once the directory entry is: fsync the directory too.
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) fail_errno(dir, "cannot open the directory to fsync it", errno);
  const int synced = ::fsync(dfd), err = errno;
  ::close(dfd);
  if (synced != 0) fail_errno(dir, "fsync of the directory failed", err);
}

/// Collects tensors and metadata and writes them as one safetensors file.
///
/// Output is deterministic: tensors are laid out and listed in name order (byte-wise), the
/// header is compact JSON with "__metadata__" first (keys sorted), padded with spaces to a
/// multiple of 8 bytes like the reference implementation. The same content always gives the
/// same bytes, whatever the order of add() calls.
///
///   SafetensorsWriter w;
///   w.set_metadata("format", "pt");
///   w.add<float>("weight", weights, {128, 96});   // std::vector converts to the span
///   w.write("model.safetensors");
class SafetensorsWriter {
 public:
  /// Sets (or replaces) a "__metadata__" entry. Key and value must be valid UTF-8
  /// (value_error otherwise).
  void set_metadata(std::string key, std::string value) {
    static constexpr std::string_view api = "hybridseq::io::SafetensorsWriter::set_metadata";
    if (!detail::is_valid_utf8(key)) fail<value_error>(api, "key is not valid UTF-8");
    if (!detail::is_valid_utf8(value)) {
      fail<value_error>(api, "value of \"", key, "\" is not valid UTF-8");
    }
    if (key == checksum_key) fail<value_error>(api, "\"", key, "\" is reserved for the checksum (see add_checksum)");
    metadata_.insert_or_assign(std::move(key), std::move(value));
  }

  /// Stores a CRC-32 of the tensors' bytes and of the other metadata entries in the file
  /// (`checksum_key`), which every reader of this library verifies on open.
  void add_checksum() { checksum_ = true; }

  /// Adds tensor `name` stored in its native dtype: float -> F32, double -> F64,
  /// int32 -> I32, int64 -> I64. `data` is row-major and copied.
  /// Throws io_error if `name` is already present or is "__metadata__", value_error if it is
  /// not valid UTF-8, shape_error if an extent is negative or data.size() != product(shape).
  template <detail::SafetensorsElement T>
  void add(std::string name, std::span<const T> data, std::vector<std::int64_t> shape) {
    static constexpr std::string_view api = "hybridseq::io::SafetensorsWriter::add";
    check_new_tensor(api, name, data.size(), shape);
    std::vector<char> bytes(data.size_bytes());
    if (!bytes.empty()) std::memcpy(bytes.data(), data.data(), bytes.size());
    tensors_.emplace(std::move(name), Entry{detail::native_dtype<T>(), std::move(shape), std::move(bytes)});
  }

  /// Adds tensor `name` stored as float dtype `target` (F32, F64, F16 or BF16), converting
  /// each float: F16/BF16 round to nearest, ties to even (see float_to_half and
  /// float_to_bfloat16). Same checks as add(); an integer `target` is a value_error.
  void add_as(std::string name, Dtype target, std::span<const float> data, std::vector<std::int64_t> shape) {
    static constexpr std::string_view api = "hybridseq::io::SafetensorsWriter::add_as";
    if (!is_floating(target)) {
      fail<value_error>(api, "tensor \"", name, "\": target dtype ", to_string(target),
                        " is not a float dtype (F32, F64, F16, BF16)");
    }
    check_new_tensor(api, name, data.size(), shape);
    std::vector<char> bytes(data.size() * dtype_size(target));
    auto store = [&](auto convert) {
      for (std::size_t i = 0; i < data.size(); ++i) {
        const auto v = convert(data[i]);
        std::memcpy(bytes.data() + i * sizeof(v), &v, sizeof(v));
      }
    };
    switch (target) {
      case Dtype::F32:
        store([](float v) { return v; });
        break;
      case Dtype::F64:
        store([](float v) { return static_cast<double>(v); });
        break;
      case Dtype::F16:
        store([](float v) { return float_to_half(v); });
        break;
      case Dtype::BF16:
        store([](float v) { return float_to_bfloat16(v); });
        break;
      default:
        break;  // unreachable: integer targets were refused above
    }
    tensors_.emplace(std::move(name), Entry{target, std::move(shape), std::move(bytes)});
  }

  /// The complete file contents.
  std::string serialize() const {
    // ordered_json keeps insertion order: "__metadata__" first, then the tensors in name order
    // (std::map), each with its fields in the reference writer's order.
    nlohmann::ordered_json json = nlohmann::ordered_json::object();
    std::map<std::string, std::string> metadata = metadata_;
    if (checksum_) {
      std::vector<std::span<const char>> data;
      for (const auto& [name, entry] : tensors_) data.emplace_back(entry.bytes);
      metadata.emplace(checksum_key, detail::hex32(detail::content_crc32(data, metadata_, checksum_key)));
    }
    // Python omits "__metadata__" when there is none; do the same.
    if (!metadata.empty()) json["__metadata__"] = metadata;
    std::size_t offset = 0;
    for (const auto& [name, entry] : tensors_) {
      nlohmann::ordered_json& t = json[name];
      t["dtype"] = to_string(entry.dtype);
      t["shape"] = entry.shape;
      t["data_offsets"] = {offset, offset + entry.bytes.size()};
      offset += entry.bytes.size();
    }
    std::string header = json.dump();  // compact; strings were checked to be valid UTF-8
    // The reference writer pads with spaces so that the data buffer starts 8-byte aligned.
    header.append((8 - header.size() % 8) % 8, ' ');

    std::string out;
    out.reserve(8 + header.size() + offset);
    const auto header_len = static_cast<std::uint64_t>(header.size());
    // The length prefix is a little-endian u64, which is the host's own layout.
    out.append(reinterpret_cast<const char*>(&header_len), sizeof(header_len));
    out += header;
    for (const auto& [name, entry] : tensors_) out.append(entry.bytes.begin(), entry.bytes.end());
    return out;
  }

  /// Writes the file durably, replacing any existing one (see io::write_file_durably): after
  /// a crash `path` holds either the old content or the new, never a torn file. io_error
  /// naming the path and the system's reason on failure; no temporary file is left behind.
  void write(const std::filesystem::path& path) const {
    write_file_durably(path, serialize(), "hybridseq::io::SafetensorsWriter::write");
  }

 private:
  struct Entry {
    Dtype dtype;
    std::vector<std::int64_t> shape;
    std::vector<char> bytes;  // little-endian element bytes, as they go into the file
  };

  void check_new_tensor(std::string_view api, const std::string& name, std::size_t size,
                        const std::vector<std::int64_t>& shape) const {
    if (name == "__metadata__") {
      fail<io_error>(api, "the tensor name \"__metadata__\" is reserved by the format");
    }
    if (!detail::is_valid_utf8(name)) fail<value_error>(api, "tensor name is not valid UTF-8");
    if (tensors_.contains(name)) fail<io_error>(api, "duplicate tensor name \"", name, "\"");
    const std::optional<std::int64_t> numel = detail::checked_numel(shape);
    if (!numel) {
      fail<shape_error>(api, "tensor \"", name, "\": shape ", detail::format_shape(shape),
                        " has a negative extent or too many elements");
    }
    if (static_cast<std::uint64_t>(*numel) != size) {
      fail<shape_error>(api, "tensor \"", name, "\": ", size, " elements given for shape ", detail::format_shape(shape),
                        " (", *numel, " elements)");
    }
  }

  std::map<std::string, std::string> metadata_;
  std::map<std::string, Entry> tensors_;  // ordered by name: the deterministic file layout
  bool checksum_ = false;
};

}  // namespace hybridseq::io
