#pragma once
/// \file
/// Attention segment schemes: which keys each query sees, chosen at compile time by a layer's
/// scheme type and handed to the kernels as a value (`Band`).
///
/// Every scheme here is *banded*: query position t sees the contiguous key range
/// [key_begin(t, n), key_end(t, n)) of the n keys, and both ends are non-decreasing in t.
/// That one property lets the tiled kernel skip whole key tiles (a fully masked tile costs
/// nothing), mask only the tiles that straddle a band edge, and find, for a key tile, the
/// query tiles that see it (backward). Queries are the last `query_count(n)` positions.
///
///   Causal                 τ ≤ t
///   SlidingWindow<w>       t − w < τ ≤ t                                  (Cooper et al., Samba)
///   EcpPairs<m>            segment j = ⌊t/m⌋ sees segment j−1 and the causal part of j (ECP)
///   PerceiverCross<M>      queries only at the last M positions, causal over all keys (PerceiverAR)
///   SSplit<s>              independent unmasked segments of length s (s-Split Double Attention)
///   Bidirectional          every key (encoder / history block)
///
/// The kernels take the band as a value rather than the scheme as a type: each kernel is then
/// compiled once per element type and register bound, not once per scheme and size (a model
/// with four window sizes would otherwise carry four copies of every attention kernel, and
/// the attention test family under nvcc 454 kernels, now 139). The band's ends are computed per
/// task, per query row or per key, never per score entry (team_attention.hpp: RowKeys,
/// KeyQueries).

#include <cstdint>
#include <string_view>

#include "../../core/error.hpp"
#include "../../core/spaces.hpp"

namespace hybridseq::kernels::attention {

/// The keys each query position sees, as a value.
struct Band {
  enum class Kind : std::uint8_t {
    causal,  // [0, t + 1)
    window,  // [t − size + 1, t + 1), clipped at 0
    pairs,   // [(⌊t/size⌋ − 1)·size, t + 1), clipped at 0
    split,   // [⌊t/size⌋·size, ⌊t/size⌋·size + size), clipped at n
    full,    // [0, n)
  };
  Kind kind = Kind::causal;
  std::int64_t size = 0;  // the window or the segment length; unused by causal and full

  /// Refuses a window or segment length below 1 (a division by zero, or an empty band whose
  /// softmax is 0/0): a band is either a scheme's, checked at compile time, or made and checked here.
  constexpr Band(Kind k = Kind::causal, std::int64_t s = 0) : kind(k), size(s) {
    if (k != Kind::causal && k != Kind::full && s < 1)
      fail<value_error>("hybridseq::kernels::attention::Band", "a window or segment length must be at least 1, got ",
                        s);
  }

