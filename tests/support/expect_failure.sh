#!/usr/bin/env bash
# expect_failure.sh <regex> <command...>: passes when the command exits non-zero and its
# output (stdout + stderr) matches the extended regex; CTest's PASS_REGULAR_EXPRESSION alone
# would ignore the exit status.
set -uo pipefail
regex=$1
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if ((rc == 0)); then
  echo "expect_failure: exit status 0, expected non-zero" >&2
  exit 1
fi
if ! grep -Eq -- "$regex" <<<"$out"; then
  echo "expect_failure: output does not match: $regex" >&2
  exit 1
fi
