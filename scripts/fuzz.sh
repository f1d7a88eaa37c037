#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, with clang) and fuzzes the safetensors reader for the
# given number of seconds on one worker, from a corpus seeded with tests/golden's files (kept
# in build-fuzz/corpus between runs). Exits non-zero on any finding (crash, sanitizer report,
# unexpected exception, timeout, memory blow-up); findings are written to build-fuzz/.
# Skips (status 0, with a message) when clang with libFuzzer is not installed.
# Usage: scripts/fuzz.sh [seconds]   (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
dir=build-fuzz

cxx=$(command -v clang++ || command -v clang++-14 || true)
if [[ -z $cxx ]]; then
  echo "fuzz: clang++ not found; skipping the safetensors fuzz run"
  exit 0
fi
cmake -S fuzz -B "$dir" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$dir" -j "$(nproc)" >/dev/null
mkdir -p "$dir/corpus"
cp -n tests/golden/*.safetensors "$dir/corpus/" 2>/dev/null || true
# A header larger than any real one is not more interesting; 64 KiB keeps inputs fast.
status=0
ASAN_OPTIONS=detect_leaks=1 "$dir/fuzz_safetensors" "$dir/corpus" -max_total_time="$seconds" -max_len=65536 \
  -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$dir/" -print_final_stats=1 >"$dir/fuzz.log" 2>&1 || status=$?
grep -E "^#[0-9]+.*(INITED|DONE)|^stat::(number_of_executed_units|peak_rss_mb)|^SUMMARY|ERROR|deadly signal" \
  "$dir/fuzz.log" || true
if ((status != 0)); then
  tail -n 40 "$dir/fuzz.log" >&2
  echo "fuzz: the safetensors fuzzer found a problem (status $status); see $dir/crash-* / $dir/timeout-*" >&2
  exit 1
fi
echo "fuzz: safetensors reader, ${seconds} s: no findings"
