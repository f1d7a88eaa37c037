#pragma once
/// \file
/// DSS's causal convolution as batched real transforms: every channel of every sequence in one
/// call (kernels/dss.hpp's `fft` algorithm on Kokkos::Cuda, where the transforms are cuFFT's).
/// The host algorithm there — a lane-vectorised FFT per group of 8 channels, one group per
/// worker — would leave a GPU nearly idle with H/8 workers.
///
///   forward    K (L, H) and u (B, L, H) zero-padded to M ≥ 2L − 1 as rows of length M:
///              Kf = rfft(K), Uf = rfft(u) (B·H rows in one call), Uf ← Uf ⊙ Kf / M,
///              y = irfft(Uf)[t < L] + D ⊙ u.
///   backward   DYf = rfft(dy), Uf = rfft(u): dK = irfft(Σ_b DYf ⊙ conj Uf / M)[ℓ < L] (the
///              sum over b in a fixed order), du += irfft(DYf ⊙ conj Kf / M)[t < L] + D ⊙ dy,
///              dD += Σ_{b,t} dy ⊙ u. With M ≥ 2L − 1 the circular products are the causal
///              ones: every wrapped index lands on the zero padding.
///
/// The transforms follow cuFFT's conventions (R2C: m reals to m/2 + 1 complex, interleaved;
/// C2R back, unnormalised, the imaginary parts of the first and middle bins ignored). On
/// Cuda they are cuFFT's: plans made once per (type, M, rows) and kept until Kokkos::finalize, the
/// work area from the caller's workspace (auto-allocation off), so a step allocates no device
/// memory once its plans exist; the scratch queries make the plans, so they are exact. On
/// host spaces a plain radix-2 transform per row stands in for cuFFT, so that the test suite
/// checks everything around the transforms against the host algorithm on every machine; the
/// host layers never run it (the lane FFT is faster there).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../core/error.hpp"
#include "../core/kokkos_compat.hpp"
#include "../core/spaces.hpp"
#include "../core/workspace.hpp"

#if defined(HYBRIDSEQ_WITH_CUFFT) && defined(KOKKOS_ENABLE_CUDA)
#include <map>
#include <mutex>
#include <tuple>

#include <cufft.h>
#define HYBRIDSEQ_DSS_CUFFT 1
#else
#define HYBRIDSEQ_DSS_CUFFT 0
#endif

namespace hybridseq::kernels::batched_fft {

enum class Direction { real_to_complex, complex_to_real };

/// Transform length for a causal convolution of length L: dss_fft_size(L), at least 2 (cuFFT
/// has no length-1 plans; more zero padding changes nothing).
inline std::int64_t length(std::int64_t fft_size) {
  return std::max<std::int64_t>(2, fft_size);
}

namespace detail {

template <class Space>
inline constexpr bool on_host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Space::memory_space>::accessible;

#if HYBRIDSEQ_DSS_CUFFT
inline void check(cufftResult status, const char* call) {
  if (status != CUFFT_SUCCESS)
    fail("hybridseq::kernels::batched_fft (cuFFT)", call, " failed with cufftResult ", int(status));
}

template <class T>
cufftType cufft_type(Direction dir) {
  if constexpr (std::is_same_v<T, float>)
    return dir == Direction::real_to_complex ? CUFFT_R2C : CUFFT_C2R;
  else
    return dir == Direction::real_to_complex ? CUFFT_D2Z : CUFFT_Z2D;
}

/// The plans, one per (type, M, rows). A plan is not safe to share between host threads that
/// call at once (its stream and work area are plan state), so every use holds the lock from
/// binding them to launching the transform, which only enqueues it.
struct Plans {
  struct Plan {
    cufftHandle handle = 0;
    std::size_t work_bytes = 0;
  };
  std::mutex mutex;
  std::map<std::tuple<int, std::int64_t, std::int64_t>, Plan> plans;

  /// The process's plans; Kokkos::finalize destroys them, while the CUDA context they belong
  /// to still exists (a static destructor would run after it).
  static Plans& instance() {
    static Plans p;
    static const bool hooked = (Kokkos::push_finalize_hook([] { instance().clear(); }), true);
    (void)hooked;
    return p;
  }

