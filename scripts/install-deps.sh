#!/usr/bin/env bash
# Installs hybridseq's build and test dependencies from Debian's archive when missing.
# Idempotent: packages already present are not touched, and apt-get runs only if needed.
set -euo pipefail

packages=(
  cmake g++ make
  clang-format           # clang-format 14: the style check (scripts/check-format.sh)
  pyflakes3 shellcheck   # the Python and shell scripts' checks (scripts/check-format.sh)
  clang libclang-rt-14-dev  # clang + libFuzzer: the safetensors fuzz smoke run (scripts/fuzz.sh)
  libeigen3-dev          # Eigen 3.4: host GEMM fallback, small dense maths, half/bfloat16 (io/)
  libboost-dev           # Boost.Hana
  catch2                 # Catch2 v2.13 unit tests
  libbenchmark-dev       # Google Benchmark: hybridseq-bench
  libopenblas-dev        # the host GEMM backend (cblas.h, pthread flavour)
  libopenblas0-openmp    # OpenBLAS sharing Kokkos' OpenMP thread pool
  libcli11-dev           # command-line parsing for examples and tools
  nlohmann-json3-dev     # the safetensors header (io/), JSON results of the examples
  openmpi-bin libopenmpi-dev  # Open MPI: data-parallel training (parallel/mpi.hpp) and its mpirun tests
  dpkg-dev               # apt-get source needs dpkg-source to exist
  xz-utils
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "hybridseq: installing ${missing[*]}"
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
