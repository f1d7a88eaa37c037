#pragma once
// One selective-scan problem (B, T, Di, N = 16) for the scan benchmarks: inputs filled as a
// Mamba layer would see them (Δ mostly 0.05 … 0.7), outputs, checkpoints and gradients, with
// the kernels' forward and backward and, on host spaces, the naive oracle's.
#include <cstdint>
#include <utility>

#include <hybridseq/core.hpp>
#include <hybridseq/kernels/reference/selective_scan.hpp>
#include <hybridseq/kernels/selective_scan.hpp>

namespace hybridseq::bench {

constexpr int scan_n = 16;

template <class Space>
struct ScanProblem {
  int b, t, di;
  Tensor<float***, Space> u, dt, bc, dy, y, du, ddt, dbc;  // bc: (B, T, 2N), B | C
  Tensor<float*, Space> dt_bias, d_skip, dd_skip, ddt_bias;
  Tensor<float**, Space> a_log, da_log;
  Tensor<float****, Space> chunks;

  ScanProblem(int b_, int t_, int di_)
      : b(b_),
        t(t_),
        di(di_),
        u("u", b_, t_, di_),
        dt("dt", b_, t_, di_),
        bc("bc", b_, t_, 2 * scan_n),
        dy("dy", b_, t_, di_),
        y("y", b_, t_, di_),
        du("du", b_, t_, di_),
        ddt("ddt", b_, t_, di_),
        dbc("dbc", b_, t_, 2 * scan_n),
        dt_bias("dt_bias", di_),
        d_skip("D", di_),
        dd_skip("dD", di_),
        ddt_bias("ddt_bias", di_),
        a_log("A_log", di_, scan_n),
        da_log("dA_log", di_, scan_n),
        chunks("chunks", b_, kernels::scan_chunks(t_, kernels::scan_default_chunk), di_, scan_n) {
    const Space exec{};
    core::fill(exec, core::flat(u), core::Init::normal(1.0), 7, 1);
    core::fill(exec, core::flat(dt), core::Init::normal(1.0, -2.0), 7, 2);  // Δ mostly 0.05 … 0.7
    core::fill(exec, core::flat(bc), core::Init::normal(1.0), 7, 3);
    core::fill(exec, core::flat(dy), core::Init::normal(1.0), 7, 4);
    core::fill(exec, core::flat(dt_bias), core::Init::normal(0.1), 7, 5);
    core::fill(exec, core::flat(d_skip), core::Init::ones(), 7, 6);
    core::fill(exec, core::flat(a_log), core::Init::log_index(scan_n), 7, 7);
    exec.fence();
  }
  template <class V>
  static auto cols(const V& v, int begin) {
    return Kokkos::subview(v, Kokkos::ALL, Kokkos::ALL, std::make_pair(begin, begin + scan_n));
  }
  void forward() {
    kernels::selective_scan_forward<scan_n, float>(Space{}, u, dt, dt_bias, a_log, cols(bc, 0), cols(bc, scan_n),
                                                   d_skip, {}, y, chunks, {});
  }
  void backward(core::Workspace<Space>& ws) {
    kernels::selective_scan_backward<scan_n, float>(Space{}, ws, u, dt, dt_bias, a_log, cols(bc, 0), cols(bc, scan_n),
                                                    d_skip, chunks, dy, du, ddt, da_log, cols(dbc, 0),
                                                    cols(dbc, scan_n), dd_skip, ddt_bias);
  }
  void reference_forward() {
    Tensor<float***, Space> h("h", b, di, scan_n);
    kernels::reference::selective_scan_forward<float>(u, dt, dt_bias, a_log, cols(bc, 0), cols(bc, scan_n), d_skip, h,
                                                      y);
  }
  void reference_backward() {
    kernels::reference::selective_scan_backward<float>(u, dt, dt_bias, a_log, cols(bc, 0), cols(bc, scan_n), d_skip, dy,
                                                       du, ddt, da_log, cols(dbc, 0), cols(dbc, scan_n), dd_skip,
                                                       ddt_bias);
  }
  double updates() const { return double(b) * t * di * scan_n; }
};

}  // namespace hybridseq::bench
