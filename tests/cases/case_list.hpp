#pragma once
// A list of test cases (tests/cases/*.hpp describe them) and the loop over it, shared by the
// testbed (tests/support/testbed.hpp) and the microbenchmarks (bench/).

#include <string_view>

namespace hybridseq::cases {

template <class... Cases>
struct CaseList {};

template <class Case>
inline constexpr bool has_golden = !std::string_view(Case::golden).empty();

/// Calls `f.template operator()<Case>()` for each case.
template <class... Cases, class F>
void for_each_case(CaseList<Cases...>, F&& f) {
  (f.template operator()<Cases>(), ...);
}

}  // namespace hybridseq::cases