  void clear() {
    std::lock_guard lock(mutex);
    for (auto& [key, plan] : plans) cufftDestroy(plan.handle);
    plans.clear();
  }

  /// The plan for `rows` transforms of length m, made on first use. Call with the lock held.
  Plan& get(cufftType type, std::int64_t m, std::int64_t rows) {
    const auto key = std::make_tuple(int(type), m, rows);
    if (auto it = plans.find(key); it != plans.end()) return it->second;
    Plan p;
    check(cufftCreate(&p.handle), "cufftCreate");
    try {
      check(cufftSetAutoAllocation(p.handle, 0), "cufftSetAutoAllocation");
      long long n = m, reals = m, spectra = m / 2 + 1;
      const bool r2c = type == CUFFT_R2C || type == CUFFT_D2Z;
      check(cufftMakePlanMany64(p.handle, 1, &n, nullptr, 1, r2c ? reals : spectra, nullptr, 1, r2c ? spectra : reals,
                                type, rows, &p.work_bytes),
            "cufftMakePlanMany64");
    } catch (...) {
      cufftDestroy(p.handle);
      throw;
    }
    return plans.emplace(key, p).first->second;
  }
};
#endif

/// The reference transform of one row on the host: an iterative radix-2 FFT of the row as M
/// complex values in `z` (2M reals), sign −1 for R2C and +1 for C2R.
template <class T>
struct HostRows {
  const T* in;
  T* out;
  T* work;  // 2M reals per row
  std::int64_t m;
  Direction dir;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t row) const {
    const std::int64_t f = m / 2 + 1;
    T* z = work + row * 2 * m;
    if (dir == Direction::real_to_complex) {
      for (std::int64_t t = 0; t < m; ++t) z[2 * t] = in[row * m + t], z[2 * t + 1] = 0;
    } else {
      for (std::int64_t i = 0; i < f; ++i) z[2 * i] = in[2 * (row * f + i)], z[2 * i + 1] = in[2 * (row * f + i) + 1];
      z[1] = 0;
      z[2 * (m / 2) + 1] = 0;
      for (std::int64_t i = f; i < m; ++i) z[2 * i] = z[2 * (m - i)], z[2 * i + 1] = -z[2 * (m - i) + 1];
    }
    for (std::int64_t i = 1, j = 0; i < m; ++i) {  // bit reversal
      std::int64_t bit = m >> 1;
      for (; j & bit; bit >>= 1) j ^= bit;
      j ^= bit;
      if (i < j)
        for (int part = 0; part < 2; ++part) {
          const T keep = z[2 * i + part];
          z[2 * i + part] = z[2 * j + part];
          z[2 * j + part] = keep;
        }
    }
    const double sign = dir == Direction::real_to_complex ? -1.0 : 1.0;
    for (std::int64_t len = 2; len <= m; len <<= 1) {
      for (std::int64_t k = 0; k < len / 2; ++k) {
        const double angle = sign * 2.0 * 3.14159265358979323846 * double(k) / double(len);
        const T wr = T(math::cos(angle)), wi = T(math::sin(angle));
        for (std::int64_t s = 0; s < m; s += len) {
          T* a = z + 2 * (s + k);
          T* b = z + 2 * (s + k + len / 2);
          const T br = b[0] * wr - b[1] * wi, bi = b[0] * wi + b[1] * wr;
          b[0] = a[0] - br, b[1] = a[1] - bi;
          a[0] += br, a[1] += bi;
        }
      }
    }
    if (dir == Direction::real_to_complex)
      for (std::int64_t i = 0; i < f; ++i) out[2 * (row * f + i)] = z[2 * i], out[2 * (row * f + i) + 1] = z[2 * i + 1];
    else
      for (std::int64_t t = 0; t < m; ++t) out[row * m + t] = z[2 * t];
  }
};

/// Reals of the transforms' work area for rows ∈ {h, b·h}.
template <class T, class Space>
std::int64_t work_reals(std::int64_t b, std::int64_t h, std::int64_t m) {
  if constexpr (on_host<Space>) {
    return 2 * m * std::max(b, std::int64_t(1)) * h;
  } else {
#if HYBRIDSEQ_DSS_CUFFT
    Plans& plans = Plans::instance();
    std::lock_guard lock(plans.mutex);
    std::size_t bytes = 0;
    for (std::int64_t rows : {h, b * h})
      for (Direction dir : {Direction::real_to_complex, Direction::complex_to_real})
        bytes = std::max(bytes, plans.get(cufft_type<T>(dir), m, rows).work_bytes);
    return std::int64_t((bytes + sizeof(T) - 1) / sizeof(T)) + 1;
#else
    static_assert(on_host<Space>, "hybridseq::kernels::batched_fft: no transforms on this execution space");
    return 0;
#endif
  }
}

/// `rows` transforms of length m on exec: real rows (m apart) to spectra (m/2 + 1 complex
/// values, interleaved, apart), or back; `work` holds work_reals.
template <class T, class Space>
void transform(const Space& exec, Direction dir, std::int64_t m, std::int64_t rows, T* in, T* out, T* work) {
  if constexpr (on_host<Space>) {
    Kokkos::parallel_for("hybridseq::kernels::batched_fft::host_transform", Kokkos::RangePolicy<Space>(exec, 0, rows),
                         HostRows<T>{in, out, work, m, dir});
  } else {
#if HYBRIDSEQ_DSS_CUFFT
    Plans& plans = Plans::instance();
    std::lock_guard lock(plans.mutex);
    const auto& p = plans.get(cufft_type<T>(dir), m, rows);
    check(cufftSetStream(p.handle, exec.cuda_stream()), "cufftSetStream");
    check(cufftSetWorkArea(p.handle, work), "cufftSetWorkArea");
    if constexpr (std::is_same_v<T, float>) {
      if (dir == Direction::real_to_complex)
        check(cufftExecR2C(p.handle, in, reinterpret_cast<cufftComplex*>(out)), "cufftExecR2C");
      else
        check(cufftExecC2R(p.handle, reinterpret_cast<cufftComplex*>(in), out), "cufftExecC2R");
    } else {
      if (dir == Direction::real_to_complex)
        check(cufftExecD2Z(p.handle, in, reinterpret_cast<cufftDoubleComplex*>(out)), "cufftExecD2Z");
      else
        check(cufftExecZ2D(p.handle, reinterpret_cast<cufftDoubleComplex*>(in), out), "cufftExecZ2D");
    }
#else
    static_assert(on_host<Space>, "hybridseq::kernels::batched_fft: no transforms on this execution space");
#endif
  }
}

/// x (b·h, m) ← src (b, len, h) as rows b·h + c, zero past len.
template <class T, class Space>
void pack(const Space& exec, const Tensor<const T***, Space>& src, T* x, std::int64_t m) {
  const std::int64_t b = src.extent(0), len = src.extent(1), h = src.extent(2);
  Kokkos::parallel_for(
      "hybridseq::kernels::batched_fft::pack", Kokkos::MDRangePolicy<Space, Kokkos::Rank<2>>(exec, {0, 0}, {b * h, m}),
      KOKKOS_LAMBDA(const std::int64_t row, const std::int64_t t) {
        x[row * m + t] = t < len ? src(row / h, t, row % h) : T(0);
      });
}

/// x (h, m) ← k (len, h) as rows c, zero past len.
template <class T, class Space>
void pack_kernel(const Space& exec, const Tensor<const T**, Space>& k, T* x, std::int64_t m) {
  const std::int64_t len = k.extent(0), h = k.extent(1);
  Kokkos::parallel_for(
      "hybridseq::kernels::batched_fft::pack_kernel",
      Kokkos::MDRangePolicy<Space, Kokkos::Rank<2>>(exec, {0, 0}, {h, m}),
      KOKKOS_LAMBDA(const std::int64_t c, const std::int64_t t) { x[c * m + t] = t < len ? k(t, c) : T(0); });
}

/// z[row] ← z[row] ⊙ w[row mod h] (w conjugated if asked) · scale, over `rows` spectra of f
/// complex values.
template <class T, class Space>
void multiply(const Space& exec, T* z, const T* w, std::int64_t rows, std::int64_t h, std::int64_t f, bool conj,
              T scale) {
  Kokkos::parallel_for(
      "hybridseq::kernels::batched_fft::multiply",
      Kokkos::MDRangePolicy<Space, Kokkos::Rank<2>>(exec, {0, 0}, {rows, f}),
      KOKKOS_LAMBDA(const std::int64_t row, const std::int64_t i) {
        T* a = z + 2 * (row * f + i);
        const T* c = w + 2 * ((row % h) * f + i);
        const T cr = c[0], ci = conj ? -c[1] : c[1];
        const T re = a[0] * cr - a[1] * ci, im = a[0] * ci + a[1] * cr;
        a[0] = re * scale;
        a[1] = im * scale;
      });
}

/// The workspace buffers of one convolution call, in the order they are allocated: x (b·h rows
/// of m reals), the spectra Uf (b·h) and, backward, dYf, then Kf (h) and, backward, dKf (each
/// f = m/2 + 1 complex), and the transforms' work area. `bytes` is what they take: the scratch
/// query.
template <class T, class Space>
struct Buffers {
  T *x, *uf, *dyf, *kf, *dkf, *work;  // dyf, dkf: null forward

