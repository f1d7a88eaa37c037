#!/usr/bin/env bash
# Packs what scripts/device-check.sh runs into one compressed archive, for a GPU machine that
# has CUDA and PyTorch but none of Debian's libraries and no network (the `device` tool carries
# at most 64 MiB: the binaries compress about 5x). The Debian shared libraries the binaries load
# that such a machine lacks (Google Benchmark, OpenBLAS and its Fortran runtime) go into
# <build>/device-libs, which device-check.sh puts on LD_LIBRARY_PATH.
#
# Usage: scripts/device-pack.sh [build dir (build-cuda)] [archive (.device/device-check.tar.xz)]
# Then, on the GPU machine, from the repository root:
#   tar xJf .device/device-check.tar.xz && bash scripts/device-check.sh build-cuda
set -euo pipefail
cd "$(dirname "$0")/.."

build=${1:-build-cuda}
archive=${2:-.device/device-check.tar.xz}
binaries=("$build"/tests/test_{core,compose,layers,attention,gss,mamba,ecp,models,train} "$build/tests/nccl_check"
          "$build/examples/quickstart" "$build/bench/hybridseq-device-bench")
for b in "${binaries[@]}"; do
  [[ -x "$b" ]] || { echo "hybridseq: $b is missing: cmake --build $build --target hybridseq_device_check" >&2; exit 1; }
done
rm -rf "$build/device-libs"
mkdir -p "$build/device-libs" "$(dirname "$archive")"
ldd "${binaries[@]}" | awk '$3 ~ /lib(benchmark|openblas|gfortran|quadmath)/ { print $3 }' | sort -u |
  xargs -r cp -L -t "$build/device-libs"
tar cJf "$archive" "${binaries[@]}" "$build/device-libs"
echo "$archive: $(du -h "$archive" | cut -f1)"
