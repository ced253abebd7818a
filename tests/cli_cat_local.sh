#!/bin/sh
# `kvik cat` of local files, as a path and as a file:// URL: whole, a byte range, to a file with
# -o; a missing file fails with status 1, and --kind (for remote objects) with status 2.
#   sh cli_cat_local.sh KVIK
kvik=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

head -c 3000001 /dev/urandom >"$work/src.bin"
"$kvik" cat "$work/src.bin" >"$work/whole" || fail "cat PATH exited $?"
cmp -s "$work/whole" "$work/src.bin" || fail "cat PATH: other bytes"
"$kvik" cat "file://$work/src.bin" --offset 1000 --size 5000 >"$work/range" || fail "cat file://PATH exited $?"
tail -c +1001 "$work/src.bin" | head -c 5000 | cmp -s - "$work/range" || fail "cat file:// --offset --size: other bytes"
"$kvik" cat "file://localhost$work/src.bin" -o "$work/out" || fail "cat file://localhost/PATH -o exited $?"
cmp -s "$work/out" "$work/src.bin" || fail "cat -o: other bytes"
[ "$("$kvik" cat "$work/src.bin" --offset 4000000 | wc -c)" -eq 0 ] || fail "cat past the end wrote bytes"

"$kvik" cat "$work/missing" 2>"$work/err" >/dev/null
status=$?
[ "$status" = 1 ] || fail "cat of a missing file exited $status, expected 1"
grep -q "No such file" "$work/err" || fail "cat of a missing file said: $(cat "$work/err")"
"$kvik" cat "$work/src.bin" --kind s3 2>/dev/null >/dev/null
status=$?
[ "$status" = 2 ] || fail "cat PATH --kind s3 exited $status, expected 2"
echo "kvik cat: local paths and file:// URLs, whole, ranges and -o"
