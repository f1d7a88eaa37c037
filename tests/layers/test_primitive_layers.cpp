// Every primitive layer through the testbed: double-precision gradient check, PyTorch
// golden comparison in float, save/load round trip. Cases live in tests/cases.
#include <catch2/catch.hpp>

#include "cases/primitive_cases.hpp"
#include "support/spaces.hpp"
#include "support/testbed.hpp"

using namespace hybridseq;

HYBRIDSEQ_SPACE_TEST_CASE("primitive layers: finite-difference gradients in double", "[layers][gradcheck]") {
  testing::for_each_case(cases::PrimitiveCases{},
                         [&]<class Case>() { testing::check_gradients<Case, TestType>(1e-6); });
}

HYBRIDSEQ_SPACE_TEST_CASE("benchmark configurations: finite-difference gradients in double", "[layers][gradcheck]") {
  testing::for_each_case(cases::BenchCases{}, [&]<class Case>() { testing::check_gradients<Case, TestType>(1e-6); });
}

HYBRIDSEQ_SPACE_TEST_CASE("primitive layers: PyTorch goldens in float", "[layers][golden]") {
  testing::for_each_golden_case(cases::PrimitiveCases{},
                                [&]<class Case>() { testing::check_golden<Case, TestType>(); });
}

HYBRIDSEQ_SPACE_TEST_CASE("primitive layers: save/load round trip", "[layers][io]") {
  testing::for_each_case(cases::PrimitiveCases{}, [&]<class Case>() { testing::check_round_trip<Case, TestType>(); });
}
