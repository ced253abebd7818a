"""Builds kvik._lib: the extension module, with libkvik and the kvik command compiled in.

The library is compiled into the extension rather than linked, so an installed package depends on
nothing outside itself; like libkvik, it needs no GPU library to build. It is CMake's build of the
library: the sources that src/sources.txt and tools/sources.txt list, with the warnings of
cmake/warnings.txt and -Werror (KVIK_WERROR=0 lets warnings pass, as CMake's -DKVIK_WERROR=OFF
does). In a checkout those files lie in the directory above; an sdist carries them in libkvik/.
Only PyInit__lib is exported (-fvisibility=hidden), so a libkvik.so loaded elsewhere in the
process cannot clash.

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
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
# The library's tree: in an sdist the copy it carries (SdistWithLibrary), else the checkout.
SDIST_ROOT = os.path.join(HERE, "libkvik")
ROOT = SDIST_ROOT if os.path.isdir(SDIST_ROOT) else os.path.dirname(HERE)


def rel(*parts):
    """A path relative to this directory, as setuptools wants sources to be."""
    return os.path.relpath(os.path.join(*parts), HERE)


def read_list(path):
    """The entries of a list that CMakeLists.txt reads too: one a line, '#' starts a comment."""
    with open(os.path.join(ROOT, path)) as f:
        lines = [line.strip() for line in f if not line.startswith("#")]
    return [line for line in lines if line]


def listed_sources(directory):
    """The files that DIRECTORY/sources.txt names, as paths in the library's tree."""
    names = read_list(os.path.join(directory, "sources.txt"))
    return [os.path.join(directory, name) for name in names]


def library_headers():
    """The headers of the library and the command, as paths in the library's tree."""
    return sorted(os.path.relpath(path, ROOT) for directory in ("include", "src", "tools")
                  for path in glob(os.path.join(ROOT, directory, "*.h")))


def library_files():
    """What the extension is built from outside this directory: the lists, the sources they name
    and the headers, as paths in the library's tree."""
    lists = ["src/sources.txt", "tools/sources.txt", "cmake/warnings.txt"]
    return lists + listed_sources("src") + listed_sources("tools") + library_headers()


# The commit an sdist made in a checkout was made from; the package built from the sdist reads it.
COMMIT_FILE = "GIT_COMMIT"


def git_commit():
    """The commit the package is built from: HEAD where the library's tree is the top of a git
    checkout (not a directory inside some other repository), else what an sdist carries, else ""."""
    carried = os.path.join(ROOT, COMMIT_FILE)
    if os.path.exists(carried):
        with open(carried) as f:
            return f.read().strip()
    top = run_tool("git", "-C", ROOT, "rev-parse", "--show-toplevel")
    if top is None or os.path.realpath(top) != os.path.realpath(ROOT):
        return ""
    return run_tool("git", "-C", ROOT, "rev-parse", "HEAD") or ""


class BuildPyWithCommit(build_py):
    """Copies the package, and stamps git_commit() into kvik/GIT_COMMIT beside it, which
    kvik._version reads as kvik.__git_commit__ (kvikio's wheels carry the same file)."""

    def run(self):
        super().run()
        with open(os.path.join(self.build_lib, "kvik", COMMIT_FILE), "w") as f:
            f.write(git_commit() + "\n")


class SdistWithLibrary(sdist):
    """An sdist that builds without the checkout: it carries library_files() in libkvik/, and
    the commit it was made from in libkvik/GIT_COMMIT.
    setuptools would copy the extension's sources from ../src/ to ../src/ of the release tree,
    that is over python/src/ (the file names are shared), so they go in under libkvik/ only."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, [f for f in files if not f.startswith(os.pardir)])
        for path in library_files():
            dest = os.path.join(base_dir, "libkvik", path)
            self.mkpath(os.path.dirname(dest))
            self.copy_file(os.path.join(ROOT, path), dest)
        with open(os.path.join(base_dir, "libkvik", COMMIT_FILE), "w") as f:
            f.write(git_commit() + "\n")


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


# As CMake compiles the library in its default build (RelWithDebInfo): C11, -O2 (it comes after
# Python's own flags, so it wins over their -O3, or an -O0 that would void _FORTIFY_SOURCE),
# hardened libc calls, the warnings. KVIK_BUILDING_LIBRARY stays undefined: no kvik_ function is
# exported.
compile_args = ["-std=c11", "-O2", "-U_FORTIFY_SOURCE", "-D_FORTIFY_SOURCE=2",
                "-fvisibility=hidden", *read_list("cmake/warnings.txt")]
if os.environ.get("KVIK_WERROR") != "0":
    compile_args.append("-Werror")

# The extension's own files, the library, and the kvik command less its main(): `python -m kvik`
# calls cli_main(), which runs every subcommand (bench.c, with bench_device.c for --device, and
# remote.c for kvik cat and kvik bench URL).
sources = sorted(glob(rel(HERE, "src", "*.c")))
sources += [rel(ROOT, path) for path in listed_sources("src") + listed_sources("tools")]

# The extension and the command include kvik.h and no more of the library; tools/ holds cli.h.
include_dirs = [rel(ROOT, "include"), rel(ROOT, "tools")]
# Except python/src/nvcomp.c, which stages host chunks through device memory with the library's
# own loaded driver (src/cuda.h, src/memory.h) rather than a second copy of it. -iquote: only
# `#include "..."` looks there, so src/memory.h never stands in for the system's <memory.h>.
compile_args += ["-iquote", rel(ROOT, "src")]
# A changed header rebuilds; python/src/'s headers go into the sdist this way too.
depends = sorted(glob(rel(HERE, "src", "*.h"))) + [rel(ROOT, path) for path in library_headers()]
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
    cmdclass={"build_py": BuildPyWithCommit, "sdist": SdistWithLibrary},
    ext_modules=[
        Extension(
            "kvik._lib",
            sources=sources,
            include_dirs=include_dirs,
            define_macros=macros,
            depends=depends,
            extra_compile_args=compile_args,
            library_dirs=library_dirs,
            libraries=libraries,
            extra_link_args=link_args,
        )
    ],
)
