#!/usr/bin/env bash
# ptxas' per-kernel figures (registers, stack frame, spills) of the CUDA configuration:
#
#   cuda-resources.sh compile <nvcc command... -o <object> ...>
#       The CUDA_COMPILER_LAUNCHER of the targets that carry the hot kernels
#       (cmake/hybridseqCuda.cmake): runs the compiler with ptxas' verbose report
#       (-Xptxas=-v) and writes the figures of every kernel, demangled, beside the object
#       (<object>.resources), so they stay in step with it across incremental builds.
#   cuda-resources.sh check <build dir> <kernel pattern> <max stack bytes>
#       Fails unless every kernel of the build whose demangled name matches the extended
#       regular expression spills nothing and keeps its stack frame within the bound.
set -euo pipefail

mode=${1:?usage: cuda-resources.sh compile|check ...}
shift

case "$mode" in
compile)
  object=""
  for ((i = 1; i < $#; ++i)); do [[ "${!i}" == "-o" ]] && { j=$((i + 1)); object=${!j}; }; done
  [[ -n "$object" ]] || { echo "hybridseq: cuda-resources.sh: no -o <object> in the compile command" >&2; exit 2; }
  report="$object.resources"
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  status=0
  "$@" -Xptxas=-v 2>"$log" || status=$?
  # ptxas prints "Function properties for <mangled>" and, on the next line, the stack frame
  # and spills; "Used N registers" follows for entry functions.
  grep -v -E '^ptxas info|^ +[0-9]+ bytes stack frame' "$log" >&2 || true
  awk '/Function properties for / { name = $NF; next }
       name != "" && /bytes stack frame/ { frame = $1; stores = $5; loads = $9; next }
       name != "" && /Used [0-9]+ registers/ { for (i = 1; i <= NF; ++i) if ($i == "Used") regs = $(i + 1)
                                                print name, regs, frame, stores, loads; name = "" }' "$log" |
    while read -r mangled regs frame stores loads; do
      printf '%s\t%s\t%s\t%s\t%s\n' "$regs" "$frame" "$stores" "$loads" "$(c++filt "$mangled")"
    done >"$report"
  exit "$status"
  ;;
check)
  dir=${1:?build dir}
  pattern=${2:?kernel pattern}
  max_stack=${3:?max stack bytes}
  matches=$(find "$dir" -name '*.resources' -exec cat {} + | awk -F '\t' -v p="$pattern" '$5 ~ p' | sort -u)
  [[ -n "$matches" ]] || { echo "hybridseq: no kernel compiled under $dir matches '$pattern'" >&2; exit 1; }
  # One line per kernel over the bound, then a summary of all of them.
  awk -F '\t' -v max="$max_stack" -v p="$pattern" '
    { n++; if ($1 > regs) regs = $1; if ($2 > stack) stack = $2; spills += $3 + $4
      if ($3 > 0 || $4 > 0 || $2 > max) { bad++; printf "over budget: %s registers, %s B stack, %s/%s B spilled: %s\n", $1, $2, $3, $4, $5 } }
    END { printf "%d kernels matching %s: at most %d registers and %d B of stack, %d B spilled\n", n, p, regs, stack, spills
          exit bad > 0 }' <<<"$matches" || {
    echo "hybridseq: kernels above spill registers or exceed $max_stack B of stack" >&2
    exit 1
  }
  ;;
*)
  echo "usage: cuda-resources.sh compile|check ..." >&2
  exit 2
  ;;
esac
