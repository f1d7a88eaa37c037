#pragma once
/// \file
/// Naive GEMM oracle: triple loop on the host with long-double accumulation.

#include <cstdint>

#include "../gemm.hpp"

namespace hybridseq::kernels::reference {

/// C = alpha · op(A) · op(B) + beta · C on host views.
template <class T, class ViewA, class ViewB, class ViewC>
void gemm(Op op_a, Op op_b, T alpha, const ViewA& a, const ViewB& b, T beta, const ViewC& c) {
  const bool ta = op_a == Op::transpose, tb = op_b == Op::transpose;
  const std::int64_t m = c.extent(0), n = c.extent(1), k = ta ? a.extent(0) : a.extent(1);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      long double acc = 0;
      for (std::int64_t p = 0; p < k; ++p)
        acc += static_cast<long double>(ta ? a(p, i) : a(i, p)) * (tb ? b(j, p) : b(p, j));
      c(i, j) = static_cast<T>(alpha * acc + (beta == T(0) ? 0 : beta * c(i, j)));
    }
}

}  // namespace hybridseq::kernels::reference
