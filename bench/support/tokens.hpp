#pragma once
// A fixed pseudo-random token pattern for benchmarks: ids(k) = ((k + shift) · 7919) mod vocab
// over the flat (B, T) tensor. A free function: nvcc accepts device lambdas only in functions
// whose address can be taken (not in constructors).
#include <cstdint>

#include <hybridseq/core/spaces.hpp>

namespace hybridseq::bench {

template <class Space>
void fill_tokens(const Tensor<std::int32_t**, Space>& ids, std::int64_t vocab, std::int64_t shift = 0) {
  const auto flat = ids;
  Kokkos::parallel_for(
      "hybridseq::bench::fill_tokens", Kokkos::RangePolicy<Space>(0, std::int64_t(ids.span())),
      KOKKOS_LAMBDA(std::int64_t k) { flat.data()[k] = std::int32_t(((k + shift) * 7919) % vocab); });
}

}  // namespace hybridseq::bench
