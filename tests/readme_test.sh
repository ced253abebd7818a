#!/bin/sh
# The README's C quick start runs as written: its C block, saved as quickstart.c, is built and run
# by the README's own command line (the line of an sh block that starts `cc quickstart.c`), in a
# directory where include/ and build/ stand for the source's headers and this build. The program
# is also compiled with strict warnings, as C11. python/tests/test_readme.py does the same for the
# Python quick start.
# Usage: readme_test.sh SOURCE_DIR BUILD_DIR
set -eu
src=$(cd "$1" && pwd) build=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The bodies of the README's fenced blocks of one language (it has one C block).
blocks() {
  awk -v fence="\`\`\`$1" '$0 == fence { inside = 1; next }
    inside && $0 == "```" { inside = 0; next }
    inside { print }' "$src/README.md"
}
blocks c >"$work/quickstart.c"
command=$(blocks sh | grep '^cc quickstart\.c' || true)
if [ ! -s "$work/quickstart.c" ] || [ -z "$command" ]; then
  echo "README.md: no C block, or no sh block with a line that starts 'cc quickstart.c'"
  exit 1
fi
ln -s "$src/include" "$work/include"
ln -s "$build" "$work/build"

cd "$work"
cc -std=c11 -Wall -Wextra -Wpedantic -Werror -Iinclude -fsyntax-only quickstart.c
unset LD_LIBRARY_PATH
echo "+ $command"
out=$(sh -c "$command")
echo "$out"
echo "$out" | grep -qx 'read 67108864 and 67108864 bytes: same'
if [ -e quickstart.bin ]; then echo "the quick start left quickstart.bin behind"; exit 1; fi
