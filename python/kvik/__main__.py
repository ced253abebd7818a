"""`python -m kvik ARGS...` is the `kvik` command (`info`, `bench`, ...): the same C code, run in
this process."""
import sys

from ._lib import cli_main


def main() -> int:
    return cli_main(["kvik", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
