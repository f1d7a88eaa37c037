#!/usr/bin/env bash
# Builds Kokkos 3.4.01 from the Kokkos sources inside Debian's `trilinos` source package, into
# a per-machine cache outside the source tree, once per flavour:
#   (default)  Serial + OpenMP, C++20                      → <cache>/kokkos-3.4.01-serial-openmp
#   --cuda     Serial + Cuda (sm_80 and sm_90 code)        → <cache>/kokkos-3.4.01-serial-cuda
#
# Debian's binary libtrilinos-kokkos-dev is Serial-only, so the OpenMP and Cuda backends need a
# source build. The system's apt configuration is not touched: the deb-src list and the
# package indices live in a temporary directory for the duration of this script; the Kokkos
# sources are kept in the cache, so the second flavour downloads nothing.
#
# Prints the install prefix on its last line (use it as Kokkos_ROOT).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
flavour=serial-openmp
[[ "${1:-}" == "--cuda" ]] && flavour=serial-cuda
cache="${HYBRIDSEQ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hybridseq}"
prefix="$cache/kokkos-3.4.01-$flavour"
# The recipe below, by flavour: a cached prefix built by another recipe is rebuilt.
recipe="openmp 1"
[[ "$flavour" == serial-cuda ]] && recipe="cuda 2 (sm_80 + sm_90)"
stamp="$prefix/hybridseq-recipe.txt"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$recipe" ]]; then
  echo "$prefix"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$cache"
src="$cache/kokkos-3.4.01-src"
# Fetches Debian's trilinos source package and keeps its Kokkos directory as $src.
fetch_sources() {
  mkdir -p "$work/lists/partial"

  # A throwaway apt configuration that only knows the source index of the Debian mirror this
  # machine already uses: the first `deb` URI serving the release's own suite, read from the
  # machine's apt sources (deb822 `.sources` or one-line `.list` files).
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  [[ -n "$codename" ]] || { echo "hybridseq: /etc/os-release names no VERSION_CODENAME" >&2; exit 1; }
  mirror=$(
    shopt -s nullglob
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
      [[ -f "$f" ]] && awk -v s="$codename" '$1 == "deb" { for (i = 2; i <= NF; ++i) if ($i !~ /^\[/ && $i ~ /:\/\//) { if ($(i + 1) == s) print $i; break } }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
      awk -v s="$codename" 'BEGIN { RS = ""; FS = "\n" }
        { types = uris = suites = ""
          for (i = 1; i <= NF; ++i) {
            if ($i ~ /^Types:/) types = $i; else if ($i ~ /^URIs:/) uris = $i; else if ($i ~ /^Suites:/) suites = $i
          }
          if (types ~ /(^|[ :])deb( |$)/ && (" " suites " ") ~ (" " s " ")) { sub(/^URIs:[ ]*/, "", uris); split(uris, u, " "); print u[1] } }' "$f"
    done | head -n 1
  )
  [[ -n "$mirror" ]] || { echo "hybridseq: no apt source for Debian '$codename' found under /etc/apt to fetch trilinos from" >&2; exit 1; }
  echo "deb-src $mirror $codename main" >"$work/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
            -o "Dir::State::Lists=$work/lists" -o "Dir::Cache::archives=$work")
  echo "hybridseq: fetching Debian's trilinos source package for Kokkos 3.4.01" >&2
  apt-get "${apt_opts[@]}" update -qq >&2
  (cd "$work" && apt-get "${apt_opts[@]}" source --download-only trilinos >&2)

  orig=$(ls "$work"/trilinos_*.orig.tar.*)
  mkdir -p "$work/src"
  tar -xf "$orig" -C "$work/src" --wildcards '*/packages/kokkos/*'
  rm -rf "$src.partial"
  mv "$(echo "$work"/src/*/packages/kokkos)" "$src.partial"
  mv "$src.partial" "$src"
  grep -q "KOKKOS_VERSION_PATCH 01" "$src/CMakeLists.txt" 2>/dev/null || \
    grep -q "Kokkos_VERSION_PATCH 01" "$src/CMakeLists.txt" || echo "hybridseq: warning: Kokkos version is not 3.4.01" >&2
}
[[ -f "$src/CMakeLists.txt" ]] || fetch_sources

common=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" -DKokkos_ENABLE_SERIAL=ON
        -DKokkos_ENABLE_TESTS=OFF -DKokkos_ENABLE_EXAMPLES=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON)
if [[ "$flavour" == serial-cuda ]]; then
  command -v nvcc >/dev/null || { echo "hybridseq: --cuda needs nvcc on PATH (the CUDA toolkit)" >&2; exit 1; }
  # Kokkos 3.4 with CUDA 13 (see cmake/kokkos3-cuda13-shim.h): its own nvcc_wrapper as the
  # compiler, C++17 (its sources predate nvcc's C++20), Ampere as Kokkos' architecture (3.4
  # knows no Hopper) with Hopper machine code beside it: Kokkos::Cuda::initialize aborts when
  # the major compute capability its own probe kernel runs at differs from the device's, and
  # PTX for 8.0 JIT-compiled on a 9.0 device still reports 8.0 (seen on an H200);
  # KOKKOS_ARCH_MAXWELL50 keeps its half_t on the software path (the __half one does not
  # compile against CUDA 13's cuda_fp16.h), and the shim is force-included for the CUDA
  # runtime calls whose signatures CUDA 13 changed. The sm_90 code is appended by nvcc itself
  # (NVCC_APPEND_FLAGS): nvcc_wrapper refuses a second architecture flag.
  echo "hybridseq: building Kokkos (Serial + Cuda) into $prefix" >&2
  cmake -S "$src" -B "$work/build" "${common[@]}" -DCMAKE_CXX_COMPILER="$src/bin/nvcc_wrapper" \
    -DCMAKE_CXX_STANDARD=17 -DKokkos_CXX_STANDARD=17 -DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_CUDA_LAMBDA=ON \
    -DKokkos_ENABLE_CUDA_CONSTEXPR=ON -DKokkos_ARCH_AMPERE80=ON \
    -DCMAKE_CXX_FLAGS="-arch=sm_80 -DKOKKOS_ARCH_MAXWELL50 -include $root/cmake/kokkos3-cuda13-shim.h" >&2
else
  echo "hybridseq: building Kokkos (Serial + OpenMP, C++20) into $prefix" >&2
  cmake -S "$src" -B "$work/build" "${common[@]}" -DCMAKE_CXX_STANDARD=20 -DKokkos_CXX_STANDARD=20 \
    -DKokkos_ENABLE_OPENMP=ON >&2
fi
[[ "$flavour" == serial-cuda ]] && export NVCC_APPEND_FLAGS="-gencode=arch=compute_90,code=sm_90"
cmake --build "$work/build" -j "$(nproc)" >&2
rm -rf "$prefix"
cmake --install "$work/build" >&2
echo "$recipe" >"$stamp"
echo "$prefix"
