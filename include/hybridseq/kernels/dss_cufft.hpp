#pragma once
/// \file
/// DSS's causal convolution on Kokkos::Cuda through cuFFT (kernels/dss.hpp's `fft` algorithm
/// there): every channel of every sequence in one batched real transform. The host algorithm
/// (a lane-vectorised FFT per group of 8 channels, one group per worker) would leave a GPU
/// nearly idle: H/8 workers.
///
///   forward    K (L, H) and u (B, L, H), zero-padded to M ≥ 2L − 1 as rows of length M:
///              Kf = rfft(K), Uf = rfft(u) (B·H rows in one call), Uf ← Uf ⊙ Kf / M,
///              y = irfft(Uf)[t < L] + D ⊙ u.
///   backward   DYf = rfft(dy), Uf = rfft(u): dK = irfft(Σ_b DYf ⊙ conj Uf / M)[ℓ < L] (the
///              sum over b in a fixed order), du += irfft(DYf ⊙ conj Kf / M)[t < L] + D ⊙ dy,
///              dD += Σ_{b,t} dy ⊙ u. With M ≥ 2L − 1 the circular products are the causal
///              ones: every wrapped index lands on the zero padding.
///
/// Plans are made once per (type, M, rows) and kept for the process, with cuFFT's work area
/// taken from the caller's workspace (auto-allocation off), so a step allocates no device
/// memory once its plans exist; the scratch queries make the plans, so they are exact.
/// Compiled for Cuda and not yet run on a GPU (see docs/design.md).

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "../core/error.hpp"
#include "../core/spaces.hpp"
#include "../core/workspace.hpp"

#if defined(HYBRIDSEQ_WITH_CUFFT) && defined(KOKKOS_ENABLE_CUDA)
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>

#include <cufft.h>
#define HYBRIDSEQ_DSS_CUFFT 1
#else
#define HYBRIDSEQ_DSS_CUFFT 0
#endif

#if HYBRIDSEQ_DSS_CUFFT
namespace hybridseq::kernels::cufft_conv {

namespace detail {

inline void check(cufftResult status, const char* call) {
  if (status != CUFFT_SUCCESS) fail("hybridseq::kernels::dss (cuFFT)", call, " failed with cufftResult ", int(status));
}

template <class T>
struct Types;
template <>
struct Types<float> {
  static constexpr cufftType r2c = CUFFT_R2C, c2r = CUFFT_C2R;
};
template <>
struct Types<double> {
  static constexpr cufftType r2c = CUFFT_D2Z, c2r = CUFFT_Z2D;
};

/// The plans, one per (type, M, rows): a plan is not safe to share between host threads that
/// call at once (stream and work area are plan state), so every use holds the lock from
/// binding them to launching the transform, which only enqueues it.
struct Plans {
  struct Plan {
    cufftHandle handle = 0;
    std::size_t work_bytes = 0;
  };
  std::mutex mutex;
  std::map<std::tuple<int, std::int64_t, std::int64_t>, Plan> plans;

  static Plans& instance() {
    static Plans p;
    return p;
  }

