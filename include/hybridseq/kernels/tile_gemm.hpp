#pragma once
/// \file
/// The register-blocked micro-kernel behind every tile product of the tiled attention kernel,
/// and behind the host float products that it runs faster than BLAS (gemm.hpp):
///
///   C (m × n) = or += α · A (m × k) · B (k × n),   or   C = diag(s) · C + α · A · B,
///   each optionally + 1 · biasᵀ (the bias added to every row)
///
/// The last form, C's rows scaled as they are added to, is the online softmax's correction of
/// the output accumulator (O ← diag(e^(m_old − m)) · O + P · V) done in the product's epilogue,
/// where C is loaded anyway, instead of in a pass of its own over C. The bias is a Linear
/// layer's, added in registers as C is stored (instead of broadcast into C before the product).
/// On a tile that straddles an attention band's edge, per-row spans (Extras) say which part of
/// each row of A is nonzero or of C is wanted: the kernel cuts each block of rows' depth or
/// columns to them, so that a diagonal tile's masked triangle is mostly not computed.
///
/// A is read one scalar at a time through two strides (row, column), so a transposed operand
/// (Pᵀ, dSᵀ) costs no copy; B is row-major with contiguous columns, read as vectors; C is
/// row-major. The kernel keeps an MR × NV-vector block of C in registers and, per step of the
/// depth, loads NV vectors of B and broadcasts MR scalars of A: MR·NV FMAs for MR + NV loads.
/// Shapes per ISA fill the register file without spilling:
///
///   AVX-512 (32 zmm): 6 rows × 4 vectors of 16 floats   24 accumulators
///   AVX2    (16 ymm): 6 rows × 2 vectors of  8 floats   12 accumulators
///   generic (scalars): 4 × 4, any type, any n (double, odd head dims, non-x86 hosts)
///
/// The vector shapes need n to be a multiple of the vector width (callers check: the attention
/// kernel the head dim, the GEMM facade n).
///
/// `transpose_block`, before the per-shape entry points, packs the attention's query tiles into
/// the vector operand (B) the kernel reads.
///
/// Every sum runs in a fixed order, so results are bit-identical from run to run (and differ
/// between ISAs only by rounding).

#include <cstdint>
#include <cstring>
#include <utility>

#include "isa.hpp"

