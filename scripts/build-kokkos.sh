#!/usr/bin/env bash
# Builds Kokkos 3.4.01 (Serial + OpenMP, C++20) from the Kokkos sources inside Debian's
# `trilinos` source package, into a per-machine cache outside the source tree, once.
#
# Debian's binary libtrilinos-kokkos-dev is Serial-only, so the OpenMP backend needs a
# source build. The system's apt configuration is not touched: the deb-src list and the
# package indices live in a temporary directory for the duration of this script.
#
# Prints the install prefix on its last line (use it as Kokkos_ROOT).
set -euo pipefail

cache="${HYBRIDSEQ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hybridseq}"
prefix="$cache/kokkos-3.4.01-serial-openmp"
if [[ -f "$prefix/lib/cmake/Kokkos/KokkosConfig.cmake" || -f "$prefix/lib64/cmake/Kokkos/KokkosConfig.cmake" ]]; then
  echo "$prefix"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$cache"

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
src=$(echo "$work"/src/*/packages/kokkos)
grep -q "KOKKOS_VERSION_PATCH 01" "$src/CMakeLists.txt" 2>/dev/null || \
  grep -q "Kokkos_VERSION_PATCH 01" "$src/CMakeLists.txt" || echo "hybridseq: warning: Kokkos version is not 3.4.01" >&2

echo "hybridseq: building Kokkos (Serial + OpenMP, C++20) into $prefix" >&2
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DCMAKE_CXX_STANDARD=20 -DKokkos_CXX_STANDARD=20 -DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_OPENMP=ON \
  -DKokkos_ENABLE_TESTS=OFF -DKokkos_ENABLE_EXAMPLES=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON >&2
cmake --build "$work/build" -j "$(nproc)" >&2
cmake --install "$work/build" >&2
echo "$prefix"