  /// The plan for `rows` transforms of length m (R2C: m reals to m/2 + 1 complex; C2R back),
  /// made on first use. Call with the lock held.
  Plan& get(cufftType type, std::int64_t m, std::int64_t rows) {
    const auto key = std::make_tuple(int(type), m, rows);
    if (auto it = plans.find(key); it != plans.end()) return it->second;
    Plan p;
    check(cufftCreate(&p.handle), "cufftCreate");
    try {
      check(cufftSetAutoAllocation(p.handle, 0), "cufftSetAutoAllocation");
      long long n = m, reals = m, spectra = m / 2 + 1;
      const bool forward = type == CUFFT_R2C || type == CUFFT_D2Z;
      check(cufftMakePlanMany64(p.handle, 1, &n, nullptr, 1, forward ? reals : spectra, nullptr, 1,
                                forward ? spectra : reals, type, rows, &p.work_bytes),
            "cufftMakePlanMany64");
    } catch (...) {
      cufftDestroy(p.handle);
      throw;
    }
    return plans.emplace(key, p).first->second;
  }
};

template <class T>
std::size_t work_bytes(cufftType type, std::int64_t m, std::int64_t rows) {
  Plans& plans = Plans::instance();
  std::lock_guard lock(plans.mutex);
  return plans.get(type, m, rows).work_bytes;
}

/// Reals of a work area for the transforms of rows ∈ {h, b·h} (forward and inverse).
template <class T>
std::int64_t work_reals(std::int64_t b, std::int64_t h, std::int64_t m) {
  std::size_t bytes = 0;
  for (std::int64_t rows : {h, b * h})
    for (cufftType type : {Types<T>::r2c, Types<T>::c2r}) bytes = std::max(bytes, work_bytes<T>(type, m, rows));
  return std::int64_t((bytes + sizeof(T) - 1) / sizeof(T)) + 1;
}

/// `rows` transforms of length m on exec's stream: real rows (m apart) to spectra (m/2 + 1
/// complex, interleaved, apart), or back. `work` holds work_reals.
template <class T>
void transform(const Kokkos::Cuda& exec, cufftType type, std::int64_t m, std::int64_t rows, T* in, T* out, T* work) {
  Plans& plans = Plans::instance();
  std::lock_guard lock(plans.mutex);
  const auto& p = plans.get(type, m, rows);
  check(cufftSetStream(p.handle, exec.cuda_stream()), "cufftSetStream");
  check(cufftSetWorkArea(p.handle, work), "cufftSetWorkArea");
  if constexpr (std::is_same_v<T, float>) {
    if (type == CUFFT_R2C)
      check(cufftExecR2C(p.handle, in, reinterpret_cast<cufftComplex*>(out)), "cufftExecR2C");
    else
      check(cufftExecC2R(p.handle, reinterpret_cast<cufftComplex*>(in), out), "cufftExecC2R");
  } else {
    if (type == CUFFT_D2Z)
      check(cufftExecD2Z(p.handle, in, reinterpret_cast<cufftDoubleComplex*>(out)), "cufftExecD2Z");
    else
      check(cufftExecZ2D(p.handle, reinterpret_cast<cufftDoubleComplex*>(in), out), "cufftExecZ2D");
  }
}

/// x (b·h, m) ← src (b, len, h) as rows b·h + c, zero past len.
template <class T>
void pack(const Kokkos::Cuda& exec, const Tensor<const T***, Kokkos::Cuda>& src, T* x, std::int64_t m) {
  const std::int64_t b = src.extent(0), len = src.extent(1), h = src.extent(2);
  Kokkos::parallel_for(
      "hybridseq::kernels::dss::cufft_pack",
      Kokkos::MDRangePolicy<Kokkos::Cuda, Kokkos::Rank<2>>(exec, {0, 0}, {b * h, m}),
      KOKKOS_LAMBDA(const std::int64_t row, const std::int64_t t) {
        x[row * m + t] = t < len ? src(row / h, t, row % h) : T(0);
      });
}

/// x (h, m) ← k (len, h) as rows c, zero past len.
template <class T>
void pack_kernel(const Kokkos::Cuda& exec, const Tensor<const T**, Kokkos::Cuda>& k, T* x, std::int64_t m) {
  const std::int64_t len = k.extent(0), h = k.extent(1);
  Kokkos::parallel_for(
      "hybridseq::kernels::dss::cufft_pack_kernel",
      Kokkos::MDRangePolicy<Kokkos::Cuda, Kokkos::Rank<2>>(exec, {0, 0}, {h, m}),
      KOKKOS_LAMBDA(const std::int64_t c, const std::int64_t t) { x[c * m + t] = t < len ? k(t, c) : T(0); });
}

/// z[row] ← z[row] ⊙ w[row mod h] (conjugated if asked) · scale, over `rows` spectra of f
/// complex values (interleaved).
template <class T>
void multiply(const Kokkos::Cuda& exec, T* z, const T* w, std::int64_t rows, std::int64_t h, std::int64_t f, bool conj,
              T scale) {
  Kokkos::parallel_for(
      "hybridseq::kernels::dss::cufft_multiply",
      Kokkos::MDRangePolicy<Kokkos::Cuda, Kokkos::Rank<2>>(exec, {0, 0}, {rows, f}),
      KOKKOS_LAMBDA(const std::int64_t row, const std::int64_t i) {
        T* a = z + 2 * (row * f + i);
        const T* c = w + 2 * ((row % h) * f + i);
        const T cr = c[0], ci = conj ? -c[1] : c[1];
        const T re = a[0] * cr - a[1] * ci, im = a[0] * ci + a[1] * cr;
        a[0] = re * scale;
        a[1] = im * scale;
      });
}

}  // namespace detail

/// Workspace bytes of `forward` for u (b, len, h) at FFT length m.
template <class T>
std::size_t forward_scratch(std::int64_t b, std::int64_t h, std::int64_t m) {
  const std::int64_t f = m / 2 + 1;
  return core::padded_bytes<T>(b * h * m) + core::padded_bytes<T>(2 * b * h * f) + core::padded_bytes<T>(2 * h * f) +
         core::padded_bytes<T>(detail::work_reals<T>(b, h, m));
}

/// Workspace bytes of `backward`.
template <class T>
std::size_t backward_scratch(std::int64_t b, std::int64_t h, std::int64_t m) {
  const std::int64_t f = m / 2 + 1;
  return core::padded_bytes<T>(b * h * m) + 2 * core::padded_bytes<T>(2 * b * h * f) +
         2 * core::padded_bytes<T>(2 * h * f) + core::padded_bytes<T>(detail::work_reals<T>(b, h, m));
}

/// y (b, len, h) = causal_conv(K, u) + D ⊙ u, with b ≥ 1.
template <class T>
void forward(const Kokkos::Cuda& exec, core::Workspace<Kokkos::Cuda>& ws, const Tensor<const T**, Kokkos::Cuda>& k,
             const Tensor<const T***, Kokkos::Cuda>& u, const Tensor<const T*, Kokkos::Cuda>& d,
             const Tensor<T***, Kokkos::Cuda>& y, std::int64_t m) {
  using detail::Types;
  core::WorkspaceScope scope(ws);
  const std::int64_t b = u.extent(0), len = u.extent(1), h = u.extent(2), f = m / 2 + 1;
  T* x = ws.template allocate<T*>("dss.cufft.x", b * h * m).data();
  T* uf = ws.template allocate<T*>("dss.cufft.uf", 2 * b * h * f).data();
  T* kf = ws.template allocate<T*>("dss.cufft.kf", 2 * h * f).data();
  T* work = ws.template allocate<T*>("dss.cufft.work", detail::work_reals<T>(b, h, m)).data();
  detail::pack_kernel<T>(exec, k, x, m);
  detail::transform<T>(exec, Types<T>::r2c, m, h, x, kf, work);
  detail::pack<T>(exec, u, x, m);
  detail::transform<T>(exec, Types<T>::r2c, m, b * h, x, uf, work);
  detail::multiply<T>(exec, uf, kf, b * h, h, f, false, T(1) / T(m));
  detail::transform<T>(exec, Types<T>::c2r, m, b * h, uf, x, work);
  Kokkos::parallel_for(
      "hybridseq::kernels::dss::cufft_unpack",
      Kokkos::MDRangePolicy<Kokkos::Cuda, Kokkos::Rank<3>>(exec, {0, 0, 0}, {b, len, h}),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t t, const std::int64_t c) {
        y(i, t, c) = x[(i * h + c) * m + t] + d(c) * u(i, t, c);
      });
}

