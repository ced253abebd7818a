"""Builds kvik._lib: the extension module, with libkvik's sources and the kvik command compiled in.

The library is compiled into the extension rather than linked, so an installed package depends on
nothing outside itself; like libkvik, it needs no GPU library to build. Only PyInit__lib is
exported (-fvisibility=hidden), so a libkvik.so loaded elsewhere in the process cannot clash.
Set KVIK_WERROR=1 to turn warnings into errors (the test suite does).

Remote files (kvik.RemoteFile) need libcurl 7.85 or newer, the one library linked from outside
(Debian: libcurl4-openssl-dev). It is found through pkg-config, else curl-config, else its header
in the usual places; without it the package builds all the same and remote calls raise KvikError
(KVIK_ENOREMOTE). KVIK_REMOTE=0 builds without it even where it is found.
"""
import os
import re
import shlex
import subprocess
import sys
import sysconfig
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


# CURLOPT_PROTOCOLS_STR, which src/http.c uses, came with libcurl 7.85.
CURL_MIN_VERSION = (7, 85)


def version_tuple(text):
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def run_tool(*command):
    """The output of a helper program such as pkg-config, or None where it is missing or fails."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def curl_from_tools():
    """(version, flags) from pkg-config, else curl-config; None if neither knows libcurl."""
    version = run_tool("pkg-config", "--modversion", "libcurl")
    flags = run_tool("pkg-config", "--cflags", "--libs", "libcurl") if version else None
    if flags is not None:
        return version, shlex.split(flags)
    version = run_tool("curl-config", "--version")  # "libcurl 7.88.1"
    cflags, libs = (run_tool("curl-config", "--cflags"), run_tool("curl-config", "--libs")) if version else (None, None)
    if cflags is not None and libs is not None:
        return version, shlex.split(cflags) + shlex.split(libs)
    return None


def curl_from_header():
    """(version, flags) where curl/curlver.h and libcurl.so lie in the standard directories (a
    system without pkg-config and curl-config); else None."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    include_dirs = ["/usr/local/include", "/usr/include"]
    library_dirs = ["/usr/local/lib", f"/usr/lib/{multiarch}", "/usr/lib64", "/usr/lib"]
    headers = [os.path.join(d, "curl", "curlver.h") for d in include_dirs]
    header = next((h for h in headers if os.path.exists(h)), None)
    if header is None or not any(os.path.exists(os.path.join(d, "libcurl.so")) for d in library_dirs):
        return None
    with open(header) as f:
        match = re.search(r'#define LIBCURL_VERSION "([^"]+)"', f.read())
    return (match.group(1), ["-lcurl"]) if match else None


def find_curl():
    """The compile and link flags for libcurl, or None (with the reason printed) to build without."""
    if os.environ.get("KVIK_REMOTE") == "0":
        print("kvik: remote files off (KVIK_REMOTE=0)", file=sys.stderr)
        return None
    found = curl_from_tools() or curl_from_header()
    if found is None:
        print("kvik: remote files off: libcurl not found (Debian: apt-get install libcurl4-openssl-dev)",
              file=sys.stderr)
        return None
    version, flags = found
    if version_tuple(version) < CURL_MIN_VERSION:
        print(f"kvik: remote files off: libcurl {version} is older than 7.85", file=sys.stderr)
        return None
    return flags


def split_flags(flags):
    """pkg-config's flags as setuptools takes them: include and library dirs, libraries, the rest."""
    parts = {"-I": [], "-L": [], "-l": []}
    other = []
    for flag in flags:
        kind = flag[:2]
        (parts[kind] if kind in parts else other).append(flag[2:] if kind in parts else flag)
    return parts["-I"], parts["-L"], parts["-l"], other


warnings = ["-Wall", "-Wextra", "-Wno-missing-field-initializers", "-Wno-cast-function-type"]
if os.environ.get("KVIK_WERROR") == "1":
    warnings.append("-Werror")

sources = sorted(glob(rel(HERE, "src", "*.c")))
# src/fault.c is the test builds' fault injection (CMake's KVIK_FAULT_INJECTION), never shipped.
sources += sorted(p for p in glob(rel(ROOT, "src", "*.c")) if os.path.basename(p) != "fault.c")
# tools/remote.c (kvik cat, kvik bench URL) is compiled in where the checkout has it.
sources += [rel(ROOT, "tools", name) for name in ("kvik.c", "bench.c", "bench_device.c", "remote.c")
            if os.path.exists(os.path.join(ROOT, "tools", name))]

include_dirs = [rel(ROOT, "include"), rel(ROOT, "src"), rel(ROOT, "tools")]
library_dirs, libraries, macros, link_args = [], ["dl", "pthread", "m"], [], []
curl_flags = find_curl()
if curl_flags is not None:
    curl_includes, curl_lib_dirs, curl_libs, curl_other = split_flags(curl_flags)
    include_dirs += curl_includes
    library_dirs += curl_lib_dirs
    libraries = curl_libs + libraries
    link_args += curl_other
    macros.append(("KVIK_HAVE_CURL", None))

setup(
    version=library_version(),
    ext_modules=[
        Extension(
            "kvik._lib",
            sources=sources,
            include_dirs=include_dirs,
            define_macros=macros,
            extra_compile_args=["-std=c11", "-fvisibility=hidden", *warnings],
            library_dirs=library_dirs,
            libraries=libraries,
            extra_link_args=link_args,
        )
    ],
)
