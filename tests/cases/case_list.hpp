#pragma once
// A list of test cases (tests/cases/*.hpp describe them) and the loop over it, shared by the
// testbed (tests/support/testbed.hpp) and the microbenchmarks (bench/).

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace hybridseq::cases {

template <class... Cases>
struct CaseList {};

template <class Case>
inline constexpr bool has_golden = !std::string_view(Case::golden).empty();

/// A case name as a template argument: `LayerCase<RmsNormOf6, "rmsnorm", 2, 3>`.
template <std::size_t N>
struct CaseName {
  constexpr CaseName(const char (&s)[N]) { std::copy_n(s, N, chars); }  // NOLINT: implicit by design
  char chars[N];
};

/// The plain case: layer template `L<T, Space>` with default options, named `Name`, checked at
/// (Batch, Time), and compared with the golden file of the same name when `Golden`. Cases with
/// options or a special forward derive from it and add them.
template <template <class, class> class L, CaseName Name, int Batch, int Time, bool Golden = true>
struct LayerCase {
  template <class T, class S>
  using Layer = L<T, S>;
  static constexpr const char* name = Name.chars;
  static constexpr const char* golden = Golden ? Name.chars : "";
  static constexpr int batch = Batch, time = Time;
};

/// Layer template L<Shape, T, Space> with its shape bound: `Shaped<Linear, LinearShape{5, 7}>::Layer`.
template <template <auto, class, class> class L, auto Shape>
struct Shaped {
  template <class T, class S>
  using Layer = L<Shape, T, S>;
};

/// LayerCase of L<Shape, T, Space>: `ShapedCase<RmsNorm, 6, "rmsnorm", 2, 3>`. A struct, not an
/// alias template: nvcc 13 cannot emit a namespace-scope use of an alias template whose
/// arguments are class-type constants (it names undeclared template parameter objects).
template <template <auto, class, class> class L, auto Shape, CaseName Name, int Batch, int Time, bool Golden = true>
struct ShapedCase : LayerCase<Shaped<L, Shape>::template Layer, Name, Batch, Time, Golden> {};

/// Calls `f.template operator()<Case>()` for each case.
template <class... Cases, class F>
void for_each_case(CaseList<Cases...>, F&& f) {
  (f.template operator()<Cases>(), ...);
}

}  // namespace hybridseq::cases
