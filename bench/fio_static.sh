#!/bin/sh
# Build fio 3.33 from Debian's source as one static binary with no optional engines (psync,
# io_uring and the rest of the built-in ones remain), for a benchmark machine that has no fio and
# no network, such as the H100 machines: copy the binary there and put its directory on PATH
# before bench/round_two.sh.
#
# usage: bench/fio_static.sh OUT_DIR   (needs apt-get with access to deb.debian.org, gcc, make)
set -eu
out=${1:?usage: bench/fio_static.sh OUT_DIR}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$out"
out=$(cd "$out" && pwd) # the build runs in the source tree
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
echo "deb-src [signed-by=$keyring] http://deb.debian.org/debian bookworm main" >"$work/src.list"
apt_opts="-oDir::Etc::SourceList=$work/src.list -oDir::Etc::SourceParts=/dev/null"
apt_opts="$apt_opts -oDir::State::Lists=$work/lists"
# shellcheck disable=SC2086
apt-get $apt_opts update >/dev/null
# shellcheck disable=SC2086
(cd "$work" && apt-get $apt_opts source --download-only fio=3.33-3 >/dev/null 2>&1)
tar -xzf "$work"/fio_3.33.orig.tar.gz -C "$work"
cd "$work/fio-3.33"
./configure --build-static --disable-native --disable-numa --disable-rdma --disable-gfapi \
  --disable-rados --disable-rbd --disable-http --disable-pmem --disable-dfs --disable-xnvme \
  --disable-tcmalloc --disable-libnfs --disable-libzbc >/dev/null
make -j"$(nproc)" fio >/dev/null 2>&1
strip -o "$out/fio" fio
"$out/fio" --version
