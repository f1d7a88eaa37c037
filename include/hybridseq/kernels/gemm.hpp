#pragma once
/// \file
/// The GEMM facade: every matrix product in hybridseq goes through `gemm`.
///
///   C (M, N) = alpha · op(A) · op(B) + beta · C,   op(X) = X or Xᵀ
///
/// optionally with an epilogue (Epilogue, below): a bias added to every row of C, then an
/// element-wise op run on C's elements as the product finishes them.
///
/// Host spaces run float products of the shapes a training step is made of (a depth of at most
/// a few hundred, or a weight gradient's long depth over small operands) on the library's own
/// micro-kernel (tile_gemm.hpp), which needs no packing of its operands; every other product
/// calls BLAS (OpenBLAS, when the build defines HYBRIDSEQ_WITH_BLAS) or Eigen's GEMM mapped
/// over the Views without copies. The BLAS thread count follows the execution
/// space: one thread on Serial, the instance's concurrency on OpenMP, so that "Serial" and
/// "2 threads" measure what they say. Kokkos::Cuda calls cuBLAS on the instance's stream when
/// the build links it (HYBRIDSEQ_WITH_CUBLAS: every Cuda build of this project does); other
/// device spaces take a plain Kokkos kernel.

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/spaces.hpp"
#include "bias.hpp"
#include "elementwise.hpp"
#include "isa.hpp"
#include "tile_gemm.hpp"

#if defined(HYBRIDSEQ_WITH_CUBLAS) && defined(KOKKOS_ENABLE_CUDA)
#include <atomic>

#include <cublas_v2.h>
#define HYBRIDSEQ_GEMM_CUBLAS 1
#else
#define HYBRIDSEQ_GEMM_CUBLAS 0
#endif

#if defined(HYBRIDSEQ_WITH_BLAS)
extern "C" {
#include <cblas.h>
// Declared here rather than relying on OpenBLAS' cblas.h, which not every cblas.h is.
void openblas_set_num_threads(int);
// Weak: null when the BLAS the program runs with is not OpenBLAS.
[[gnu::weak]] char* openblas_get_corename(void);
}
#endif

