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
/// Supported dtypes: F32, F64, F16, BF16, I32, I64. Host-only code.

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <concepts>
#include <cstddef>
#include <cstdint>
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

#include "../core/error.hpp"

// Boost.PropertyTree's JSON parser pulls in <boost/bind.hpp>, which declares the Bind
// placeholders globally (the parser relies on that) and prints a deprecation #pragma message
// unless BOOST_BIND_GLOBAL_PLACEHOLDERS is defined. Defining it only silences the message;
// push/pop keeps the macro from leaking into code that includes this header.
#pragma push_macro("BOOST_BIND_GLOBAL_PLACEHOLDERS")
#ifndef BOOST_BIND_GLOBAL_PLACEHOLDERS
#define BOOST_BIND_GLOBAL_PLACEHOLDERS
#endif
#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>
#include <boost/version.hpp>
#pragma pop_macro("BOOST_BIND_GLOBAL_PLACEHOLDERS")

// The typed JSON reading below hooks into the parser behind read_json (see
// detail::KindRecordingCallbacks); that parser and its callback interface exist since 1.59.
static_assert(BOOST_VERSION >= 105900, "hybridseq::io needs Boost >= 1.59 (PropertyTree JSON v2)");

namespace hybridseq::io {

// The format stores little-endian data and the reader/writer copy it verbatim.
static_assert(std::endian::native == std::endian::little,
              "hybridseq::io::safetensors assumes a little-endian host");
static_assert(std::numeric_limits<float>::is_iec559 && std::numeric_limits<double>::is_iec559,
              "hybridseq::io::safetensors assumes IEEE-754 float and double");

// ---------------------------------------------------------------------------------------------
// Dtypes
// ---------------------------------------------------------------------------------------------

/// The element types this library reads and writes (a subset of the safetensors dtypes).
enum class Dtype { F32, F64, F16, BF16, I32, I64 };

/// The safetensors spelling of `d`: "F32", "F64", "F16", "BF16", "I32", "I64".
inline std::string to_string(Dtype d) {
  switch (d) {
    case Dtype::F32: return "F32";
    case Dtype::F64: return "F64";
    case Dtype::F16: return "F16";
    case Dtype::BF16: return "BF16";
    case Dtype::I32: return "I32";
    case Dtype::I64: return "I64";
  }
  return "<invalid Dtype>";
}

inline std::ostream& operator<<(std::ostream& os, Dtype d) { return os << to_string(d); }

/// Bytes per element of `d`.
inline std::size_t dtype_size(Dtype d) {
  switch (d) {
    case Dtype::F16:
    case Dtype::BF16: return 2;
    case Dtype::F32:
    case Dtype::I32: return 4;
    case Dtype::F64:
    case Dtype::I64: return 8;
  }
  return 0;
}

/// True for F32, F64, F16, BF16.
inline bool is_floating(Dtype d) { return d != Dtype::I32 && d != Dtype::I64; }

/// Parses the safetensors spelling ("F32", ...); nullopt for anything this library does not
/// support (including valid safetensors dtypes such as "U8" or "BOOL").
inline std::optional<Dtype> dtype_from_string(std::string_view s) {
  for (Dtype d : {Dtype::F32, Dtype::F64, Dtype::F16, Dtype::BF16, Dtype::I32, Dtype::I64}) {
    if (s == to_string(d)) return d;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Half-precision conversions (IEEE binary16 and bfloat16), bit-exact
// ---------------------------------------------------------------------------------------------

/// binary16 bits -> float. Exact: every binary16 value (including subnormals, ±inf and NaN,
/// whose payload is kept) is representable as a float.
constexpr float half_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1Fu;
  std::uint32_t mantissa = h & 0x3FFu;
  std::uint32_t bits = 0;
  if (exponent == 0x1F) {  // inf or NaN: max exponent, mantissa (NaN payload) shifted up
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {  // normal: rebias 15 -> 127
    bits = sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {  // ±0
    bits = sign;
  } else {
    // Subnormal, value = mantissa * 2^-24: a float represents it as a normal number, so
    // shift the leading 1 up to the implicit-bit position and lower the exponent to match.
    std::uint32_t e = 127 - 14;  // biased float exponent of 2^-14, the binary16 subnormal scale
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mantissa & 0x3FFu) << 13);
  }
  return std::bit_cast<float>(bits);
}

/// float -> binary16 bits, rounding to nearest, ties to even. Values at or beyond 65520
/// become ±inf; tiny values become subnormals or ±0; NaN stays a (quiet) NaN.
constexpr std::uint16_t float_to_half(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t a = x & 0x7FFFFFFFu;  // |f|
  if (a >= 0x7F800000u) {                   // inf, or NaN (forced quiet, top payload kept)
    return static_cast<std::uint16_t>(sign | 0x7C00u |
                                      (a > 0x7F800000u ? 0x200u | ((a >> 13) & 0x3FFu) : 0u));
  }
  if (a >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // >= 65520: inf
  if (a < 0x38800000u) {  // below 2^-14, the smallest normal binary16: subnormal or zero
    if (a <= 0x33000000u) return sign;  // <= 2^-25 (half the smallest subnormal; tie -> 0)
    // Count units of 2^-24: the full float significand (with implicit bit) is scaled by
    // 2^(e-150); dividing by 2^-24 is a right shift by 126 - e (here 14..24).
    const std::uint32_t e = a >> 23;
    const std::uint32_t significand = (a & 0x7FFFFFu) | 0x800000u;
    const std::uint32_t shift = 126 - e;
    std::uint32_t q = significand >> shift;
    const std::uint32_t rem = significand & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1);
    // Rounding up may carry into 0x400, the smallest normal: that is the correct encoding.
    if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
    return static_cast<std::uint16_t>(sign | q);
  }
  // Normal: rebias 127 -> 15, keep the top 10 mantissa bits, round on the 13 dropped ones.
  // A carry out of the mantissa correctly bumps the exponent (65520 was handled above).
  std::uint32_t h = ((a >> 23) - (127 - 15)) << 10 | ((a >> 13) & 0x3FFu);
  const std::uint32_t rem = a & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

/// bfloat16 bits -> float. Exact: bfloat16 is the top half of a float.
constexpr float bfloat16_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

/// float -> bfloat16 bits, rounding to nearest, ties to even (overflow rounds to ±inf, as in
/// PyTorch); NaN stays a (quiet) NaN.
constexpr std::uint16_t float_to_bfloat16(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: rounding could turn the payload into inf
    return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  }
  const std::uint32_t rounded = x + 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(rounded >> 16);
}

// ---------------------------------------------------------------------------------------------
// Implementation details
// ---------------------------------------------------------------------------------------------

namespace detail {

/// Element types a tensor can be read into or written from.
template <class T>
concept SafetensorsElement = std::same_as<T, float> || std::same_as<T, double> ||
                             std::same_as<T, std::int32_t> || std::same_as<T, std::int64_t>;

template <SafetensorsElement T>
constexpr std::string_view element_name() {
  if constexpr (std::same_as<T, float>) return "float";
  else if constexpr (std::same_as<T, double>) return "double";
  else if constexpr (std::same_as<T, std::int32_t>) return "int32";
  else return "int64";
}

template <SafetensorsElement T>
constexpr Dtype native_dtype() {
  if constexpr (std::same_as<T, float>) return Dtype::F32;
  else if constexpr (std::same_as<T, double>) return Dtype::F64;
  else if constexpr (std::same_as<T, std::int32_t>) return Dtype::I32;
  else return Dtype::I64;
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

/// The JSON value kinds. Boost.PropertyTree stores every scalar as a string and both arrays
/// and objects as child lists, so `"2"` vs `2`, `[]` vs `{}` vs `""` would be
/// indistinguishable from the ptree alone; the kinds are recorded during parsing instead.
enum class JsonKind { null, boolean, number, string, array, object };

inline std::string_view kind_name(JsonKind k) {
  switch (k) {
    case JsonKind::null: return "null";
    case JsonKind::boolean: return "a boolean";
    case JsonKind::number: return "a number";
    case JsonKind::string: return "a string";
    case JsonKind::array: return "an array";
    case JsonKind::object: return "an object";
  }
  return "?";
}

/// A parsed JSON value with its kind. Object members keep document order and duplicates
/// (so that duplicate keys can be detected and refused); array elements have empty keys.
struct JsonMember;
struct JsonValue {
  JsonKind kind = JsonKind::null;
  std::string text;  ///< string contents, or the literal text of a number/boolean/null
  std::vector<JsonMember> members;
};
struct JsonMember {
  std::string key;  ///< empty for array elements
  JsonValue value;
};

namespace bpt = boost::property_tree;

/// Boost's standard ptree-building callbacks, plus a record of the kind of every value in
/// document order. The parser template calls the callback type statically, so hiding the
/// base members is enough to observe each event; the ptree is still built by the base.
/// Document order equals a pre-order walk of the resulting ptree, which is how the kinds are
/// matched back to nodes (see attach_kinds).
class KindRecordingCallbacks : public bpt::json_parser::detail::standard_callbacks<bpt::ptree> {
  using base = bpt::json_parser::detail::standard_callbacks<bpt::ptree>;

 public:
  std::vector<JsonKind> kinds;

  void on_null() {
    base::on_null();
    kinds.push_back(JsonKind::null);
  }
  void on_boolean(bool b) {
    base::on_boolean(b);
    kinds.push_back(JsonKind::boolean);
  }
  // The parser reports a number either whole (on_number, random-access input) or digit by
  // digit (on_begin_number ... on_end_number, input iterators); record it once in either case.
  template <class Range>
  void on_number(Range code_units) {
    base::on_number(code_units);
    kinds.push_back(JsonKind::number);
  }
  void on_begin_number() {
    base::on_begin_number();
    kinds.push_back(JsonKind::number);
  }
  void on_begin_string() {
    base::on_begin_string();
    if (!is_key()) kinds.push_back(JsonKind::string);  // object keys are not values
  }
  void on_begin_array() {
    base::on_begin_array();
    kinds.push_back(JsonKind::array);
  }
  void on_begin_object() {
    base::on_begin_object();
    kinds.push_back(JsonKind::object);
  }
};

/// Builds the typed tree by walking `node` in pre-order alongside `kinds`. Returns false if the
/// two disagree (which would mean a Boost behaviour change, not a bad file).
inline bool attach_kinds(const bpt::ptree& node, const std::vector<JsonKind>& kinds,
                         std::size_t& next, JsonValue& out) {
  if (next >= kinds.size()) return false;
  out.kind = kinds[next++];
  out.text = node.data();
  const bool container = out.kind == JsonKind::array || out.kind == JsonKind::object;
  if (!container && !node.empty()) return false;
  out.members.reserve(node.size());
  for (const auto& [key, child] : node) {
    out.members.push_back(JsonMember{key, JsonValue{}});
    if (!attach_kinds(child, kinds, next, out.members.back().value)) return false;
  }
  return true;
}

/// Deepest bracket nesting in `text`, ignoring brackets inside strings. Boost's parser is
/// recursive-descent without a depth limit, so a header of a million '[' would overflow the
/// stack; this cheap scan lets the reader refuse such input before parsing.
inline std::size_t json_nesting_depth(std::string_view text) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

/// A safetensors header nests three levels deep ({ "t": { "shape": [ ); allow generous slack.
inline constexpr std::size_t max_json_depth = 64;

/// Parses a non-negative JSON integer written as plain digits (no sign, fraction or exponent)
/// into `U`; nullopt for anything else, including values that do not fit.
template <class U>
std::optional<U> parse_unsigned_json_integer(const JsonValue& v) {
  if (v.kind != JsonKind::number || v.text.empty() || v.text[0] < '0' || v.text[0] > '9') {
    return std::nullopt;
  }
  U value{};
  const char* first = v.text.data();
  const char* last = first + v.text.size();
  const auto [ptr, ec] = std::from_chars(first, last, value);
  if (ec != std::errc{} || ptr != last) return std::nullopt;
  return value;
}

/// How a JSON value looks in an error message: its text for scalars, its kind otherwise.
inline std::string describe(const JsonValue& v) {
  switch (v.kind) {
    case JsonKind::string: return "\"" + v.text + "\"";
    case JsonKind::number:
    case JsonKind::boolean:
    case JsonKind::null: return v.text;
    default: return std::string(kind_name(v.kind));
  }
}

/// Appends `s` as a JSON string literal. `s` must be valid UTF-8 (checked by the writer);
/// only the characters JSON requires are escaped, everything else is copied verbatim.
inline void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          constexpr char hex[] = "0123456789abcdef";
          out += "\\u00";
          out += hex[(static_cast<unsigned char>(c) >> 4) & 0xF];
          out += hex[static_cast<unsigned char>(c) & 0xF];
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

/// Strict UTF-8 check (no overlong forms, surrogates or code points above U+10FFFF): the
/// reference reader rejects headers that are not valid UTF-8, so the writer must not emit them.
inline bool is_valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    std::uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1Fu;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0Fu;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07u;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (std::size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3Fu);
    }
    const std::uint32_t min_for_len[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_for_len[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

inline constexpr std::string_view read_api = "hybridseq::io::read_safetensors";

}  // namespace detail

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
                     detail::format_shape(ti.shape), ", expected ",
                     detail::format_shape(expected_shape));
    }
    return read_impl<T>(ti, read_tensor_api);
  }

