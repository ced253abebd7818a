#!/usr/bin/env bash
# The formatting check of CI: the library, its header and the kvik command are formatted by
# .clang-format (clang-format 14, Debian 12's), and no line there runs past 100 columns (a
# comment clang-format leaves alone included). `scripts/check_format.sh --fix` formats in place.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if ! command -v clang-format >/dev/null; then
  sudo=$([ "$(id -u)" = 0 ] || echo sudo)
  $sudo apt-get update -qq && $sudo apt-get install -y -qq clang-format >/dev/null
fi
files=$(git ls-files 'src/*.c' 'src/*.h' 'include/*.h' 'tools/*.c' 'tools/*.h')
if [ "${1:-}" = --fix ]; then
  clang-format -i $files
  exit 0
fi
status=0
clang-format --dry-run --Werror $files || status=1
if awk 'length > 100 { printf "%s:%d: %d columns\n", FILENAME, FNR, length; bad = 1 } END { exit bad }' $files
then :; else status=1; fi
[ $status = 0 ] && echo "format: $(echo $files | wc -w) files clean (clang-format $(clang-format --version | grep -o '[0-9]*\.[0-9.]*' | head -1), 100 columns)"
exit $status
