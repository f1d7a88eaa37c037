#pragma once
/// \file
/// Run-time choice of the host vector ISA. The library is built for the compiler's baseline
/// target (no -march), so hot float kernels carry extra copies compiled with
/// `[[gnu::target(...)]]` and pick one per call from `host_isa()`: the best the CPU supports,
/// capped by `limit_isa`. The cap is the one knob for forcing a copy: tests run every copy the
/// machine has against the oracles, benchmarks compare them.
///
/// Copies exist only for x86-64 host compilers that understand target attributes (GCC, Clang)
/// and never in device compilation (nvcc, hipcc, SYCL): there `host_isa()` is always baseline.

#include <atomic>

#if !defined(HYBRIDSEQ_NO_ISA_DISPATCH) && !defined(__CUDACC__) && !defined(__HIPCC__) && \
    !defined(__SYCL_DEVICE_ONLY__) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HYBRIDSEQ_ISA_DISPATCH 1
/// The target strings of the copies. prefer-vector-width=512: loops the compiler vectorises on
/// its own inside an AVX-512 copy use the full width (GCC's default tuning stops at 256 bits).
#define HYBRIDSEQ_TARGET_AVX512 gnu::target("avx512f,avx512vl,avx512dq,avx512bw,fma,prefer-vector-width=512")
#define HYBRIDSEQ_TARGET_AVX2 gnu::target("avx2,fma")
#else
#define HYBRIDSEQ_ISA_DISPATCH 0
#endif

/// Host helpers called from a copy: force-inlined, so that they are compiled for its ISA (an
/// out-of-line helper is compiled for the baseline).
#if defined(__GNUC__) || defined(__clang__)
#define HYBRIDSEQ_HOST_FORCEINLINE [[gnu::always_inline]] inline
#else
#define HYBRIDSEQ_HOST_FORCEINLINE inline
#endif

/// Before a loop whose iterations are independent although the compiler cannot prove it (an
/// in-place update through two pointers): vectorised without the run-time overlap check, which
/// fails for in place (y == x) and would leave the loop scalar.
#if defined(__CUDACC__) || defined(__HIPCC__)
#define HYBRIDSEQ_INDEPENDENT_ITERATIONS
#elif defined(__clang__)
#define HYBRIDSEQ_INDEPENDENT_ITERATIONS _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define HYBRIDSEQ_INDEPENDENT_ITERATIONS _Pragma("GCC ivdep")
#else
#define HYBRIDSEQ_INDEPENDENT_ITERATIONS
#endif

/// Before a constant-trip loop over an array that must stay in registers (a micro-kernel's
/// register block, a reduction's lanes): it does only when the loop is unrolled completely.
/// In CUDA device code an array indexed by a loop that is not unrolled goes to local memory.
#if defined(__CUDA_ARCH__)
#define HYBRIDSEQ_UNROLL _Pragma("unroll")
#elif defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define HYBRIDSEQ_UNROLL _Pragma("GCC unroll 16")
#else
#define HYBRIDSEQ_UNROLL
#endif

namespace hybridseq::kernels {

/// Instruction sets with a copy of their own, in increasing order.
enum class Isa { baseline, avx2, avx512 };

inline const char* isa_name(Isa isa) {
  return isa == Isa::avx512 ? "avx512" : isa == Isa::avx2 ? "avx2+fma" : "baseline";
}

namespace detail {
inline Isa detected_isa() {
#if HYBRIDSEQ_ISA_DISPATCH
  static const Isa isa = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                                 __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw")
                             ? Isa::avx512
                         : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? Isa::avx2
                                                                                           : Isa::baseline;
  return isa;
#else
  return Isa::baseline;
#endif
}
inline std::atomic<Isa>& isa_limit() {
  static std::atomic<Isa> limit{Isa::avx512};
  return limit;
}
}  // namespace detail

/// The copy kernels run on this host: the best the CPU supports, at most the limit.
inline Isa host_isa() {
  const Isa detected = detail::detected_isa(), limit = detail::isa_limit().load(std::memory_order_relaxed);
  return detected < limit ? detected : limit;
}

/// Caps the ISA of every later kernel call at `ceiling` (process-wide; Isa::avx512 lifts the
/// cap). Returns the previous cap. Meant for tests and benchmarks, between kernel calls.
inline Isa limit_isa(Isa ceiling) {
  return detail::isa_limit().exchange(ceiling);
}

}  // namespace hybridseq::kernels
