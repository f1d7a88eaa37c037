#pragma once
/// \file
/// The hybridseq error hierarchy. Every host-side check throws one of these, with a message
/// that starts with the API name and states the actual values, e.g.
///   "hybridseq::layers::Linear::forward: x is (2,17,96), expected (B,T,128)".
/// Device code never throws.

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace hybridseq {

/// Base of every exception hybridseq throws.
class error : public std::runtime_error {
 public:
  explicit error(const std::string& what) : std::runtime_error(what) {}
};

/// A tensor has the wrong rank or extents.
class shape_error : public error {
 public:
  using error::error;
};

/// A value is out of its allowed range: token id ≥ vocab, non-finite input, bad option.
class value_error : public error {
 public:
  using error::error;
};

/// A file is corrupt, truncated, of the wrong format, or does not match the model.
class io_error : public error {
 public:
  using error::error;
};

/// A configuration cannot be honoured: e.g. a sequence length a segment scheme cannot take.
class config_error : public error {
 public:
  using error::error;
};

namespace detail {

/// Concatenates its arguments with operator<< into one string.
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

}  // namespace detail

/// Throws `E` with message "<api>: <args...>".
template <class E = error, class... Args>
[[noreturn]] void fail(std::string_view api, const Args&... args) {
  throw E(detail::concat(api, ": ", args...));
}

}  // namespace hybridseq
