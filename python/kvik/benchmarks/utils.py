"""The helpers of kvikio's benchmark scripts (kvikio.benchmarks.utils), on kvik."""
from __future__ import annotations

import argparse
import os
import pathlib
import re
import subprocess

import kvik
import kvik.cufile_driver
import kvik.defaults

# A unit's factor, by its lower-case name; a trailing "b" is optional ("k" is "kb").
_DECIMAL = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15}
_BINARY = {"ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40, "pi": 2**50}
_UNITS = {**_DECIMAL, **_BINARY}


def parse_bytes(text: str | int | float) -> int:
    """A size such as "10 MiB", "1MiB", "5.4 kB", "1e6", "100" or "MB" (one of the unit) in bytes,
    as Dask's parse_bytes reads it: k, M, G, T, P are powers of 1000, ki ... Pi of 1024, and
    case and a trailing B do not matter. Raises ValueError for what it cannot read."""
    if isinstance(text, (int, float)):
        return int(text)
    match = re.fullmatch(r"([0-9.eE+-]*)([a-zA-Z]*)", text.replace(" ", ""))
    if match is None:
        raise ValueError(f"Could not interpret {text!r} as a number of bytes")
    number, unit = match.group(1) or "1", match.group(2).lower()
    if unit.endswith("b"):
        unit = unit[:-1]
    if unit not in _UNITS:
        raise ValueError(f"Could not interpret {match.group(2)!r} as a byte unit")
    try:
        return int(float(number) * _UNITS[unit])
    except ValueError:
        raise ValueError(f"Could not interpret {number!r} as a number") from None


def format_bytes(n: int) -> str:
    """`n` bytes for people, as Dask writes it: "921 B", "0.90 kiB", "1.00 MiB" (a unit is used
    from 0.9 of it on)."""
    for prefix in ("Pi", "Ti", "Gi", "Mi", "ki"):
        factor = _BINARY[prefix.lower()]
        if n >= factor * 0.9:
            return f"{n / factor:.2f} {prefix}B"
    return f"{n} B"


def drop_vm_cache() -> None:
    """Drop the system's page, dentry and inode caches (vm.drop_caches=3), so that the next read
    comes from storage. Needs root, or sudo without a password for sysctl; raises
    subprocess.CalledProcessError where neither works, as kvikio's (which runs sudo) does."""
    if not kvik.drop_system_page_cache():
        raise subprocess.CalledProcessError(1, "sudo -n /sbin/sysctl vm.drop_caches=3")


def parse_directory(x: str | None) -> pathlib.Path | None:
    """An argparse type: the directory `x` as a Path; None passes through. Raises
    argparse.ArgumentTypeError ("Must be a directory") where `x` is not a directory."""
    if x is None:
        return None
    path = pathlib.Path(x)
    if not path.is_dir():
        raise argparse.ArgumentTypeError("Must be a directory")
    return path


def _gpu():
    """(name, total memory) of GPU 0 as CuPy sees it; "Unknown ..." where it sees none."""
    try:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(0)
    except Exception:  # no CuPy, no driver or no GPU: the table says so, it does not fail
        unknown = "Unknown (no GPU, or CuPy missing)"
        return unknown, unknown
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    return f"{name} (dev #0)", format_bytes(props["totalGlobalMem"])


def pprint_sys_info() -> None:
    """Print the table of the system that kvikio's benchmarks start with: GPU, cuFile and GDS,
    with a banner where IO runs in compatibility mode (POSIX, no cuFile) or without GDS."""
    version = kvik.cufile_driver.libcufile_version()
    props = kvik.cufile_driver.properties
    gds = props.is_gds_available
    if kvik.defaults.get("compat_mode"):
        banner = ("   WARNING - KvikIO compat mode   ", "      libcufile.so not used       ")
    elif not gds:
        banner = ("   WARNING - cuFile compat mode   ", "         GDS not enabled          ")
    else:
        banner = ()
    if banner:
        print("!" * 34)
        print(*banner, sep="\n")
        print("!" * 34)
    gpu_name, mem_total = _gpu()
    libcufile = "unknown (earlier than cuFile 1.8)"
    if version != (0, 0):
        libcufile = f"{version[0]}.{version[1]}"
    gds_driver = "N/A (Compatibility Mode)"
    if gds:
        gds_driver = f"v{props.major_version}.{props.minor_version}"
    config = os.path.realpath(os.getenv("CUFILE_ENV_PATH_JSON", "/etc/cufile.json"))
    print(f"GPU               | {gpu_name}")
    print(f"GPU Memory Total  | {mem_total}")
    print("BAR1 Memory Total | Unknown")
    print(f"libcufile version | {libcufile}")
    print(f"GDS driver        | {gds_driver}")
    print(f"GDS config.json   | {config}")


# ---- shared by kvik's benchmark scripts ------------------------------------------------------


def _array_module():
    """CuPy where it finds a GPU, so that the scripts move GPU memory; NumPy otherwise."""
    try:
        import cupy

        cupy.arange(1)  # initialises CUDA; raises where there is no GPU
        return cupy
    except Exception:  # no CuPy, no driver or no GPU: host memory, which kvik reads the same
        import numpy

        return numpy


def _report(label: str, nbytes: int, seconds: list[float]) -> str:
    """A result line of kvikio's scripts: the mean throughput of the runs, and with more than
    one run the spread and each run's throughput."""
    rates = [nbytes / s for s in seconds]
    mean = sum(rates) / len(rates)
    line = f"{label}".ljust(18) + f"| {format_bytes(mean).rjust(10)}/s".ljust(14)
    if len(rates) > 1:
        spread = (sum((r - mean) ** 2 for r in rates) / (len(rates) - 1)) ** 0.5 / mean * 100
        line += f" ± {spread:5.2f} % (" + ", ".join(f"{format_bytes(r)}/s" for r in rates) + ")"
    return line