namespace hybridseq::kernels {

enum class Op { none, transpose };

/// An epilogue without an element-wise op.
struct NoThen {};

/// What a product does to C as it finishes it: adds `bias` (N values; empty: none) to every row,
/// then runs `then` (an ElementwiseOp over C's flat index, C contiguous; NoThen: none) on every
/// element. This is C = alpha · op(A) · op(B) + 1 · biasᵀ (beta must be 0 with a bias), then
/// C's elements through `then`; e.g. a Linear layer's bias and its activation, or an
/// activation's backward after the product that makes its incoming gradient.
///
/// Where the host micro-kernel computes the product, the bias is added in registers as C is
/// stored and `then` runs on each block of C's rows while the block is still in cache: no pass
/// of their own over C in memory (but `then` runs after the product where threads cut C by
/// columns). Elsewhere (BLAS, a device, k = 0) the bias is broadcast into C first and `then`
/// runs over C after the product, with the same result up to the product's rounding.
template <class T, class Space, class Then = NoThen>
struct Epilogue {
  Tensor<const T*, Space> bias{};
  Then then{};
};

/// A row-major matrix argument; rows may be padded (stride(0) ≥ extent(1)).
template <class T, class Space>
using MatrixIn =
    Kokkos::View<const T**, Kokkos::LayoutRight, typename Space::memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
template <class T, class Space>
using MatrixOut =
    Kokkos::View<T**, Kokkos::LayoutRight, typename Space::memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

/// The kernels the host BLAS runs, against those the CPU could run. OpenBLAS chooses its
/// kernels once, as it loads, from the CPU models it knew when it was released; on a newer
/// model it falls back to its oldest x86-64 kernels (Debian 12's OpenBLAS 0.3.21 on an Emerald
/// Rapids CPU runs "Prescott", SSE3). Its environment variable OPENBLAS_CORETYPE overrides the
/// choice, and is read only at that load: a process that finds `better` set can only apply it
/// by starting again (the tools do, see examples/tool_support.hpp).
struct BlasKernels {
  std::string running;  ///< OpenBLAS' core name; empty when the BLAS is not OpenBLAS (or none)
  std::string better;   ///< an OPENBLAS_CORETYPE whose kernels use this CPU's AVX2 or AVX-512
                        ///< while `running`'s do not; empty when there is nothing to gain
};

inline BlasKernels blas_kernels() {
  BlasKernels k;
#if defined(HYBRIDSEQ_WITH_BLAS)
  if (openblas_get_corename == nullptr) return k;
  k.running = openblas_get_corename();
  // OpenBLAS' x86-64 cores whose single-precision GEMM kernels use AVX2 + FMA or AVX-512.
  static constexpr std::array<const char*, 6> vector_cores{"haswell",        "zen",      "skylakex", "cooperlake",
                                                           "sapphirerapids", "excavator"};
  std::string lower = k.running;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
  const bool vectorised = std::find(vector_cores.begin(), vector_cores.end(), lower) != vector_cores.end();
  const Isa isa = detail::detected_isa();
  if (!vectorised && !k.running.empty() && isa != Isa::baseline) k.better = isa == Isa::avx512 ? "SkylakeX" : "Haswell";
#endif
  return k;
}

namespace detail {

template <class Space>
constexpr bool host_accessible =
    Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Space::memory_space>::accessible;

#if defined(HYBRIDSEQ_WITH_BLAS)
/// Sets OpenBLAS' thread count only when it changes (the call takes a lock inside OpenBLAS).
/// n = −1 forgets the cached count, for code that called openblas_set_num_threads itself.
inline void blas_threads(int n) {
  static int current = -1;
  if (n != current && n > 0) openblas_set_num_threads(n);
  current = n;
}
#endif

template <class Space>
int blas_threads_for(const Space& exec) {
#if HYBRIDSEQ_HAS_OPENMP
  if constexpr (std::is_same_v<Space, Kokkos::OpenMP>) return core::compat::concurrency(exec);
#endif
  (void)exec;
  return 1;
}

}  // namespace detail

namespace detail {

/// Whether the micro-kernel runs this product faster than OpenBLAS' packed GEMM on one thread.
/// It reads A in place (except a weight gradient's Aᵀ, copied a block at a time:
/// micro_kernel_gemm), and B too unless B is transposed: Bᵀ is copied first (depth × n floats),
/// which pays only over many rows. The bounds are where it was measured ahead (docs/results.md,
/// "The micro-kernel for the step's products" and "On an Intel host"): past them its re-reads
/// of A from memory cost more than OpenBLAS' packing.
inline bool micro_kernel_wins(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k) {
  if (op_a == Op::transpose && op_b == Op::transpose) return false;
  if (op_a == Op::transpose)  // weight gradients
    return k <= 2048 && m * k <= (std::int64_t(1) << 20);
  if (op_b == Op::transpose) return k <= 512 && m >= 1024 && n * k <= (std::int64_t(1) << 18);
  return k <= 512;
}

/// The vector width the micro-kernel would run this product at: 16 (AVX-512) or 8 (AVX2) when
/// the product is one it wins (above), alpha ≠ 0, beta is 0 or 1, the CPU has that vector copy
/// and n fills its vectors; 0 (BLAS) otherwise. (With alpha = 0 BLAS leaves C as it is, where
/// the micro-kernel would add 0 · A · B and turn an infinity in A or B into NaN.) A product cut
/// into parts between threads is decided once, on its whole shape, so that the parts run the
/// same code as one call would: the same bits at any thread count.
template <class T>
int micro_kernel_width(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, T beta) {
#if HYBRIDSEQ_ISA_DISPATCH
  if constexpr (std::is_same_v<T, float>) {
    const Isa isa = host_isa();
    const int width = isa == Isa::avx512 && n % 16 == 0 ? 16 : isa != Isa::baseline && n % 8 == 0 ? 8 : 0;
    const bool fits_int = m <= std::numeric_limits<int>::max() && n <= std::numeric_limits<int>::max();
    if (width == 0 || alpha == 0 || (beta != 0 && beta != 1) || !fits_int || !micro_kernel_wins(op_a, op_b, m, n, k))
      return 0;
    return width;
  }
#endif
  (void)op_a, (void)op_b, (void)m, (void)n, (void)k, (void)alpha, (void)beta;
  return 0;
}

/// Floats of C per block of rows that a product with an element-wise epilogue makes and then
/// finishes: 128 KiB, which stays in L2 between the two.
inline constexpr std::int64_t epilogue_block_floats = std::int64_t(1) << 15;

/// The micro-kernel's cache blocking. C is made in blocks of at most 192 rows; each is walked
/// in panels of one register block's width (64 floats at width 16, 16 at 8) and each panel's
/// depth in steps of micro_kernel_block_floats / panel (128 at width 16, 512 at 8), so that the
/// part of B a step reads (32 KiB) stays in L1 while the block's rows pass over it, and the
/// block's rows of A stay in L2 from panel to panel.
inline constexpr std::int64_t micro_kernel_block_rows = 192;
inline constexpr std::int64_t micro_kernel_block_floats = std::int64_t(1) << 13;

/// C = alpha·op(A)·op(B) + beta·C (beta 0 or 1) + 1·biasᵀ (bias: n values, or null) on the
/// micro-kernel at `width` (16 or 8, from micro_kernel_width), then `then` (or null) on each
/// block of C's rows as it is made; C must then be contiguous (ldc = n), and `first` is the
/// flat index in `then`'s terms of C's first element. Each element of C sums its depth in
/// order, in steps of the same length wherever the element lies, so the bits do not depend on
/// how C is cut between threads. For NT, Bᵀ is first copied into
/// panels (each depth × panel width, contiguous) in scratch of this thread's own, kept between
/// calls (at most 2¹⁸ floats: outside the workspace arena, allocated by the first such product
/// on each thread, one buffer per instance of this template); B is read in place otherwise.
/// For TN, each depth step's block of Aᵀ is copied likewise, into rows of a padded stride (at
/// most 512 × 208 floats, 416 KiB, at width 8; 104 KiB at 16).
template <class T, class Then = NoThen>
void micro_kernel_gemm(int width, Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
                       std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc,
                       const T* bias = nullptr, const Then* then = nullptr, std::int64_t first = 0) {
#if HYBRIDSEQ_ISA_DISPATCH
  if constexpr (std::is_same_v<T, float>) {
    const std::int64_t panel = width * (width == 16 ? simd::Avx512::vectors : simd::Avx2::vectors);
    const bool packed = op_b == Op::transpose;
    if (packed) {
      thread_local std::vector<float> scratch;
      if (scratch.size() < std::size_t(k * n)) scratch.resize(std::size_t(k * n));
      float* bt = scratch.data();
      for (std::int64_t j0 = 0; j0 < n; j0 += panel) {
        const std::int64_t w = std::min(panel, n - j0);
        for (std::int64_t jj = 0; jj < w; jj += 16)  // 16 rows of B at a time, read along their depth
          for (std::int64_t p = 0; p < k; ++p)
            for (std::int64_t j = jj; j < jj + 16 && j < w; ++j) bt[j0 * k + p * w + j] = b[(j0 + j) * ldb + p];
      }
      b = bt;
    }
    // Blocks of whole register blocks of rows (simd::Avx512::rows = simd::Avx2::rows = 6).
    const std::int64_t block =
        then ? std::min(micro_kernel_block_rows, std::max<std::int64_t>(6, epilogue_block_floats / n / 6 * 6))
             : micro_kernel_block_rows;
    const std::int64_t depth_step = micro_kernel_block_floats / panel;
    // A transposed is read down its columns, a stride of lda apart: a power of two in every
    // weight gradient, whose lines would all fall in a few of L1's sets. Each step's block of
    // Aᵀ is copied first, its rows padded to a stride that is not.
    const bool a_packed = op_a == Op::transpose;
    const std::int64_t a_stride = block + 16;
    thread_local std::vector<float> a_scratch;
    if (a_packed && a_scratch.size() < std::size_t(depth_step * a_stride))
      a_scratch.resize(std::size_t(depth_step * a_stride));
    for (std::int64_t r0 = 0; r0 < m; r0 += block) {
      const int rows = int(std::min(block, m - r0));
      for (std::int64_t p0 = 0; p0 < k; p0 += depth_step) {
        const int depth = int(std::min(depth_step, k - p0));
        const float* a_step = a + (op_a == Op::none ? r0 * lda + p0 : p0 * lda + r0);
        std::int64_t a_row = op_a == Op::none ? lda : 1, a_col = op_a == Op::none ? 1 : lda;
        if (a_packed) {
          for (int p = 0; p < depth; ++p) std::copy_n(a_step + p * lda, rows, a_scratch.data() + p * a_stride);
          a_step = a_scratch.data();
          a_col = a_stride;
        }
        // The first step stores C (or adds to it, beta = 1) with the bias; the later ones add.
        const bool accumulate = beta == 1 || p0 > 0;
        for (std::int64_t j0 = 0; j0 < n; j0 += panel) {
          const std::int64_t w = std::min(panel, n - j0);
          const std::int64_t ld_panel = packed ? w : ldb;
          const float* b_step = (packed ? b + j0 * k : b + j0) + p0 * ld_panel;
          const simd::Extras<float> extras{.col_bias = bias && p0 == 0 ? bias + j0 : nullptr};
          float* c_block = c + r0 * ldc + j0;
          if (width == 16)
            simd::gemm(simd::Avx512{}, rows, int(w), depth, alpha, a_step, a_row, a_col, b_step, ld_panel, c_block, ldc,
                       accumulate, extras);
          else
            simd::gemm(simd::Avx2{}, rows, int(w), depth, alpha, a_step, a_row, a_col, b_step, ld_panel, c_block, ldc,
                       accumulate, extras);
        }
      }
      if constexpr (!std::is_same_v<Then, NoThen>) {
        if (then) {
          // The CPU's widest copy, as a pass of its own would run (a width-8 product on an
          // AVX-512 CPU too): the op gives the same bits fused or not.
          const std::int64_t begin = first + r0 * n, end = begin + rows * n;
          if (host_isa() == Isa::avx512)
            elementwise_loop_avx512(then->f, begin, end);
          else
            elementwise_loop_avx2(then->f, begin, end);
        }
      }
    }
    return;
  }
#endif
  (void)width, (void)op_a, (void)op_b, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb,
      (void)beta, (void)c, (void)ldc, (void)bias, (void)then, (void)first;
}

/// One call's product on the path chosen for it: the micro-kernel at `width` (with the
/// epilogue's bias and `then`, as micro_kernel_gemm), or BLAS (or Eigen) at 0 (no epilogue: the
/// caller's).
template <class T, class Then = NoThen>
void host_gemm_on(int width, Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
                  std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc,
                  const T* bias = nullptr, const Then* then = nullptr, std::int64_t first = 0) {
  if (width != 0)
    return micro_kernel_gemm<T>(width, op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias, then, first);
#if defined(HYBRIDSEQ_WITH_BLAS)
  const auto ta = op_a == Op::none ? CblasNoTrans : CblasTrans;
  const auto tb = op_b == Op::none ? CblasNoTrans : CblasTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
  else
    cblas_dgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
#else
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Stride = Eigen::OuterStride<>;
  const std::int64_t ar = op_a == Op::none ? m : k, ac = op_a == Op::none ? k : m;
  const std::int64_t br = op_b == Op::none ? k : n, bc = op_b == Op::none ? n : k;
  Eigen::Map<const Mat, 0, Stride> ea(a, ar, ac, Stride(lda));
  Eigen::Map<const Mat, 0, Stride> eb(b, br, bc, Stride(ldb));
  Eigen::Map<Mat, 0, Stride> ec(c, m, n, Stride(ldc));
  if (beta == T(0))
    ec.setZero();
  else if (beta != T(1))
    ec *= beta;
  if (op_a == Op::none && op_b == Op::none)
    ec.noalias() += alpha * ea * eb;
  else if (op_a == Op::none)
    ec.noalias() += alpha * ea * eb.transpose();
  else if (op_b == Op::none)
    ec.noalias() += alpha * ea.transpose() * eb;
  else
    ec.noalias() += alpha * ea.transpose() * eb.transpose();
#endif
}

/// Parts of C's rows (or, when C is wider than tall, of its columns) that a product on `threads`
/// threads is cut into: one per thread, each at least 64 wide, for products of at least 4 M
/// multiply-adds; 1 for smaller ones.
inline int gemm_parts(std::int64_t m, std::int64_t n, std::int64_t k, int threads) {
  if (threads < 2 || m * n * k < (std::int64_t(1) << 22)) return 1;
  return int(std::min<std::int64_t>(threads, std::max(m, n) / 64));
}

/// On OpenMP, a product big enough to share is cut into one part of C per thread, each a
/// single-threaded call on the path chosen for the whole product (the micro-kernel, or BLAS: a
/// call inside a parallel region runs on its thread). OpenBLAS' own threading of the same
/// product leaves a thread idle for many of a training step's shapes, (M, N, K) = (2048, 128,
/// 512) or (512, 128, 2048) (docs/results.md, "One BLAS call per thread"). Every element of C
/// is summed over the whole K by one call either way. The epilogue is fused into the
/// micro-kernel's calls (its `then` where each call makes whole rows of C); on BLAS the bias is
/// broadcast into C first and `then` runs after.
template <class T, class Space, class Then>
void gemm_host(const Space& exec, Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
               const MatrixIn<T, Space>& a, const MatrixIn<T, Space>& b, T beta, const MatrixOut<T, Space>& c,
               const Epilogue<T, Space, Then>& epilogue) {
  constexpr bool has_then = !std::is_same_v<Then, NoThen>;
  const T* pa = a.data();
  const T* pb = b.data();
  T* pc = c.data();
  const T* bias = epilogue.bias.extent(0) != 0 ? epilogue.bias.data() : nullptr;
  const std::int64_t lda = a.stride(0), ldb = b.stride(0), ldc = c.stride(0);
  const int width = micro_kernel_width<T>(op_a, op_b, m, n, k, alpha, beta);
  if (bias && width == 0) {  // BLAS adds the product to the bias broadcast into C
    broadcast_rows<T>(exec, epilogue.bias, c);
    beta = T(1);
    bias = nullptr;
  }
  const int parts = gemm_parts(m, n, k, blas_threads_for(exec));
  const bool rows = m >= n;  // parts cut the longer side of C
  const Then* then = nullptr;
  if constexpr (has_then)
    if (width != 0 && (parts == 1 || rows)) then = &epilogue.then;
  if (parts > 1) {
    const std::int64_t extent = rows ? m : n;
    Kokkos::parallel_for(
        "hybridseq::kernels::gemm[parts]", Kokkos::RangePolicy<Space, Kokkos::Schedule<Kokkos::Static>>(exec, 0, parts),
        [=](const int part) {
          const std::int64_t lo = extent * part / parts / 16 * 16;
          const std::int64_t hi = part + 1 == parts ? extent : extent * (part + 1) / parts / 16 * 16;
          if (rows)  // rows lo..hi of C: rows of A, or columns of a transposed A
            host_gemm_on<T>(width, op_a, op_b, hi - lo, n, k, alpha, pa + (op_a == Op::none ? lo * lda : lo), lda, pb,
                            ldb, beta, pc + lo * ldc, ldc, bias, then, lo * n);
          else  // columns lo..hi of C: columns of B, or rows of a transposed B
            host_gemm_on<T>(width, op_a, op_b, m, hi - lo, k, alpha, pa, lda, pb + (op_b == Op::none ? lo : lo * ldb),
                            ldb, beta, pc + lo, ldc, bias ? bias + lo : nullptr, then, 0);
        });
  } else {
#if defined(HYBRIDSEQ_WITH_BLAS)
    if (width == 0) blas_threads(blas_threads_for(exec));
#endif
    host_gemm_on<T>(width, op_a, op_b, m, n, k, alpha, pa, lda, pb, ldb, beta, pc, ldc, bias, then, 0);
  }
  if constexpr (has_then)
    if (!then) elementwise<T>(exec, m * n, epilogue.then);
}

/// Device fallback: one thread per output element. Correct, not fast; cuBLAS goes here.
template <class T, class Space>
void gemm_device(const Space& exec, Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
                 const MatrixIn<T, Space>& a, const MatrixIn<T, Space>& b, T beta, const MatrixOut<T, Space>& c) {
  const bool ta = op_a == Op::transpose, tb = op_b == Op::transpose;
  Kokkos::parallel_for(
      "hybridseq::kernels::gemm[naive]", Kokkos::MDRangePolicy<Space, Kokkos::Rank<2>>(exec, {0, 0}, {m, n}),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
        T acc = 0;
        for (std::int64_t p = 0; p < k; ++p) acc += (ta ? a(p, i) : a(i, p)) * (tb ? b(j, p) : b(p, j));
        c(i, j) = alpha * acc + (beta == T(0) ? T(0) : beta * c(i, j));
      });
}

}  // namespace detail

