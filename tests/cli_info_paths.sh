#!/bin/sh
# `kvik info PATH` where no test file can be made in PATH (procfs, a device, a missing
# directory): everything else is printed, and one line says that O_DIRECT was not checked, and
# why. The exit status is 0 where PATH exists, 1 where it does not.
#   sh cli_info_paths.sh KVIK
kvik=$1

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# check PATH DIR STATUS REASON: the exit status, the one line about DIR (ending in REASON), and
# the sections printed before and after it.
check() {
  path=$1 dir=$2 status=$3 reason=$4
  out=$("$kvik" info "$path" 2>&1)
  rc=$?
  test "$rc" = "$status" || fail "kvik info $path: exit status $rc, expected $status"
  lines=$(printf '%s\n' "$out" | grep -c "^O_DIRECT in $dir: not checked: cannot create a test file: $reason")
  test "$lines" = 1 || fail "kvik info $path: no one line 'O_DIRECT in $dir: not checked: ...$reason'"
  printf '%s\n' "$out" | grep "^O_DIRECT"
  for section in '^settings:' '^remote files: ' '^host IO:' '^  thread pool: ' '^  batches: '; do
    printf '%s\n' "$out" | grep -q "$section" || fail "kvik info $path: nothing matches '$section'"
  done
}

check /proc/self/status /proc/self 0 ''
printf '%s\n' "$out" | grep -q '^compat mode [A-Z]* chose [A-Za-z]* for /proc/self/status: ' ||
  fail "kvik info /proc/self/status: no line on the path that serves it"
check /dev/zero /dev/zero 0 'Not a directory'
check /nonexistent/kvik-info-dir /nonexistent/kvik-info-dir 1 'No such file or directory'
echo "PASS: kvik info where O_DIRECT cannot be checked"
