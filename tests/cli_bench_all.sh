#!/bin/sh
# `kvik bench --device all` on the fake driver's GPUs (FAKE_CUDA_DEVICES, at least 2): exit status
# 0, one line per GPU above the tables, and in each table (one per --threads count) one row per
# GPU, the node's totals, the pread ceiling and both targets; no test file left behind. Then
# `--device N` benches GPU N alone, and the command lines it refuses.
#   sh cli_bench_all.sh KVIK DIR
kvik=$1
# A directory of its own, as other tests make test files in DIR at the same time.
dir=$2/cli_bench_all.$$
mkdir "$dir" || exit 1
trap 'rm -rf "$dir"' EXIT
gpus=${FAKE_CUDA_DEVICES:?}
number='[0-9][0-9]*\.[0-9][0-9]'

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# count PATTERN EXPECTED: the lines of $out that match PATTERN (an extended regex)
count() {
  n=$(printf '%s\n' "$out" | grep -Ec "$1")
  test "$n" = "$2" || fail "$n lines match '$1', expected $2"
}

out=$("$kvik" bench --device all --dir "$dir" --size 3M --threads 1,3 --repeat 2 2>&1)
rc=$?
printf '%s\n' "$out"
test "$rc" = 0 || fail "kvik bench --device all: exit status $rc"
count "^kvik bench --device all: $gpus GPUs, each reading a file of its own at once$" 1
count "^  GPU [0-9]+: Fake CUDA Device [0-9]+, PCI bus id [0-9a-f:.]+, NUMA node " "$gpus"
count '^READ, every GPU at once: page cache -> device memory, T = [13] ' 2
row=" +$number +$number +$number +${number}x +${number}x "
i=0
while [ "$i" -lt "$gpus" ]; do
  count "^$i$row (held|missed)$" 2
  i=$((i + 1))
done
count "^node$row" 2
count "^pread ceiling, every file at once into pinned memory on T threads: $number GB/s; " 2
count '^target, every GPU >= 0.90x its copy alone while all read: (held|missed) ' 2
count '^target, node total >= 0.85x the pread ceiling: (held|missed) ' 2
count '<- applies' 2
test -z "$(ls "$dir")" || fail "kvik bench --device all left test files in $dir"

out=$("$kvik" bench --device 1 --no-write --dir "$dir" --size 1M --threads 2 --repeat 1 2>&1)
rc=$?
test "$rc" = 0 || fail "kvik bench --device 1: exit status $rc: $out"
count '^kvik bench --device: GPU 1 Fake CUDA Device 1$' 1
count '^2( \(default\))? ' 1  # "(default)" where the machine has 2 CPUs

for args in "--device all --cold" "--device=x" "--device=" "--device all --device=-1"; do
  "$kvik" bench $args --dir "$dir" >/dev/null 2>&1
  rc=$?
  test "$rc" = 2 || fail "kvik bench $args: exit status $rc, expected 2"
done
echo "PASS: kvik bench --device all on $gpus GPUs, and --device N"
