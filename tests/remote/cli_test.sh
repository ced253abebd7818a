#!/bin/sh
# `kvik cat` against the loopback servers of servers.py, which runs this script:
#   servers.py -- sh cli_test.sh KVIK CASE
# CASE: cat (whole objects and byte ranges, to stdout and to files) or errors. Every result is
# compared with the data file the servers serve. Exit 0 pass, 1 fail, 77 skip (nginx did not
# start). With KVIK_TEST_REMOTE_BIG set, servers.py adds the object `big`, which takes several
# of cat's 64 MiB chunks.
kvik=$1
case=$2
if [ -z "$KVIK_TEST_NGINX_URL" ]; then
  echo "skip: KVIK_TEST_NGINX_URL is unset: nginx did not start"
  exit 77
fi
url=$KVIK_TEST_NGINX_URL
data=$KVIK_TEST_REMOTE_DATA
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# kvik cat ARGS... into a pipe, as `kvik cat URL | cmp` does, keeping kvik's exit status: the
# output goes to $tmp/out, the status to $tmp/rc.
cat_pipe() {
  { "$kvik" cat "$@"; echo $? >"$tmp/rc"; } | cat >"$tmp/out"
  test "$(cat "$tmp/rc")" = 0
}

# kvik cat URL --offset OFFSET [--size SIZE] against tail -c and head -c of the data file.
check_range() {
  name=$1 offset=$2 size=$3
  tail -c +$((offset + 1)) "$data/$name" >"$tmp/tail"
  if [ -n "$size" ]; then
    head -c "$size" "$tmp/tail" >"$tmp/expected"
    cat_pipe "$url/$name" --offset "$offset" --size "$size" || fail "cat $name --offset $offset --size $size: status"
  else
    mv "$tmp/tail" "$tmp/expected"
    cat_pipe "$url/$name" --offset "$offset" || fail "cat $name --offset $offset: exit status"
  fi
  cmp "$tmp/out" "$tmp/expected" || fail "cat $name --offset $offset --size $size: wrong bytes"
}

case_cat() {
  for name in empty small medium large; do
    cat_pipe "$url/$name" || fail "cat $name: exit status"
    cmp "$tmp/out" "$data/$name" || fail "cat $name: wrong bytes"
  done
  "$kvik" cat "$url/medium" -o "$tmp/file" || fail "cat -o: exit status"
  cmp "$tmp/file" "$data/medium" || fail "cat -o: wrong bytes"
  "$kvik" cat -o="$tmp/file" "$url/small" || fail "cat -o=FILE: exit status" # truncates
  cmp "$tmp/file" "$data/small" || fail "cat -o=FILE over a longer file: wrong bytes"
  check_range medium 1000 2097152
  check_range medium 1024 2097152
  cat_pipe "$url/medium" --offset 1K --size 2M || fail "cat --offset 1K --size 2M: exit status"
  cmp "$tmp/out" "$tmp/expected" || fail "cat --offset 1K --size 2M: wrong bytes"
  check_range medium 5242880         # the last 123 bytes
  check_range medium 5242000 1048576 # --size past the end: up to the end
  check_range medium 0 1
  check_range medium 0 0
  check_range medium 6291456         # past the end: nothing
  check_range large 1 67108864       # a byte short of a chunk, as the object ends first
  if [ -n "$KVIK_TEST_REMOTE_BIG" ]; then
    cat_pipe "$url/big" || fail "cat big: exit status"
    cmp "$tmp/out" "$data/big" || fail "cat big: wrong bytes"
    check_range big 12345              # chunks that start off the object's 64 MiB marks
    check_range big 67108864 67108865  # a whole chunk and one byte
  fi
  if [ -n "$KVIK_TEST_S3_PRESIGNED_URL" ]; then # a URL whose query matters
    cat_pipe "$KVIK_TEST_S3_PRESIGNED_URL" --size 100K || fail "cat presigned URL: exit status"
    head -c 102400 "$data/medium" | cmp "$tmp/out" - || fail "cat presigned URL: wrong bytes"
  fi
  echo "PASS: kvik cat"
}

case_errors() {
  echo "keep" >"$tmp/existing"
  "$kvik" cat "$url/no-such-object" -o "$tmp/existing" 2>"$tmp/err"
  rc=$?
  cat "$tmp/err"
  test $rc = 1 || fail "cat of a 404: exit status $rc, expected 1"
  grep -q "^kvik cat: .*HTTP 404" "$tmp/err" || fail "cat of a 404: no 'HTTP 404' on stderr"
  test "$(cat "$tmp/existing")" = keep || fail "cat of a 404 changed the -o file"
  "$kvik" cat "$url/small" -o "$tmp/no-such-dir/file" 2>"$tmp/err"
  test $? = 1 || fail "cat -o into a missing directory: exit status"
  grep -q "^kvik cat: $tmp/no-such-dir/file: " "$tmp/err" || fail "cat -o into a missing directory: message"
  if [ -n "$KVIK_TEST_FAULT_URL" ]; then # bodies cut short after the object opened
    "$kvik" cat "$KVIK_TEST_FAULT_URL/truncate/medium" >/dev/null 2>"$tmp/err"
    test $? = 1 || fail "cat of truncated bodies: exit status"
    grep -q "^kvik cat: " "$tmp/err" || fail "cat of truncated bodies: message"
  fi
  echo "PASS: kvik cat errors"
}

case $case in
cat) case_cat ;;
errors) case_errors ;;
*) fail "unknown case '$case'" ;;
esac