/// How cuBLAS multiplies float matrices on Kokkos::Cuda: exact fp32 (the default, what the
/// tests compare against the host), or on tensor cores with the inputs rounded as they are
/// read and fp32 accumulation — TF32 (10 mantissa bits) or bf16 (7 bits, the bf16 path's
/// GEMMs: CUBLAS_COMPUTE_32F_FAST_16BF). The tensors stay fp32 in memory either way. Host GEMMs
/// ignore it.
enum class GemmMath { fp32, tf32, bf16 };

#if HYBRIDSEQ_GEMM_CUBLAS
namespace detail {

inline std::atomic<GemmMath>& gemm_math_setting() {
  static std::atomic<GemmMath> math{GemmMath::fp32};
  return math;
}

inline void check_cublas(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail("hybridseq::kernels::gemm", call, " failed: ", cublasGetStatusName(status), " (", int(status), ")");
}

/// One cuBLAS handle per host thread (a handle must not be shared by threads that call at once),
/// created on first use and bound to each call's stream.
inline cublasHandle_t cublas_handle() {
  struct Handle {
    cublasHandle_t h = nullptr;
    ~Handle() {
      if (h != nullptr) cublasDestroy(h);
    }
  };
  thread_local Handle handle;
  if (handle.h == nullptr) check_cublas(cublasCreate(&handle.h), "cublasCreate");
  return handle.h;
}

/// Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ over the same buffers: cuBLAS
/// gets B first, with the same transpose flags, and m and n swapped. No copies.
template <class T>
void gemm_cublas(const Kokkos::Cuda& exec, Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
                 const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  cublasHandle_t h = cublas_handle();
  check_cublas(cublasSetStream(h, exec.cuda_stream()), "cublasSetStream");
  const auto ta = op_a == Op::none ? CUBLAS_OP_N : CUBLAS_OP_T;
  const auto tb = op_b == Op::none ? CUBLAS_OP_N : CUBLAS_OP_T;
  if constexpr (std::is_same_v<T, float>) {
    const GemmMath math = gemm_math_setting().load(std::memory_order_relaxed);
    const cublasComputeType_t compute = math == GemmMath::tf32   ? CUBLAS_COMPUTE_32F_FAST_TF32
                                        : math == GemmMath::bf16 ? CUBLAS_COMPUTE_32F_FAST_16BF
                                                                 : CUBLAS_COMPUTE_32F;
    check_cublas(cublasGemmEx(h, tb, ta, int(n), int(m), int(k), &alpha, b, CUDA_R_32F, int(ldb), a, CUDA_R_32F,
                              int(lda), &beta, c, CUDA_R_32F, int(ldc), compute, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
  } else {
    check_cublas(cublasDgemm(h, tb, ta, int(n), int(m), int(k), &alpha, b, int(ldb), a, int(lda), &beta, c, int(ldc)),
                 "cublasDgemm");
  }
}

}  // namespace detail
#endif

/// Sets how every later float GEMM on Kokkos::Cuda multiplies (see GemmMath), for the whole
/// process. A no-op where the build has no cuBLAS.
inline void set_gemm_math(GemmMath math) {
#if HYBRIDSEQ_GEMM_CUBLAS
  detail::gemm_math_setting().store(math, std::memory_order_relaxed);
#else
  (void)math;
#endif
}

/// C = alpha · op(A) · op(B) + beta · C, then the epilogue (Epilogue: a bias added to every
/// row, with beta = 0; then an element-wise op on C's elements). With beta = 0, C's prior
/// contents are ignored (NaNs included). Throws shape_error when the inner or outer extents
/// disagree, or the bias is not N long, or an element-wise op is given for a C with padded rows;
/// value_error for a bias with beta ≠ 0.
template <class Space, Scalar T, class Then>
void gemm(const Space& exec, Op op_a, Op op_b, T alpha, std::type_identity_t<MatrixIn<T, Space>> a,
          std::type_identity_t<MatrixIn<T, Space>> b, T beta, std::type_identity_t<MatrixOut<T, Space>> c,
          const Epilogue<T, Space, Then>& epilogue) {
  constexpr const char* api = "hybridseq::kernels::gemm";
  const std::int64_t m = op_a == Op::none ? a.extent(0) : a.extent(1);
  const std::int64_t k = op_a == Op::none ? a.extent(1) : a.extent(0);
  const std::int64_t kb = op_b == Op::none ? b.extent(0) : b.extent(1);
  const std::int64_t n = op_b == Op::none ? b.extent(1) : b.extent(0);
  if (k != kb || static_cast<std::int64_t>(c.extent(0)) != m || static_cast<std::int64_t>(c.extent(1)) != n)
    fail<shape_error>(api, "op(A) is (", m, ",", k, "), op(B) is (", kb, ",", n, "), C is (", c.extent(0), ",",
                      c.extent(1), ")");
  const std::int64_t bias = epilogue.bias.extent(0);
  if (bias != 0 && bias != n)
    fail<shape_error>(api, "the epilogue's bias has ", bias, " values for C's ", n, " columns");
  if (bias != 0 && beta != T(0)) fail<value_error>(api, "an epilogue's bias needs beta = 0; beta is ", beta);
  if constexpr (!std::is_same_v<Then, NoThen>)
    if (m > 1 && static_cast<std::int64_t>(c.stride(0)) != n)
      fail<shape_error>(api, "an element-wise epilogue needs C's rows contiguous; C's row stride is ", c.stride(0),
                        " for ", n, " columns");
  if (m == 0 || n == 0) return;
  if constexpr (detail::host_accessible<Space>)
    if (k != 0) return detail::gemm_host<T>(exec, op_a, op_b, m, n, k, alpha, a, b, beta, c, epilogue);
  // A device, or k = 0 (BLAS leaves C untouched for k = 0 only when beta = 1; the plain kernel
  // is exact): the epilogue in passes of its own.
  if (bias != 0) {
    broadcast_rows<T>(exec, epilogue.bias, c);
    beta = T(1);
  }
#if HYBRIDSEQ_GEMM_CUBLAS
  if constexpr (std::is_same_v<Space, Kokkos::Cuda>) {
    if (k != 0)
      detail::gemm_cublas<T>(exec, op_a, op_b, m, n, k, alpha, a.data(), a.stride(0), b.data(), b.stride(0), beta,
                             c.data(), c.stride(0));
    else
      detail::gemm_device<T>(exec, op_a, op_b, m, n, k, alpha, a, b, beta, c);
  } else
#endif
    detail::gemm_device<T>(exec, op_a, op_b, m, n, k, alpha, a, b, beta, c);
  if constexpr (!std::is_same_v<Then, NoThen>) elementwise<T>(exec, m * n, epilogue.then);
}

/// C = alpha · op(A) · op(B) + beta · C (no epilogue).
template <class Space, Scalar T>
void gemm(const Space& exec, Op op_a, Op op_b, T alpha, std::type_identity_t<MatrixIn<T, Space>> a,
          std::type_identity_t<MatrixIn<T, Space>> b, T beta, std::type_identity_t<MatrixOut<T, Space>> c) {
  gemm(exec, op_a, op_b, alpha, a, b, beta, c, Epilogue<T, Space>{});
}

}  // namespace hybridseq::kernels
