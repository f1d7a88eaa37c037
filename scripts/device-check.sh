#!/usr/bin/env bash
# The prepared GPU check, for a machine lent with a GPU and nothing to install (the `device`
# tool: one H200, minutes of time, no network). It runs, from the repository root, what the
# CUDA configuration built on a development machine and carried there:
#   1. every test family binary's Kokkos::Cuda half (the Serial half runs in CI), with the golden
#      files of this checkout: each test case in its own process, the families side by side (one
#      GPU, many host cores), each family under a time limit;
#   2. quickstart on the GPU: the README's hybrid trained to its loss bound, then decoded;
#   3. nccl_check: the Trainer over the NCCL backend with one rank equals the single-process run;
#   4. bench/device_vs_pytorch.py: hybridseq-device-bench and PyTorch on the same GPU and shapes.
# It writes <out>/device-check.md (one row per step: status, seconds, last line of output), one
# log per step and the benchmark table (device_vs_pytorch.md, .json). Exits non-zero if any step
# failed; a missing binary is a failure. About 5 minutes on an H200.
#
# Usage: scripts/device-check.sh [build dir (build-cuda)] [out dir ($OUT, else build dir)]
# Build and pack first (here, not there): cmake --build build-cuda --target hybridseq_device_check,
# then scripts/device-pack.sh. CUDA's runtime libraries come from the GPU machine's toolkit or
# PyTorch's wheels (found below); Debian's that it lacks, from <build>/device-libs.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

build=${1:-build-cuda}
[[ "$build" == /* ]] || build="$PWD/$build"
out=${2:-${OUT:-$build}}
mkdir -p "$out"
export HYBRIDSEQ_GOLDEN_DIR="$PWD/tests/golden"  # the binaries were built against another path
export OMP_PROC_BIND=false
families=(core compose layers attention gss mamba ecp models train)
limit=${DEVICE_CHECK_LIMIT:-420}  # seconds per step (per test case)

[[ -d "$build/device-libs" ]] && export LD_LIBRARY_PATH="$build/device-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# libcudart, libcublas and libnccl of CUDA 13: the toolkit's, else those in PyTorch's wheels.
for lib in libcublas.so.13 libcudart.so.13 libnccl.so.2; do
  if ! ldconfig -p 2>/dev/null | grep -q "$lib"; then
    dir=$(find /usr/local/cuda*/lib* /usr/local/lib /opt /usr/lib -name "$lib" -printf '%h\n' 2>/dev/null | head -n 1)
    [[ -n "$dir" ]] && export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
done

report="$out/device-check.md"
{
  echo "# hybridseq device check, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
  echo
  echo "| step | status | seconds | last line |"
  echo "|---|---|---|---|"
} >"$report"

# step <name> <command...>: runs the command under the time limit into <out>/<name>.log and
# leaves its row in <out>/<name>.row.
step() {
  local name=$1
  shift
  local log="$out/$name.log" start status
  start=$(date +%s.%N)
  if ! command -v "$1" >/dev/null; then
    echo "$1 is missing (build it with the CUDA configuration and carry it)" >"$log"
    status=127
  elif [[ $(type -t "$1") == function ]]; then  # it limits its own commands' time
    "$@" >"$log" 2>&1
    status=$?
  else
    timeout "$limit" "$@" >"$log" 2>&1
    status=$?
    ((status == 124)) && echo "stopped after $limit s" >>"$log"
  fi
  local seconds last
  seconds=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
  last=$(grep -v '^[[:space:]]*$' "$log" | tail -n 1 | tr '|' '/' | cut -c1-600)
  printf '| %s | %s | %.1f | %s |\n' "$name" "$([[ $status == 0 ]] && echo pass || echo "FAIL ($status)")" \
    "$seconds" "$last" >"$out/$name.row"
}

# run_family <family>: each Kokkos::Cuda test case of the family in its own process, so that an
# abort (a host access to device memory aborts the whole program) costs that case alone; the
# last line counts the cases that passed and names those that did not.
run_family() {
  local bin="$build/tests/test_$1" name passed=0 failed=()
  [[ -x "$bin" ]] || { echo "$bin is missing (build it with the CUDA configuration and carry it)"; return 127; }
  while IFS= read -r name; do
    # Catch2 reads ',' '[' ']' and '\' in a filter as syntax: escape them.
    echo "=== $name"
    if timeout "$limit" "$bin" "$(sed 's/[],[\\]/\\&/g' <<<"$name")" --warn NoTests --durations yes; then
      passed=$((passed + 1))
    else
      failed+=("$name")
    fi
  done < <("$bin" --list-test-names-only "*- Kokkos::Cuda" | grep -- '- Kokkos::Cuda$')
  echo "$passed of $((passed + ${#failed[@]})) test cases passed${failed:+; failed: $(printf '%s; ' "${failed[@]}")}"
  ((${#failed[@]} == 0 && passed > 0))
}

for family in "${families[@]}"; do
  step "test_$family" run_family "$family" &
done
wait
step quickstart "$build/examples/quickstart" --steps 2000 --max-loss 2.5
step nccl_check "$build/tests/nccl_check"
step device_vs_pytorch python3 bench/device_vs_pytorch.py --bench "$build/bench/hybridseq-device-bench" --out "$out"

all_passed=0
rows=()
for family in "${families[@]}"; do rows+=("test_$family"); done
for name in "${rows[@]}" quickstart nccl_check device_vs_pytorch; do
  cat "$out/$name.row" >>"$report"
  grep -q '| pass |' "$out/$name.row" || all_passed=1
  rm -f "$out/$name.row"
done
echo >>"$report"
[[ -f "$out/device_vs_pytorch.md" ]] && cat "$out/device_vs_pytorch.md" >>"$report"
cat "$report"
exit "$all_passed"