namespace hybridseq::kernels::simd {

/// W lanes of T: the scalar itself for W = 1, a GCC vector otherwise.
template <class T, int W>
struct Lanes {
  using V = T;
};
#if HYBRIDSEQ_ISA_DISPATCH
template <>
struct Lanes<float, 8> {
  using V = float __attribute__((vector_size(32)));
};
template <>
struct Lanes<float, 16> {
  using V = float __attribute__((vector_size(64)));
};
#endif

/// A micro-kernel shape: lanes per vector, rows × vectors of the register block.
template <class T, int W, int MR, int NV>
struct Shape {
  using Scalar = T;
  using V = typename Lanes<T, W>::V;
  static constexpr int lanes = W, rows = MR, vectors = NV;
};
template <class T>
using Generic = Shape<T, 1, 4, 4>;
#if HYBRIDSEQ_ISA_DISPATCH
using Avx2 = Shape<float, 8, 6, 2>;
using Avx512 = Shape<float, 16, 6, 4>;
#endif

// Vectors go by reference: by value, GCC warns that AVX arguments change the ABI (-Wpsabi),
// although every use is inlined.
template <class V, class T>
HYBRIDSEQ_HOST_FORCEINLINE void load(V& v, const T* p) {
  std::memcpy(&v, p, sizeof v);  // one unaligned vector load
}
template <class V, class T>
HYBRIDSEQ_HOST_FORCEINLINE void store(T* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

/// Index ranges [begin[i], end[i]) per row of a tile, both ends non-decreasing in i (as a
/// band's are: every segment scheme's). Null: no ranges, every row whole.
struct RowSpans {
  const int* begin = nullptr;
  const int* end = nullptr;
  explicit operator bool() const { return begin != nullptr; }
};

/// What a product does besides C = or += alpha · A · B; all optional.
template <class T>
struct Extras {
  const T* row_scale = nullptr;  ///< when accumulating, C's row i is multiplied by row_scale[i] first
  const T* col_bias = nullptr;   ///< added to every row of C, last
  /// A's row i is zero outside [begin[i], end[i]): a block of rows sums only the depth its rows'
  /// ranges cover (a block cut to no depth still scales its rows). Leaving out terms 0 · b, b
  /// finite, changes no bit of a sum that starts from +0; with an infinite or NaN b the cut
  /// product has no NaN where the uncut one would.
  RowSpans a_nonzero{};
  /// Only [begin[i], end[i]) of C's row i is wanted: a block of rows computes the vectors that
  /// cover its rows' ranges and leaves the rest of its rows of C as they were (not scaled, no
  /// bias added).
  RowSpans c_wanted{};
};

/// One register block: C (M × NV·W) at c = or += alpha · A · B, over a depth of k; row_scale and
/// col_bias from the block's first row and column (Extras).
template <class S, int M, int NV>
HYBRIDSEQ_HOST_FORCEINLINE void block(int k, typename S::Scalar alpha, const typename S::Scalar* a, std::int64_t a_row,
                                      std::int64_t a_col, const typename S::Scalar* b, std::int64_t ldb,
                                      typename S::Scalar* c, std::int64_t ldc, bool accumulate,
                                      const typename S::Scalar* row_scale, const typename S::Scalar* col_bias) {
  using V = typename S::V;
  constexpr int W = S::lanes;
  V acc[M][NV];
  HYBRIDSEQ_UNROLL
  for (int i = 0; i < M; ++i) {
    HYBRIDSEQ_UNROLL
    for (int j = 0; j < NV; ++j) acc[i][j] = V{};
  }
  for (int p = 0; p < k; ++p) {
    V bv[NV];
    HYBRIDSEQ_UNROLL
    for (int j = 0; j < NV; ++j) load(bv[j], b + p * ldb + j * W);
    HYBRIDSEQ_UNROLL
    for (int i = 0; i < M; ++i) {
      const V ai = a[i * a_row + p * a_col] - V{};  // broadcast (x − 0 folds to x; x + 0 would not, for −0)
      HYBRIDSEQ_UNROLL
      for (int j = 0; j < NV; ++j) acc[i][j] += ai * bv[j];  // contracted to an FMA where the ISA has one
    }
  }
  HYBRIDSEQ_UNROLL
  for (int i = 0; i < M; ++i) {
    HYBRIDSEQ_UNROLL
    for (int j = 0; j < NV; ++j) {
      V r = acc[i][j] * alpha;
      if (accumulate) {
        V old;
        load(old, c + i * ldc + j * W);
        if (row_scale) old *= row_scale[i] - V{};
        r += old;
      }
      if (col_bias) {
        V bias;
        load(bias, col_bias + j * W);
        r += bias;
      }
      store(c + i * ldc + j * W, r);
    }
  }
}

/// The block for the last, narrower column block (nv < NV vectors) and the last rows (m < M).
template <class S, int M, int NV = S::vectors>
HYBRIDSEQ_HOST_FORCEINLINE void block_of_width(int nv, int k, typename S::Scalar alpha, const typename S::Scalar* a,
                                               std::int64_t a_row, std::int64_t a_col, const typename S::Scalar* b,
                                               std::int64_t ldb, typename S::Scalar* c, std::int64_t ldc,
                                               bool accumulate, const typename S::Scalar* row_scale,
                                               const typename S::Scalar* col_bias) {
  if constexpr (NV > 1)
    if (nv < NV)
      return block_of_width<S, M, NV - 1>(nv, k, alpha, a, a_row, a_col, b, ldb, c, ldc, accumulate, row_scale,
                                          col_bias);
  block<S, M, NV>(k, alpha, a, a_row, a_col, b, ldb, c, ldc, accumulate, row_scale, col_bias);
}
template <class S, int M = S::rows>
HYBRIDSEQ_HOST_FORCEINLINE void block_of_size(int m, int nv, int k, typename S::Scalar alpha,
                                              const typename S::Scalar* a, std::int64_t a_row, std::int64_t a_col,
                                              const typename S::Scalar* b, std::int64_t ldb, typename S::Scalar* c,
                                              std::int64_t ldc, bool accumulate, const typename S::Scalar* row_scale,
                                              const typename S::Scalar* col_bias) {
  if constexpr (M > 1)
    if (m < M)
      return block_of_size<S, M - 1>(m, nv, k, alpha, a, a_row, a_col, b, ldb, c, ldc, accumulate, row_scale, col_bias);
  block_of_width<S, M>(nv, k, alpha, a, a_row, a_col, b, ldb, c, ldc, accumulate, row_scale, col_bias);
}

/// C = or += alpha · A · B with Extras, walking C in column blocks (B's block, depth × NV·W,
/// stays in cache across the rows: L1 for an attention tile and for the depth steps the GEMM
/// facade gives it). Spans (Extras) cut each block of rows' depth and columns to its rows'.
template <class S>
HYBRIDSEQ_HOST_FORCEINLINE void gemm_body(int m, int n, int k, typename S::Scalar alpha, const typename S::Scalar* a,
                                          std::int64_t a_row, std::int64_t a_col, const typename S::Scalar* b,
                                          std::int64_t ldb, typename S::Scalar* c, std::int64_t ldc, bool accumulate,
                                          const Extras<typename S::Scalar>& x) {
  constexpr int W = S::lanes, NV = S::vectors, MR = S::rows;
  for (int j0 = 0; j0 < n; j0 += NV * W) {
    const int j1 = n - j0 < NV * W ? n : j0 + NV * W;
    for (int i0 = 0; i0 < m; i0 += MR) {
      const int rows = m - i0 < MR ? m - i0 : MR, last = i0 + rows - 1;
      int p0 = 0, p1 = k, c0 = j0, c1 = j1;
      if (x.a_nonzero) {
        p0 = x.a_nonzero.begin[i0] < k ? x.a_nonzero.begin[i0] : k;
        p1 = x.a_nonzero.end[last] < p0 ? p0 : x.a_nonzero.end[last] < k ? x.a_nonzero.end[last] : k;
      }
      if (x.c_wanted) {
        const int first_vector = x.c_wanted.begin[i0] / W * W, end_vector = (x.c_wanted.end[last] + W - 1) / W * W;
        c0 = first_vector > j0 ? first_vector : j0;
        c1 = end_vector < j1 ? end_vector : j1;
        if (c1 <= c0) continue;
      }
      block_of_size<S>(rows, (c1 - c0) / W, p1 - p0, alpha, a + i0 * a_row + p0 * a_col, a_row, a_col,
                       b + p0 * ldb + c0, ldb, c + i0 * ldc + c0, ldc, accumulate,
                       x.row_scale ? x.row_scale + i0 : nullptr, x.col_bias ? x.col_bias + c0 : nullptr);
    }
  }
}

// The transpose's rounds, for the vector shapes only: nvcc's front end, which never sees them
// (HYBRIDSEQ_ISA_DISPATCH is 0 there), cannot pass a pack expansion inside
// __builtin_shufflevector on to the host compiler.
#if HYBRIDSEQ_ISA_DISPATCH
namespace detail {
/// Lane l of one half of a transpose round that pairs runs of `s` lanes: the low half (`high`
/// false) takes run 2r of a, then run 2r of b, …; the high half runs 2r + 1. Lanes of b are
/// numbered from W, as __builtin_shufflevector numbers them.
template <int W, int s, bool high>
constexpr int interleaved_lane(int l) {
  const int group = l / (2 * s) * (2 * s), within = l % (2 * s), from = high ? s : 0;
  return within < s ? group + from + within : W + group + from + within - s;
}
template <int W, int s, bool high, class V, std::size_t... l>
HYBRIDSEQ_HOST_FORCEINLINE void interleave(V& out, const V& a, const V& b, std::index_sequence<l...>) {
  out = __builtin_shufflevector(a, b, interleaved_lane<W, s, high>(int(l))...);
}
/// One round of the transpose: rows i and i + s of every group of 2s rows exchange runs of s lanes.
template <int W, int s, class V>
HYBRIDSEQ_HOST_FORCEINLINE void transpose_round(V* r) {
  V t[W];
  HYBRIDSEQ_UNROLL
  for (int g = 0; g < W; g += 2 * s) {
    HYBRIDSEQ_UNROLL
    for (int j = 0; j < s; ++j) {
      interleave<W, s, false>(t[g + j], r[g + j], r[g + j + s], std::make_index_sequence<W>{});
      interleave<W, s, true>(t[g + j + s], r[g + j], r[g + j + s], std::make_index_sequence<W>{});
    }
  }
  HYBRIDSEQ_UNROLL
  for (int i = 0; i < W; ++i) r[i] = t[i];
}
}  // namespace detail
#endif

/// out[d · ldo + i] = scale · x[i · ldx + d] for i, d < W (S::lanes): a W × W block transposed
/// in registers, in log₂ W rounds of two-vector shuffles, its rows read and written as whole
/// vectors. Copying element by element instead writes one float at a time, or, looping down
/// the rows, reads many rows a stride with a large power-of-two factor apart, which share a
/// few L1 sets and evict each other.
template <class S>
HYBRIDSEQ_HOST_FORCEINLINE void transpose_block(const typename S::Scalar* x, std::int64_t ldx, typename S::Scalar scale,
                                                typename S::Scalar* out, std::int64_t ldo) {
  if constexpr (S::lanes == 1) {
    (void)ldx, (void)ldo;
    out[0] = scale * x[0];
  } else {
#if HYBRIDSEQ_ISA_DISPATCH
    using V = typename S::V;
    constexpr int W = S::lanes;
    static_assert(W == 8 || W == 16, "transpose_block: 8 or 16 lanes");
    static_assert(sizeof(V) == W * sizeof(typename S::Scalar), "transpose_block: V holds W scalars");
    V r[W];
    HYBRIDSEQ_UNROLL
    for (int i = 0; i < W; ++i) load(r[i], x + i * ldx);
    detail::transpose_round<W, 1>(r);
    detail::transpose_round<W, 2>(r);
    detail::transpose_round<W, 4>(r);
    if constexpr (W == 16) detail::transpose_round<W, 8>(r);
    HYBRIDSEQ_UNROLL
    for (int d = 0; d < W; ++d) store(out + d * ldo, V(r[d] * scale));
#endif
  }
}

#if HYBRIDSEQ_ISA_DISPATCH
namespace detail {
/// Lane l < width of the result is v[l] + v[l + width] (the other lanes: don't care).
template <int W, int width, class V, std::size_t... l>
HYBRIDSEQ_HOST_FORCEINLINE void fold(V& v, std::index_sequence<l...>) {
  v += __builtin_shufflevector(v, v, int((l + width) % W)...);
}
}  // namespace detail

/// The sum of kernels::lane_reduce's 16 partials (its reduce_lanes: an array of another size
/// does not bind) held as vectors, partial l in lane l % W of acc[l / W], folded in its order:
/// partial l += partial l + 8, then + 4, + 2, + 1. The same bits as lane_sum over the same
/// terms, in registers, where the compiler's copy of that final combine goes through the stack
/// one float at a time.
template <class S>
HYBRIDSEQ_HOST_FORCEINLINE float lane_total(const typename S::V (&acc)[16 / S::lanes]) {
  constexpr int W = S::lanes;
  static_assert(W == 8 || W == 16, "lane_total: 8 or 16 lanes");
  typename S::V v = acc[0];
  if constexpr (W == 8)
    v += acc[1];
  else
    detail::fold<W, 8>(v, std::make_index_sequence<W>{});
  detail::fold<W, 4>(v, std::make_index_sequence<W>{});
  detail::fold<W, 2>(v, std::make_index_sequence<W>{});
  detail::fold<W, 1>(v, std::make_index_sequence<W>{});
  return v[0];
}
#endif

/// The micro-kernel per shape: one out-of-line copy each, the vector ones compiled for their
/// ISA. Callers pass the shape as a tag.
template <class T>
inline void gemm(Generic<T>, int m, int n, int k, T alpha, const T* a, std::int64_t a_row, std::int64_t a_col,
                 const T* b, std::int64_t ldb, T* c, std::int64_t ldc, bool accumulate, const Extras<T>& x = {}) {
  gemm_body<Generic<T>>(m, n, k, alpha, a, a_row, a_col, b, ldb, c, ldc, accumulate, x);
}
#if HYBRIDSEQ_ISA_DISPATCH
[[HYBRIDSEQ_TARGET_AVX2]] inline void gemm(Avx2, int m, int n, int k, float alpha, const float* a, std::int64_t a_row,
                                           std::int64_t a_col, const float* b, std::int64_t ldb, float* c,
                                           std::int64_t ldc, bool accumulate, const Extras<float>& x = {}) {
  gemm_body<Avx2>(m, n, k, alpha, a, a_row, a_col, b, ldb, c, ldc, accumulate, x);
}
[[HYBRIDSEQ_TARGET_AVX512]] inline void gemm(Avx512, int m, int n, int k, float alpha, const float* a,
                                             std::int64_t a_row, std::int64_t a_col, const float* b, std::int64_t ldb,
                                             float* c, std::int64_t ldc, bool accumulate, const Extras<float>& x = {}) {
  gemm_body<Avx512>(m, n, k, alpha, a, a_row, a_col, b, ldb, c, ldc, accumulate, x);
}
#endif

}  // namespace hybridseq::kernels::simd
