#pragma once
/// \file
/// Transparent huge pages for the library's large host buffers.
///
/// A training step walks its activations, and a long-context attention its K and V rows, with
/// strides of kilobytes: on 4 KiB pages that is a TLB miss every row or two. Linux backs
/// anonymous memory with 2 MiB pages where the program asks (`madvise(MADV_HUGEPAGE)`; "madvise"
/// is the distributions' default mode of transparent huge pages), and only for pages not yet
/// touched, unless asked to collapse a range. So the buffers that hold most of a step's bytes,
/// the Workspace's chunks and the contiguous parameters, ask for both right after their
/// allocation. The advice covers the whole 2 MiB pages inside the buffer; it is a no-op for
/// device memory, on other systems, and where the kernel has huge pages turned off (madvise's
/// refusal is ignored: it is advice).

#include <cstddef>
#include <cstdint>
#include <type_traits>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "kokkos_compat.hpp"

namespace hybridseq::core {

/// The huge page size the advice is given for (x86-64's and AArch64's default PMD size).
inline constexpr std::size_t huge_page_bytes = std::size_t{2} << 20;

/// MADV_COLLAPSE (Linux 6.1; the C library's headers of Debian 12 predate it). Older kernels
/// refuse it, which leaves the advice alone in effect.
inline constexpr int madv_collapse = 25;

/// Advises huge pages for the whole 2 MiB pages within [data, data + bytes) when MemorySpace
/// is host memory; returns the bytes advised (0 when nothing was).
template <class MemorySpace>
std::size_t advise_huge_pages(void* data, std::size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if constexpr (std::is_same_v<MemorySpace, Kokkos::HostSpace>) {
    const auto first = reinterpret_cast<std::uintptr_t>(data);
    const std::uintptr_t begin = (first + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes,
                         end = (first + bytes) / huge_page_bytes * huge_page_bytes;
    if (data == nullptr || end <= begin) return 0;
    void* const range = reinterpret_cast<void*>(begin);
    if (madvise(range, end - begin, MADV_HUGEPAGE) != 0) return 0;
    // Memory the allocator hands back from earlier frees is touched already, on small pages,
    // and the advice alone leaves those; collapsing makes the range huge now either way.
    (void)madvise(range, end - begin, madv_collapse);
    return end - begin;
  }
#else
  (void)data;
  (void)bytes;
#endif
  return 0;
}

/// The same for a contiguous view's memory.
template <class View>
std::size_t advise_huge_pages(const View& view) {
  return advise_huge_pages<typename View::memory_space>(const_cast<void*>(static_cast<const void*>(view.data())),
                                                        view.span() * sizeof(typename View::value_type));
}

}  // namespace hybridseq::core