  static std::size_t bytes(std::int64_t b, std::int64_t h, std::int64_t m, bool backward) {
    const std::int64_t f = m / 2 + 1;
    const std::size_t spectra = core::padded_bytes<T>(2 * b * h * f) + core::padded_bytes<T>(2 * h * f);
    return core::padded_bytes<T>(b * h * m) + (backward ? 2 : 1) * spectra +
           core::padded_bytes<T>(work_reals<T, Space>(b, h, m));
  }

  Buffers(core::Workspace<Space>& ws, std::int64_t b, std::int64_t h, std::int64_t m, bool backward) {
    const std::int64_t f = m / 2 + 1;
    x = ws.template allocate<T*>("batched_fft.x", b * h * m).data();
    uf = ws.template allocate<T*>("batched_fft.uf", 2 * b * h * f).data();
    dyf = backward ? ws.template allocate<T*>("batched_fft.dyf", 2 * b * h * f).data() : nullptr;
    kf = ws.template allocate<T*>("batched_fft.kf", 2 * h * f).data();
    dkf = backward ? ws.template allocate<T*>("batched_fft.dkf", 2 * h * f).data() : nullptr;
    work = ws.template allocate<T*>("batched_fft.work", work_reals<T, Space>(b, h, m)).data();
  }
};

}  // namespace detail

