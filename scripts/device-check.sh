#!/usr/bin/env bash
# The prepared GPU check, for a machine lent with a GPU and nothing to install (the `device`
# tool: one H200, minutes of time, no network). It runs, from the repository root, what the
# CUDA configuration built on a development machine (scripts/test.sh step 6, or
# `cmake --build build-cuda --target test_attention test_mamba test_gss test_layers quickstart`):
#   1. each test family binary present, its Kokkos::Cuda half (the Serial half runs in CI),
#      with the golden files of this checkout;
#   2. quickstart on the GPU: the README's hybrid trained to its loss bound, then decoded.
# and writes <out>/device-check.md (one row per step: status, seconds, last line of output)
# plus one log per step. Exits non-zero if any step failed; a missing binary is a failure.
#
# Usage: scripts/device-check.sh [build dir (build-cuda)] [out dir ($OUT, else build dir)]
# With the device tool, carry the binaries (each a path under the build dir), e.g.
#   run(command="bash scripts/device-check.sh", carry=["build-cuda/tests/test_attention", ...])
set -uo pipefail
cd "$(dirname "$0")/.."

build=${1:-build-cuda}
out=${2:-${OUT:-$build}}
mkdir -p "$out"
export HYBRIDSEQ_GOLDEN_DIR="$PWD/tests/golden"  # the binaries were built against another path
export OMP_PROC_BIND=false

report="$out/device-check.md"
{
  echo "# hybridseq device check, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
  echo
  echo "| step | status | seconds | last line |"
  echo "|---|---|---|---|"
} >"$report"

failed=0
step() {  # step <name> <command...>
  local name=$1
  shift
  local log="$out/$name.log" start status
  start=$(date +%s.%N)
  if [[ ! -x "$1" ]]; then
    echo "$1 is missing (build it with the CUDA configuration and carry it)" >"$log"
    status=127
  else
    "$@" >"$log" 2>&1
    status=$?
  fi
  local seconds last
  seconds=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
  last=$(grep -v '^[[:space:]]*$' "$log" | tail -n 1 | tr '|' '/' | cut -c1-160)
  printf '| %s | %s | %.1f | %s |\n' "$name" "$([[ $status == 0 ]] && echo pass || echo "FAIL ($status)")" \
    "$seconds" "$last" >>"$report"
  ((status == 0)) || failed=1
}

for family in attention mamba gss layers; do
  step "test_$family" "$build/tests/test_$family" "*- Kokkos::Cuda" --warn NoTests
done
step quickstart "$build/examples/quickstart" --steps 2000 --max-loss 2.5

cat "$report"
exit "$failed"
