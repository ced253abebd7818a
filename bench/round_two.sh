#!/bin/sh
# Every comparison of "performance round two" (issue 29) in one command, each next to its
# baseline in one run, each program saying "met" or "missed" where it has a target:
#
#   1. start-up: a new process's open and 4 KiB read, kvik against plain C and dd (bench_startup);
#   2. small reads: kvik_file_read of 4 KiB against pread (bench_small_reads), and batches of 4 KiB
#      reads at depths 1 to 128 against a pread loop and fio's io_uring (bench_io_uring --targets);
#   3. buffered writes with 1, 2 and 4 threads against fio (bench_buffered_writes);
#   4. direct reads that know the page cache, warm, half warm and cold, against fio --direct=1
#      (bench_direct_cache);
#   5. with --gpu: first zero-copy reads under off, auto and on (bench_zero_copy_first), and kvik
#      against KvikIO, fresh handles and repeated reads (bench/kvikio_compare.py, where kvikio
#      imports), and repeated reads through one handle at kvik's defaults, zero-copy off and auto
#      (bench/repeated_reads.py).
#
# The fio rows need fio (Debian: apt-get install fio; on a machine without network, a static one
# from bench/fio_static.sh on PATH); without it each program says so.
#
# usage: bench/round_two.sh [BUILD_DIR] [DIR] [--gpu]   (defaults: build, $TMPDIR or /tmp)
set -u
build=${1:-build}
dir=${2:-${TMPDIR:-/tmp}}
gpu=${3:-}
here=$(cd "$(dirname "$0")" && pwd)

section() { printf '\n==== %s\n' "$*"; }
run() {
  "$@" || printf '(%s failed: exit status %s)\n' "$1" "$?"
}

section "1. start-up (bench_startup 300)"
run "$build/bench_startup" 300
section "2a. small reads (bench_small_reads $dir 4096 200000 3)"
run "$build/bench_small_reads" "$dir" 4096 200000 3
section "2b. small batches (bench_io_uring $dir --size 1G --reads 200000 --repeat 3 --targets)"
run "$build/bench_io_uring" "$dir" --size 1G --reads 200000 --repeat 3 --targets
section "3. buffered writes (bench_buffered_writes --dir $dir --size 1G --threads 1,2,4 --pairs 3)"
run "$build/bench_buffered_writes" --dir "$dir" --size 1G --threads 1,2,4 --pairs 3
section "4. direct reads and the page cache (bench_direct_cache $dir 1024 2 3)"
run "$build/bench_direct_cache" "$dir" 1024 2 3
[ "$gpu" = --gpu ] || exit 0

file=$dir/kvik-round-two.bin
head -c 4G /dev/urandom >"$file" && cat "$file" >/dev/null
section "5a. first zero-copy reads (bench_zero_copy_first $file 1,4,8,16 3)"
run "$build/bench_zero_copy_first" "$file" 1,4,8,16 3
for fresh in --fresh ""; do
  section "5b. next to KvikIO (kvikio_compare.py --zero-copy auto $fresh)"
  run python3 "$here/kvikio_compare.py" --lib "$build/libkvik.so" --file "$file" \
    --threads 1,4,8,16 --repeat 3 --zero-copy auto $fresh
done
section "5c. repeated reads through one handle (repeated_reads.py --modes off,auto)"
run python3 "$here/repeated_reads.py" --lib "$build/libkvik.so" --file "$file" --modes off,auto \
  --reads 8 --rounds 2
rm -f "$file"
