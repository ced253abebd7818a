#!/bin/sh
# `kvik cat` against the loopback servers of servers.py, which runs this script:
#   servers.py -- sh cli_test.sh KVIK CASE
# CASE: cat (whole objects and byte ranges, to stdout and to files), errors, or whole (servers
# that ignore Range). Every result is compared with the data file the servers serve. Exit 0
# pass, 1 fail, 77 skip (nginx, or for `whole` the fault server, did not start). With
# KVIK_TEST_REMOTE_BIG set, servers.py adds the object `big`, which takes several of cat's 64 MiB
# chunks.
kvik=$1
case=$2
url=$KVIK_TEST_NGINX_URL
data=$KVIK_TEST_REMOTE_DATA
tmp=$(mktemp -d) || exit 1
server=
trap 'test -z "$server" || kill "$server"; rm -rf "$tmp"' EXIT

need() {
  if [ -z "$2" ]; then
    echo "skip: $1 is unset: its server did not start"
    exit 77
  fi
}

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
  need KVIK_TEST_NGINX_URL "$url"
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
  need KVIK_TEST_NGINX_URL "$url"
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

# The port `python3 -m http.server 0` prints it listens on, once it does (5 s at most).
http_server_port() {
  for _ in $(seq 100); do
    port=$(sed -n 's/^Serving HTTP on 127.0.0.1 port \([0-9]*\) .*/\1/p' "$tmp/server" 2>/dev/null)
    test -n "$port" && return 0
    sleep 0.05
  done
  return 1
}

# A server that ignores Range answers 200 with the whole object: what a read of the whole object
# in one request (one task) asks for, and no other read. The fault server's norange mode, then
# `python3 -m http.server` itself, as long as python3 is there (it stops after 120 s at most).
case_whole() {
  need KVIK_TEST_FAULT_URL "$KVIK_TEST_FAULT_URL"
  cat_pipe "$KVIK_TEST_FAULT_URL/norange/small" || fail "cat norange/small: exit status"
  cmp "$tmp/out" "$data/small" || fail "cat norange/small: wrong bytes"
  # 5 MiB + 123 bytes: two tasks of the 4 MiB task size, neither the whole object.
  "$kvik" cat "$KVIK_TEST_FAULT_URL/norange/medium" >/dev/null 2>"$tmp/err"
  rc=$?
  cat "$tmp/err"
  test $rc = 1 || fail "cat norange/medium in two tasks: exit status $rc, expected 1"
  grep -qE "^kvik cat: .*GET bytes (0-4194303|4194304-5243002) .*answered 200 with the whole object" \
    "$tmp/err" || fail "cat norange/medium in two tasks: message"
  if ! command -v python3 >/dev/null || ! command -v timeout >/dev/null; then
    echo "PASS: kvik cat of a whole object (python3 -m http.server left out: no python3 or timeout)"
    return
  fi
  timeout 120 python3 -u -m http.server 0 --bind 127.0.0.1 --directory "$data" >"$tmp/server" 2>&1 &
  server=$!
  http_server_port || fail "python3 -m http.server did not start: $(cat "$tmp/server")"
  cat_pipe "http://127.0.0.1:$port/small" || fail "cat from http.server: exit status"
  cmp "$tmp/out" "$data/small" || fail "cat from http.server: wrong bytes"
  KVIKIO_TASK_SIZE=8388608 "$kvik" cat "http://127.0.0.1:$port/medium" -o "$tmp/file" ||
    fail "cat medium in one task from http.server: exit status"
  cmp "$tmp/file" "$data/medium" || fail "cat medium in one task from http.server: wrong bytes"
  "$kvik" cat "http://127.0.0.1:$port/medium" --offset 1 --size 100 >/dev/null 2>"$tmp/err"
  test $? = 1 || fail "cat of a byte range from http.server: exit status"
  grep -q "^kvik cat: .*GET bytes 1-100 .*whole object instead of the range" "$tmp/err" ||
    fail "cat of a byte range from http.server: message"
  echo "PASS: kvik cat of a whole object from servers that ignore Range"
}

case $case in
cat) case_cat ;;
errors) case_errors ;;
whole) case_whole ;;
*) fail "unknown case '$case'" ;;
esac