/// Workspace bytes of `conv_forward` (backward = false) or `conv_backward` (true) for u
/// (b, ·, h) at transform length m = length(…).
template <class T, class Space>
std::size_t conv_scratch(std::int64_t b, std::int64_t h, std::int64_t m, bool backward) {
  return detail::Buffers<T, Space>::bytes(b, h, m, backward);
}

/// y (b, len, h) = causal_conv(K, u) + D ⊙ u, with b, len, h ≥ 1 and m = length(dss_fft_size(len)).
template <class T, class Space>
void conv_forward(const Space& exec, core::Workspace<Space>& ws, const Tensor<const T**, Space>& k,
                  const Tensor<const T***, Space>& u, const Tensor<const T*, Space>& d, const Tensor<T***, Space>& y,
                  std::int64_t m) {
  using detail::transform;
  constexpr auto r2c = Direction::real_to_complex, c2r = Direction::complex_to_real;
  core::WorkspaceScope scope(ws);
  const std::int64_t b = u.extent(0), len = u.extent(1), h = u.extent(2), f = m / 2 + 1;
  const detail::Buffers<T, Space> buffers(ws, b, h, m, false);
  T *x = buffers.x, *uf = buffers.uf, *kf = buffers.kf, *work = buffers.work;
  detail::pack_kernel<T>(exec, k, x, m);
  transform<T>(exec, r2c, m, h, x, kf, work);
  detail::pack<T>(exec, u, x, m);
  transform<T>(exec, r2c, m, b * h, x, uf, work);
  detail::multiply<T>(exec, uf, kf, b * h, h, f, false, T(1) / T(m));
  transform<T>(exec, c2r, m, b * h, uf, x, work);
  Kokkos::parallel_for(
      "hybridseq::kernels::batched_fft::conv_output",
      Kokkos::MDRangePolicy<Space, Kokkos::Rank<3>>(exec, {0, 0, 0}, {b, len, h}),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t t, const std::int64_t c) {
        y(i, t, c) = x[(i * h + c) * m + t] + d(c) * u(i, t, c);
      });
}