/// du += ∂L/∂u, dk = ∂L/∂K (overwritten), dd += ∂L/∂D, with b ≥ 1.
template <class T>
void backward(const Kokkos::Cuda& exec, core::Workspace<Kokkos::Cuda>& ws, const Tensor<const T**, Kokkos::Cuda>& k,
              const Tensor<const T***, Kokkos::Cuda>& u, const Tensor<const T*, Kokkos::Cuda>& d,
              const Tensor<const T***, Kokkos::Cuda>& dy, const Tensor<T***, Kokkos::Cuda>& du,
              const Tensor<T**, Kokkos::Cuda>& dk, const Tensor<T*, Kokkos::Cuda>& dd, std::int64_t m) {
  using detail::Types;
  core::WorkspaceScope scope(ws);
  const std::int64_t b = u.extent(0), len = u.extent(1), h = u.extent(2), f = m / 2 + 1;
  T* x = ws.template allocate<T*>("dss.cufft.x", b * h * m).data();
  T* uf = ws.template allocate<T*>("dss.cufft.uf", 2 * b * h * f).data();
  T* dyf = ws.template allocate<T*>("dss.cufft.dyf", 2 * b * h * f).data();
  T* kf = ws.template allocate<T*>("dss.cufft.kf", 2 * h * f).data();
  T* dkf = ws.template allocate<T*>("dss.cufft.dkf", 2 * h * f).data();
  T* work = ws.template allocate<T*>("dss.cufft.work", detail::work_reals<T>(b, h, m)).data();
  detail::pack_kernel<T>(exec, k, x, m);
  detail::transform<T>(exec, Types<T>::r2c, m, h, x, kf, work);
  detail::pack<T>(exec, dy, x, m);
  detail::transform<T>(exec, Types<T>::r2c, m, b * h, x, dyf, work);
  detail::pack<T>(exec, u, x, m);
  detail::transform<T>(exec, Types<T>::r2c, m, b * h, x, uf, work);
  const T scale = T(1) / T(m);
  // dK's spectrum: Σ_b DYf ⊙ conj Uf, b in order.
  Kokkos::parallel_for(
      "hybridseq::kernels::dss::cufft_kernel_grad",
      Kokkos::MDRangePolicy<Kokkos::Cuda, Kokkos::Rank<2>>(exec, {0, 0}, {h, f}),
      KOKKOS_LAMBDA(const std::int64_t c, const std::int64_t i) {
        T re = 0, im = 0;
        for (std::int64_t s = 0; s < b; ++s) {
          const T* p = dyf + 2 * ((s * h + c) * f + i);
          const T* q = uf + 2 * ((s * h + c) * f + i);
          re += p[0] * q[0] + p[1] * q[1];
          im += p[1] * q[0] - p[0] * q[1];
        }
        dkf[2 * (c * f + i)] = re * scale;
        dkf[2 * (c * f + i) + 1] = im * scale;
      });
  detail::multiply<T>(exec, dyf, kf, b * h, h, f, true, scale);
  detail::transform<T>(exec, Types<T>::c2r, m, b * h, dyf, x, work);
  Kokkos::parallel_for(
      "hybridseq::kernels::dss::cufft_input_grad",
      Kokkos::MDRangePolicy<Kokkos::Cuda, Kokkos::Rank<3>>(exec, {0, 0, 0}, {b, len, h}),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t t, const std::int64_t c) {
        du(i, t, c) += x[(i * h + c) * m + t] + d(c) * dy(i, t, c);
      });
  Kokkos::parallel_for(
      "hybridseq::kernels::dss::cufft_skip_grad", Kokkos::RangePolicy<Kokkos::Cuda>(exec, 0, h),
      KOKKOS_LAMBDA(const std::int64_t c) {
        T sum = 0;  // (b, t) in order
        for (std::int64_t i = 0; i < b; ++i)
          for (std::int64_t t = 0; t < len; ++t) sum += dy(i, t, c) * u(i, t, c);
        dd(c) += sum;
      });
  detail::transform<T>(exec, Types<T>::c2r, m, h, dkf, x, work);
  Kokkos::parallel_for(
      "hybridseq::kernels::dss::cufft_unpack_kernel_grad",
      Kokkos::MDRangePolicy<Kokkos::Cuda, Kokkos::Rank<2>>(exec, {0, 0}, {len, h}),
      KOKKOS_LAMBDA(const std::int64_t t, const std::int64_t c) { dk(t, c) = x[c * m + t]; });
}

}  // namespace hybridseq::kernels::cufft_conv
#endif