  KOKKOS_INLINE_FUNCTION constexpr std::int64_t key_begin(std::int64_t t, std::int64_t) const {
    switch (kind) {
      case Kind::window:
        return t - size + 1 > 0 ? t - size + 1 : 0;
      case Kind::pairs:
        return t < size ? 0 : (t / size - 1) * size;
      case Kind::split:
        return t / size * size;
      default:
        return 0;
    }
  }
  KOKKOS_INLINE_FUNCTION constexpr std::int64_t key_end(std::int64_t t, std::int64_t n) const {
    switch (kind) {
      case Kind::split:
        return t / size * size + size < n ? t / size * size + size : n;
      case Kind::full:
        return n;
      default:
        return t + 1;
    }
  }
};

struct Causal {
  static constexpr const char* name = "causal";
  static constexpr Band band{Band::Kind::causal};
  static constexpr bool decodable = true;
  static constexpr std::int64_t query_count(std::int64_t n) { return n; }
  static void check(std::string_view, std::int64_t) {}
};

template <int W>
struct SlidingWindow {
  static_assert(W >= 1, "hybridseq::kernels::attention::SlidingWindow: the window must be at least 1");
  static constexpr const char* name = "sliding_window";
  static constexpr int window = W;
  static constexpr Band band{Band::Kind::window, W};
  static constexpr bool decodable = true;
  static constexpr std::int64_t query_count(std::int64_t n) { return n; }
  static void check(std::string_view, std::int64_t) {}
};

template <int M>
struct EcpPairs {
  static_assert(M >= 1, "hybridseq::kernels::attention::EcpPairs: the segment length must be at least 1");
  static constexpr const char* name = "ecp";
  static constexpr int segment = M;
  static constexpr Band band{Band::Kind::pairs, M};
  static constexpr bool decodable = true;
  static constexpr std::int64_t query_count(std::int64_t n) { return n; }
  /// ECP splits n = s·m into whole segments.
  static void check(std::string_view api, std::int64_t n) {
    if (n % M != 0)
      fail<config_error>(api, "ECP needs the sequence length to be a multiple of the segment length ", M,
                         ", got T = ", n, " (pad to ", (n + M - 1) / M * M, ")");
  }
};

template <int M>
struct PerceiverCross {
  static_assert(M >= 1, "hybridseq::kernels::attention::PerceiverCross: at least one latent");
  static constexpr const char* name = "perceiver_cross";
  static constexpr int latents = M;
  static constexpr Band band{Band::Kind::causal};  // fewer queries, the causal band
  // Decoding: each new position is a latent query that sees every earlier key, i.e. causal
  // over the cache (the history is appended without queries: layers::Attention::append).
  // So a decoded Attention<PerceiverCross<M>> returns a row per new position, where its
  // forward returns only the last M rows; models::PerceiverArBody drives it that way.
  static constexpr bool decodable = true;
  static constexpr std::int64_t query_count(std::int64_t) { return M; }
  static void check(std::string_view api, std::int64_t n) {
    if (n < M)
      fail<config_error>(api, "PerceiverAR cross-attention needs at least ", M,
                         " positions (the latents), got T = ", n);
  }
};

template <int S>
struct SSplit {
  static_assert(S >= 1, "hybridseq::kernels::attention::SSplit: the segment length must be at least 1");
  static constexpr const char* name = "s_split";
  static constexpr int segment = S;
  static constexpr Band band{Band::Kind::split, S};
  static constexpr bool decodable = false;
  static constexpr std::int64_t query_count(std::int64_t n) { return n; }
  static void check(std::string_view api, std::int64_t n) {
    if (n % S != 0)
      fail<config_error>(api, "s-Split needs the sequence length to be a multiple of the segment length ", S,
                         ", got T = ", n);
  }
};

struct Bidirectional {
  static constexpr const char* name = "bidirectional";
  static constexpr Band band{Band::Kind::full};
  static constexpr bool decodable = false;
  static constexpr std::int64_t query_count(std::int64_t n) { return n; }
  static void check(std::string_view, std::int64_t) {}
};

/// Score entries a query sees, summed over all queries: the exact work of an ideal kernel.
template <class Scheme>
constexpr std::int64_t visible_entries(std::int64_t n) {
  std::int64_t total = 0;
  for (std::int64_t t = n - Scheme::query_count(n); t < n; ++t)
    total += Scheme::band.key_end(t, n) - Scheme::band.key_begin(t, n);
  return total;
}

/// Score entries computed by a kernel tiled `tile` × `tile` (query tiles start at the first
/// query, key tiles at key 0): partially visible tiles count whole. With tile = m this is
/// the block count the ECP paper reports (2nm − m² for ECP).
template <class Scheme>
constexpr std::int64_t visited_entries(std::int64_t n, std::int64_t tile) {
  const std::int64_t q0 = n - Scheme::query_count(n);
  std::int64_t total = 0;
  for (std::int64_t t0 = q0; t0 < n; t0 += tile) {
    const std::int64_t t1 = t0 + tile < n ? t0 + tile : n;
    const std::int64_t kb = Scheme::band.key_begin(t0, n) / tile * tile, ke = Scheme::band.key_end(t1 - 1, n);
    for (std::int64_t k0 = kb; k0 < ke; k0 += tile) total += (t1 - t0) * ((k0 + tile < n ? k0 + tile : n) - k0);
  }
  return total;
}

}  // namespace hybridseq::kernels::attention