/// du += ∂L/∂u, dk = ∂L/∂K (overwritten), dd += ∂L/∂D, with b, len, h ≥ 1.
template <class T, class Space>
void conv_backward(const Space& exec, core::Workspace<Space>& ws, const Tensor<const T**, Space>& k,
                   const Tensor<const T***, Space>& u, const Tensor<const T*, Space>& d,
                   const Tensor<const T***, Space>& dy, const Tensor<T***, Space>& du, const Tensor<T**, Space>& dk,
                   const Tensor<T*, Space>& dd, std::int64_t m) {
  using detail::transform;
  constexpr auto r2c = Direction::real_to_complex, c2r = Direction::complex_to_real;
  core::WorkspaceScope scope(ws);
  const std::int64_t b = u.extent(0), len = u.extent(1), h = u.extent(2), f = m / 2 + 1;
  const detail::Buffers<T, Space> buffers(ws, b, h, m, true);
  T *x = buffers.x, *uf = buffers.uf, *dyf = buffers.dyf, *kf = buffers.kf, *dkf = buffers.dkf, *work = buffers.work;
  detail::pack_kernel<T>(exec, k, x, m);
  transform<T>(exec, r2c, m, h, x, kf, work);
  detail::pack<T>(exec, dy, x, m);
  transform<T>(exec, r2c, m, b * h, x, dyf, work);
  detail::pack<T>(exec, u, x, m);
  transform<T>(exec, r2c, m, b * h, x, uf, work);
  const T scale = T(1) / T(m);
  Kokkos::parallel_for(
      "hybridseq::kernels::batched_fft::kernel_grad_spectrum",
      Kokkos::MDRangePolicy<Space, Kokkos::Rank<2>>(exec, {0, 0}, {h, f}),
      KOKKOS_LAMBDA(const std::int64_t c, const std::int64_t i) {
        T re = 0, im = 0;  // Σ_b DYf ⊙ conj Uf, b in order
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
  transform<T>(exec, c2r, m, b * h, dyf, x, work);
  Kokkos::parallel_for(
      "hybridseq::kernels::batched_fft::conv_input_grad",
      Kokkos::MDRangePolicy<Space, Kokkos::Rank<3>>(exec, {0, 0, 0}, {b, len, h}),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t t, const std::int64_t c) {
        du(i, t, c) += x[(i * h + c) * m + t] + d(c) * dy(i, t, c);
      });
  Kokkos::parallel_for(
      "hybridseq::kernels::batched_fft::conv_skip_grad", Kokkos::RangePolicy<Space>(exec, 0, h),
      KOKKOS_LAMBDA(const std::int64_t c) {
        T sum = 0;  // (b, t) in order
        for (std::int64_t i = 0; i < b; ++i)
          for (std::int64_t t = 0; t < len; ++t) sum += dy(i, t, c) * u(i, t, c);
        dd(c) += sum;
      });
  transform<T>(exec, c2r, m, h, dkf, x, work);
  Kokkos::parallel_for(
      "hybridseq::kernels::batched_fft::kernel_grad",
      Kokkos::MDRangePolicy<Space, Kokkos::Rank<2>>(exec, {0, 0}, {len, h}),
      KOKKOS_LAMBDA(const std::int64_t t, const std::int64_t c) { dk(t, c) = x[c * m + t]; });
}

}  // namespace hybridseq::kernels::batched_fft
