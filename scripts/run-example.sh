#!/usr/bin/env bash
# Builds and runs the main example end to end on a fresh Debian machine (dependencies and
# Kokkos are set up first, as for the tests): hybridseq-ablate's default comparison of pure
# SSM, pure sliding-window Transformer, SSM→attention hybrids and PHA on selective copy.
# Extra arguments go to hybridseq-ablate (e.g. --task decode-recall, --arch pha-ablations).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
kokkos_root=$(bash scripts/build-kokkos.sh | tail -n 1)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DKokkos_ROOT="$kokkos_root" >/dev/null
cmake --build build -j "$(nproc)" --target hybridseq-ablate
OMP_PROC_BIND=${OMP_PROC_BIND:-false} ./build/examples/hybridseq-ablate "$@"
