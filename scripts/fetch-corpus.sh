#!/usr/bin/env bash
# Obtains the real-text corpus for byte-level language modelling: the King James Bible
# (Authorized Version), 66 books, 31,102 verses, one verse per line, ~4.4 MB of 7-bit ASCII.
#
# Source: Debian's `bible-kjv-text` (the compressed text, /usr/lib/bible.data) read through
# the `bible` program of `bible-kjv` (version 4.38 in Debian 12 "bookworm"). The whole text,
# in canonical order, is the reference range Gen1:1-Rev22:21 (bible(1), "Verse References").
# `-f` turns pretty-printing off, which gives one line per verse prefixed by its reference
# ("Ge1:1 In the beginning God created the heaven and the earth."); that form ignores
# $COLUMNS, so the output is the same on every machine. `-p /usr/lib` stops `bible` from
# picking up a stray bible.data in the working directory.
#
# Writes ${HYBRIDSEQ_DATA:-$HOME/.cache/hybridseq/data}/kjv.txt; does nothing if the file
# is already there with the recorded sha256. Prints the byte count and sha256.
set -euo pipefail

readonly expected_sha256="cd45f0c9cedab8e4439bd6486c8952c77cc8b0ecc5d1f6ae3513f2039f47229d"
readonly expected_bytes=4404412
readonly min_bytes=$((4 * 1000 * 1000))

data_dir="${HYBRIDSEQ_DATA:-$HOME/.cache/hybridseq/data}"
out="$data_dir/kjv.txt"

report() {
  echo "hybridseq: $1 $(stat -c %s "$out") bytes, sha256 $(sha256sum "$out" | cut -d' ' -f1)"
}

if [[ -f "$out" ]] && [[ "$(sha256sum "$out" | cut -d' ' -f1)" == "$expected_sha256" ]]; then
  report "corpus present: $out,"
  exit 0
fi

if ! command -v bible >/dev/null 2>&1 || [[ ! -f /usr/lib/bible.data ]]; then
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  echo "hybridseq: installing bible-kjv bible-kjv-text"
  if ! DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
      bible-kjv bible-kjv-text >/dev/null 2>&1; then
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
      bible-kjv bible-kjv-text >/dev/null
  fi
fi

mkdir -p "$data_dir"
tmp="$(mktemp "$data_dir/kjv.txt.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
# Run from an empty directory, stdin closed: bible reads commands from stdin after its
# arguments, and searches the current directory for data files.
scratch="$(mktemp -d)"
(cd "$scratch" && env -u COLUMNS LC_ALL=C bible -f -p /usr/lib Gen1:1-Rev22:21 </dev/null) >"$tmp"
rmdir "$scratch"

bytes=$(stat -c %s "$tmp")
sha=$(sha256sum "$tmp" | cut -d' ' -f1)
if ((bytes < min_bytes)); then
  echo "hybridseq: fetch-corpus: bible produced $bytes bytes, expected at least $min_bytes" >&2
  exit 1
fi
if LC_ALL=C grep -q '[^[:print:][:space:]]' "$tmp"; then
  echo "hybridseq: fetch-corpus: output has non-printable bytes; not plain text" >&2
  exit 1
fi
if [[ "$sha" != "$expected_sha256" ]]; then
  echo "hybridseq: fetch-corpus: output is $bytes bytes, sha256 $sha;" \
       "expected $expected_bytes bytes, sha256 $expected_sha256 (bible-kjv 4.38)." \
       "Installed: $(dpkg-query -W -f='${Package} ${Version} ' bible-kjv bible-kjv-text)" >&2
  exit 1
fi
chmod 644 "$tmp"  # mktemp creates 0600
mv "$tmp" "$out"
trap - EXIT
report "corpus written: $out,"
