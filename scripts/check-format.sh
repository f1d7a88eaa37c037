#!/usr/bin/env bash
# Fails, listing the files, when any tracked C++ file differs from clang-format's output
# (the style in .clang-format; clang-format 14, Debian 12's). Fix with:
#   git ls-files '*.hpp' '*.cpp' | xargs clang-format -i
# and when pyflakes finds undefined, shadowed or unused names in a tracked Python script, or
# when a shell script draws a shellcheck warning: the scripts that run where nothing can be
# fixed (the GPU machine's device-check.sh and device_vs_pytorch.py) must not fail on a name.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.hpp' '*.cpp' '*.h')
report=$(mktemp)
trap 'rm -f "$report"' EXIT
if ! clang-format --dry-run -Werror "${files[@]}" 2>"$report"; then
  grep -o '^[^:]*:[0-9]*:[0-9]*: error' "$report" | cut -d: -f1 | sort -u | sed 's/^/  not formatted: /' >&2
  echo "hybridseq: clang-format check failed (run: git ls-files '*.hpp' '*.cpp' | xargs clang-format -i)" >&2
  exit 1
fi
echo "hybridseq: ${#files[@]} C++ files match .clang-format"
mapfile -t scripts < <(git ls-files '*.py')
pyflakes3 "${scripts[@]}" || { echo "hybridseq: pyflakes found the problems above" >&2; exit 1; }
echo "hybridseq: ${#scripts[@]} Python files pass pyflakes"
mapfile -t shells < <(git ls-files '*.sh' .ci/run)
shellcheck -S warning "${shells[@]}" || { echo "hybridseq: shellcheck found the problems above" >&2; exit 1; }
echo "hybridseq: ${#shells[@]} shell scripts pass shellcheck"