  /// Convenience overload so that `read<float>("w", {128, 96})` works.
  template <detail::SafetensorsElement T>
  std::vector<T> read(std::string_view name,
                      std::initializer_list<std::int64_t> expected_shape) const {
    return read<T>(name,
                   std::span<const std::int64_t>(expected_shape.begin(), expected_shape.size()));
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
    const auto it = std::lower_bound(
        tensors_.begin(), tensors_.end(), name,
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
    fail<io_error>(api, path_.string(), ": no tensor named \"", name, "\" (the file has ",
                   tensors_.size(), " tensor", tensors_.size() == 1 ? "" : "s",
                   tensors_.empty() ? "" : ": ", known, ")");
  }

  template <class T>
  std::vector<T> read_impl(const TensorInfo& ti, std::string_view api) const;

  void parse_header(std::string_view header);
  void parse_metadata(const detail::JsonValue& v);
  void parse_tensor(const std::string& name, const detail::JsonValue& v);
  void check_tiling(std::size_t data_size) const;

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
  const std::size_t file_size = f.bytes_.size();

  if (file_size < 8) {
    f.fail_file("file is ", file_size,
                " bytes, shorter than the 8-byte header length prefix of a safetensors file");
  }
  const auto header_len = detail::load_unaligned<std::uint64_t>(f.bytes_.data());
  // Compared without adding 8 to header_len, which could overflow for a corrupt prefix.
  if (header_len > file_size - 8) {
    f.fail_file("oversized header: header length ", header_len, " exceeds the ", file_size - 8,
                " bytes that follow the length prefix (file size ", file_size, ")");
  }
  f.data_offset_ = 8 + static_cast<std::size_t>(header_len);
  f.parse_header(std::string_view(f.bytes_.data() + 8, static_cast<std::size_t>(header_len)));

  const std::size_t data_size = file_size - f.data_offset_;
  for (const TensorInfo& t : f.tensors_) {
    if (t.end > data_size) {
      f.fail_file("truncated: tensor \"", t.name, "\" has data_offsets [", t.begin, ",", t.end,
                  "] but the data buffer has only ", data_size, " bytes");
    }
  }
  f.check_tiling(data_size);

  std::sort(f.tensors_.begin(), f.tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  return f;
}

inline void SafetensorsFile::parse_header(std::string_view header) {
  using detail::JsonKind;
  if (const std::size_t depth = detail::json_nesting_depth(header);
      depth > detail::max_json_depth) {
    fail_file("header is not a safetensors header: JSON nesting depth ", depth,
              " exceeds the limit of ", detail::max_json_depth);
  }

  detail::KindRecordingCallbacks callbacks;
  try {
    boost::property_tree::json_parser::detail::utf8_utf8_encoding encoding;
    boost::property_tree::json_parser::detail::read_json_internal(
        header.data(), header.data() + header.size(), encoding, callbacks, path_.string());
  } catch (const boost::property_tree::json_parser_error& e) {
    fail_file("header is not valid JSON: ", e.message(), " (line ", e.line(), ")");
  }
  detail::JsonValue root;
  std::size_t next = 0;
  if (!detail::attach_kinds(callbacks.output(), callbacks.kinds, next, root) ||
      next != callbacks.kinds.size()) {
    fail_file("internal error: Boost.PropertyTree JSON events do not match the parsed tree");
  }

  if (root.kind != JsonKind::object) {
    fail_file("header is not a JSON object (it is ", detail::kind_name(root.kind), ")");
  }
  std::set<std::string_view> seen;
  for (const auto& [key, value] : root.members) {
    if (!seen.insert(key).second) fail_file("duplicate entry \"", key, "\" in the header");
    if (key == "__metadata__") {
      parse_metadata(value);
    } else {
      parse_tensor(key, value);
    }
  }
}

inline void SafetensorsFile::parse_metadata(const detail::JsonValue& v) {
  using detail::JsonKind;
  if (v.kind != JsonKind::object) {
    fail_file("__metadata__ must be an object of strings, but it is ", detail::kind_name(v.kind));
  }
  for (const auto& [key, value] : v.members) {
    if (value.kind != JsonKind::string) {
      fail_file("__metadata__ must map strings to strings, but \"", key, "\" is ",
                detail::kind_name(value.kind), " (", detail::describe(value), ")");
    }
    if (!metadata_.emplace(key, value.text).second) {
      fail_file("duplicate key \"", key, "\" in __metadata__");
    }
  }
}

inline void SafetensorsFile::parse_tensor(const std::string& name, const detail::JsonValue& v) {
  using detail::JsonKind;
  if (v.kind != JsonKind::object) {
    fail_file("tensor \"", name, "\": entry must be an object, but it is ",
              detail::kind_name(v.kind));
  }
  const detail::JsonValue* dtype = nullptr;
  const detail::JsonValue* shape = nullptr;
  const detail::JsonValue* offsets = nullptr;
  for (const auto& [key, value] : v.members) {
    const detail::JsonValue** slot = key == "dtype"          ? &dtype
                                     : key == "shape"        ? &shape
                                     : key == "data_offsets" ? &offsets
                                                             : nullptr;
    if (slot == nullptr) {
      fail_file("tensor \"", name, "\": unknown field \"", key,
                "\" (expected dtype, shape, data_offsets)");
    }
    if (*slot != nullptr) fail_file("tensor \"", name, "\": duplicate field \"", key, "\"");
    *slot = &value;
  }
  if (!dtype || !shape || !offsets) {
    fail_file("tensor \"", name, "\": missing field \"",
              !dtype ? "dtype" : (!shape ? "shape" : "data_offsets"), "\"");
  }

  TensorInfo t;
  t.name = name;

  const std::optional<Dtype> d =
      dtype->kind == JsonKind::string ? dtype_from_string(dtype->text) : std::nullopt;
  if (!d) {
    fail_file("tensor \"", name, "\": unknown or unsupported dtype ", detail::describe(*dtype),
              " (supported: F32, F64, F16, BF16, I32, I64)");
  }
  t.dtype = *d;

  if (shape->kind != JsonKind::array) {
    fail_file("tensor \"", name, "\": shape must be an array of non-negative integers, but it is ",
              detail::kind_name(shape->kind));
  }
  for (std::size_t i = 0; i < shape->members.size(); ++i) {
    const detail::JsonValue& e = shape->members[i].value;
    const auto extent = detail::parse_unsigned_json_integer<std::int64_t>(e);
    if (!extent) {
      fail_file("tensor \"", name, "\": shape entry ", i, " is ", detail::describe(e),
                ", not a non-negative integer");
    }
    t.shape.push_back(*extent);
  }

  if (offsets->kind != JsonKind::array || offsets->members.size() != 2) {
    fail_file("tensor \"", name, "\": data_offsets must be an array of two integers [begin, end]",
              offsets->kind == JsonKind::array
                  ? ", but it has " + std::to_string(offsets->members.size()) + " entries"
                  : ", but it is " + std::string(detail::kind_name(offsets->kind)));
  }
  const auto begin = detail::parse_unsigned_json_integer<std::size_t>(offsets->members[0].value);
  const auto end = detail::parse_unsigned_json_integer<std::size_t>(offsets->members[1].value);
  if (!begin || !end) {
    fail_file("tensor \"", name, "\": data_offsets [", detail::describe(offsets->members[0].value),
              ",", detail::describe(offsets->members[1].value),
              "] are not two non-negative integers");
  }
  if (*begin > *end) {
    fail_file("tensor \"", name, "\": data_offsets [", *begin, ",", *end,
              "] are not ordered (begin > end)");
  }
  t.begin = *begin;
  t.end = *end;

  const std::optional<std::int64_t> numel = detail::checked_numel(t.shape);
  const std::size_t elem = dtype_size(t.dtype);
  if (!numel ||
      static_cast<std::uint64_t>(*numel) > std::numeric_limits<std::size_t>::max() / elem) {
    fail_file("tensor \"", name, "\": shape ", detail::format_shape(t.shape),
              " has too many elements");
  }
  const std::size_t expected_bytes = static_cast<std::size_t>(*numel) * elem;
  if (t.end - t.begin != expected_bytes) {
    fail_file("tensor \"", name, "\": data_offsets [", t.begin, ",", t.end, "] span ",
              t.end - t.begin, " bytes, which does not match shape ", detail::format_shape(t.shape),
              " x ", to_string(t.dtype), " (", *numel, " x ", elem, " = ", expected_bytes,
              " bytes)");
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
      fail_file("tensors \"", previous->name, "\" [", previous->begin, ",", previous->end,
                "] and \"", t->name, "\" [", t->begin, ",", t->end, "] overlap");
    }
    if (t->begin > expected) {
      if (previous == nullptr) {
        fail_file("gap in the data buffer: the first tensor \"", t->name, "\" begins at byte ",
                  t->begin, ", not 0");
      }
      fail_file("gap in the data buffer: bytes [", expected, ",", t->begin, ") between \"",
                previous->name, "\" and \"", t->name, "\" belong to no tensor");
    }
    expected = t->end;
    previous = t;
  }
  if (expected != data_size) {
    fail_file("gap in the data buffer: the tensors end at byte ", expected,
              " but the data buffer has ", data_size, " bytes");
  }
}

template <class T>
std::vector<T> SafetensorsFile::read_impl(const TensorInfo& ti, std::string_view api) const {
  constexpr bool want_float = std::is_floating_point_v<T>;
  if (is_floating(ti.dtype) != want_float) {
    fail<io_error>(api, path_.string(), ": tensor \"", ti.name, "\" has dtype ",
                   to_string(ti.dtype), ", which cannot be read as ", detail::element_name<T>(),
                   " (", is_floating(ti.dtype) ? "float" : "integer", " dtypes read only as ",
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
      case Dtype::F32: convert.template operator()<float>(cast); break;
      case Dtype::F64: convert.template operator()<double>(cast); break;
      case Dtype::F16:
        convert.template operator()<std::uint16_t>(
            [](std::uint16_t h, std::size_t) { return static_cast<T>(half_to_float(h)); });
        break;
      case Dtype::BF16:
        convert.template operator()<std::uint16_t>(
            [](std::uint16_t b, std::size_t) { return static_cast<T>(bfloat16_to_float(b)); });
        break;
      default: break;  // unreachable: integer dtypes were refused above
    }
  } else {
    auto narrow = [&](auto v, std::size_t i) {
      if (!std::in_range<T>(v)) {
        fail<io_error>(api, path_.string(), ": tensor \"", ti.name, "\" element ", i, " = ", v,
                       " does not fit in ", detail::element_name<T>());
      }
      return static_cast<T>(v);
    };
    switch (ti.dtype) {
      case Dtype::I32: convert.template operator()<std::int32_t>(narrow); break;
      case Dtype::I64: convert.template operator()<std::int64_t>(narrow); break;
      default: break;  // unreachable: float dtypes were refused above
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

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
    metadata_.insert_or_assign(std::move(key), std::move(value));
  }

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
    tensors_.emplace(std::move(name),
                     Entry{detail::native_dtype<T>(), std::move(shape), std::move(bytes)});
  }

  /// Adds tensor `name` stored as float dtype `target` (F32, F64, F16 or BF16), converting
  /// each float: F16/BF16 round to nearest, ties to even (see float_to_half and
  /// float_to_bfloat16). Same checks as add(); an integer `target` is a value_error.
  void add_as(std::string name, Dtype target, std::span<const float> data,
              std::vector<std::int64_t> shape) {
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
      case Dtype::F32: store([](float v) { return v; }); break;
      case Dtype::F64: store([](float v) { return static_cast<double>(v); }); break;
      case Dtype::F16: store([](float v) { return float_to_half(v); }); break;
      case Dtype::BF16: store([](float v) { return float_to_bfloat16(v); }); break;
      default: break;  // unreachable: integer targets were refused above
    }
    tensors_.emplace(std::move(name), Entry{target, std::move(shape), std::move(bytes)});
  }

