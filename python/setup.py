"""Builds kvik._lib: the extension module, with libkvik's sources and the kvik command compiled in.

The library is compiled into the extension rather than linked, so an installed package depends on
nothing outside itself; like libkvik, it needs no GPU library to build. Only PyInit__lib is
exported (-fvisibility=hidden), so a libkvik.so loaded elsewhere in the process cannot clash.
Set KVIK_WERROR=1 to turn warnings into errors (the test suite does).
"""
import os
import re
from glob import glob

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def rel(*parts):
    """A path relative to this directory, as setuptools wants sources to be."""
    return os.path.relpath(os.path.join(*parts), HERE)


def library_version():
    with open(os.path.join(ROOT, "include", "kvik.h")) as header:
        return re.search(r'#define KVIK_VERSION_STRING "([^"]+)"', header.read()).group(1)


warnings = ["-Wall", "-Wextra", "-Wno-missing-field-initializers", "-Wno-cast-function-type"]
if os.environ.get("KVIK_WERROR") == "1":
    warnings.append("-Werror")

sources = sorted(glob(rel(HERE, "src", "*.c")))
sources += sorted(glob(rel(ROOT, "src", "*.c")))
sources += [rel(ROOT, "tools", name) for name in ("kvik.c", "bench.c", "bench_device.c")]

setup(
    version=library_version(),
    ext_modules=[
        Extension(
            "kvik._lib",
            sources=sources,
            include_dirs=[rel(ROOT, "include"), rel(ROOT, "src"), rel(ROOT, "tools")],
            extra_compile_args=["-std=c11", "-fvisibility=hidden", *warnings],
            libraries=["dl", "pthread", "m"],
        )
    ],
)
