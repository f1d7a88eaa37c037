#!/usr/bin/env bash
# Crash-consistency check of checkpoints: runs text_lm with a checkpoint after every step
# (a ~10 MB file: each write takes long enough to be hit), kills it with SIGKILL at a random
# moment, and asserts on every next start that
#   - the checkpoint is valid (the run resumes from it, at a step no earlier than before), and
#   - a temporary file left by a killed write is removed (text_lm reports it);
# then stops a resumed run with SIGINT and SIGTERM, which must finish the step, write the
# checkpoint and exit with 128 + signal, leaving no temporary file.
# Usage: scripts/kill-checkpoint-loop.sh [build dir] [kills]   (default: build 50)
set -euo pipefail
cd "$(dirname "$0")/.."

build=${1:-build}
kills=${2:-50}
tool=$build/examples/text_lm
[[ -x $tool ]] || { echo "kill-checkpoint-loop: $tool not built (cmake --build $build --target text_lm)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for _ in $(seq 20); do cat README.md docs/design.md; done >"$work/corpus.txt"
ck=$work/ckpt.safetensors
args=(--corpus "$work/corpus.txt" --steps 1000000 --batch 1 --len 16 --eval-tokens 64
      --checkpoint "$ck" --checkpoint-every 1 --resume)
export OMP_NUM_THREADS=1 OMP_PROC_BIND=false

fail() { echo "kill-checkpoint-loop: FAILED: $*" >&2; cat "$work/log" >&2; exit 1; }

# Starts text_lm in the background ($pid) and waits until it trains: it resumed (or, the first
# time, wrote its first checkpoint).
start() {
  "$tool" "${args[@]}" >"$work/log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do
    if grep -q "resumed from" "$work/log" || { [[ $1 == first ]] && [[ -e $ck ]]; }; then return; fi
    kill -0 "$pid" 2>/dev/null || fail "text_lm exited on its own"
    sleep 0.05
  done
  fail "text_lm did not start training within 30 s"
}

# The step the last start resumed from.
resumed_step() { sed -n 's/^resumed from .* at step \([0-9]*\)$/\1/p' "$work/log"; }

torn=0 removed=0 last=0
start first
for ((i = 1; i <= kills; ++i)); do
  sleep "0.$(printf %03d $((RANDOM % 400)))"
  kill -9 "$pid"
  wait "$pid" 2>/dev/null || true
  left_tmp=0
  [[ -e $ck.tmp ]] && left_tmp=1 && torn=$((torn + 1))
  start next
  step=$(resumed_step)
  [[ -n $step ]] || fail "kill $i: no valid checkpoint to resume from"
  ((step >= last)) || fail "kill $i: resumed at step $step, before the previous $last"
  if ((left_tmp)); then
    grep -q "removed .*\.tmp left by an interrupted write" "$work/log" || fail "kill $i: stale .tmp not removed"
    removed=$((removed + 1))
  fi
  last=$step
done

# SIGINT, then SIGTERM: finish the step, write the checkpoint, exit 128 + signal.
for signal in INT TERM; do
  kill -s "$signal" "$pid"
  rc=0
  wait "$pid" || rc=$?
  want=$((128 + $(kill -l "$signal")))
  ((rc == want)) || fail "SIG$signal: exit status $rc, expected $want"
  grep -q "stopped by signal .* checkpoint written" "$work/log" || fail "SIG$signal: no checkpoint reported"
  [[ ! -e $ck.tmp ]] || fail "SIG$signal: temporary file left behind"
  stopped=$(sed -n 's/^stopped by signal [0-9]* after step \([0-9]*\);.*/\1/p' "$work/log")
  start next
  [[ $(resumed_step) == "$stopped" ]] || fail "SIG$signal: stopped at step $stopped but resumed at $(resumed_step)"
done
kill -9 "$pid"
wait "$pid" 2>/dev/null || true

echo "kill-checkpoint-loop: $kills x SIGKILL: every restart resumed from a valid checkpoint (steps up to $last);" \
  "$torn kills left a torn .tmp, all $removed removed at the next start; SIGINT -> 130, SIGTERM -> 143 with a" \
  "checkpoint of the finished step and no .tmp"