  /// The complete file contents.
  std::string serialize() const {
    std::string header = "{";
    bool first = true;
    auto separate = [&] {
      if (!first) header += ',';
      first = false;
    };
    // Python omits "__metadata__" when there is none; do the same.
    if (!metadata_.empty()) {
      separate();
      header += "\"__metadata__\":{";
      bool first_key = true;
      for (const auto& [key, value] : metadata_) {
        if (!first_key) header += ',';
        first_key = false;
        detail::append_json_string(header, key);
        header += ':';
        detail::append_json_string(header, value);
      }
      header += '}';
    }
    std::size_t offset = 0;
    for (const auto& [name, entry] : tensors_) {  // std::map: name order
      separate();
      detail::append_json_string(header, name);
      header += ":{\"dtype\":\"" + to_string(entry.dtype) + "\",\"shape\":[";
      for (std::size_t i = 0; i < entry.shape.size(); ++i) {
        if (i != 0) header += ',';
        header += std::to_string(entry.shape[i]);
      }
      header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
                std::to_string(offset + entry.bytes.size()) + "]}";
      offset += entry.bytes.size();
    }
    header += '}';
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

  /// Writes the file (replacing any existing one). io_error naming the path on failure.
  void write(const std::filesystem::path& path) const {
    static constexpr std::string_view api = "hybridseq::io::SafetensorsWriter::write";
    const std::string bytes = serialize();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) fail<io_error>(api, path.string(), ": cannot open the file for writing");
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) fail<io_error>(api, path.string(), ": writing ", bytes.size(), " bytes failed");
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
      fail<shape_error>(api, "tensor \"", name, "\": ", size, " elements given for shape ",
                        detail::format_shape(shape), " (", *numel, " elements)");
    }
  }

  std::map<std::string, std::string> metadata_;
  std::map<std::string, Entry> tensors_;  // ordered by name: the deterministic file layout
};

}  // namespace hybridseq::io
