#!/bin/sh
# Installs kvik into a temporary prefix and builds the hello example against it three ways:
# pkg-config (shared), pkg-config --static, and CMake's find_package(kvik); each program, and the
# installed kvik command, runs without LD_LIBRARY_PATH. Also checks that the shared library exports
# kvik_ symbols only.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1 src=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
pc=$(dirname "$(find "$work/prefix" -name kvik.pc)")
libdir=$(dirname "$pc")
export PKG_CONFIG_PATH="$pc"
unset LD_LIBRARY_PATH

# The README's line, as it stands: the .pc file puts the library directory in the RPATH.
cc "$src/examples/hello.c" $(pkg-config --cflags --libs kvik) -o "$work/hello-shared"
"$work/hello-shared" "$work/f1"
"$work/prefix/bin/kvik" info "$work" >/dev/null

# libkvik.a by name, so that the linker cannot pick the shared library; then what it needs.
cc -static-libgcc "$src/examples/hello.c" $(pkg-config --cflags kvik) "$libdir/libkvik.a" \
  $(pkg-config --libs --static kvik | sed 's/-lkvik//') -o "$work/hello-static"
"$work/hello-static" "$work/f2"
if ldd "$work/hello-static" | grep -q libkvik; then echo "static build links libkvik.so"; exit 1; fi

mkdir "$work/consumer"
cat >"$work/consumer/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(consumer C)
find_package(kvik 0.1 REQUIRED)
add_executable(hello "$src/examples/hello.c")
target_link_libraries(hello PRIVATE kvik::kvik)
CMAKE
cmake -S "$work/consumer" -B "$work/consumer/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/consumer/build" >/dev/null
"$work/consumer/build/hello" "$work/f3"

exported=$(nm -D --defined-only "$libdir/libkvik.so" | awk '$3 != "" {print $3}' | grep -v '^KVIK_' || true)
stray=$(printf '%s\n' "$exported" | grep -v '^kvik_' || true)
if [ -n "$stray" ]; then echo "exported symbols without the kvik_ prefix: $stray"; exit 1; fi
echo "install test: pkg-config, static and find_package consumers work; $(printf '%s\n' "$exported" | wc -l) symbols exported, all kvik_"
