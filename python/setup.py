"""Builds kvik._lib: the extension module, with libkvik and the kvik command compiled in.

The library is compiled into the extension rather than linked, so an installed package depends on
nothing outside itself; like libkvik, it needs no GPU library to build. It is CMake's build of the
library: the sources that src/sources.txt and tools/sources.txt list, with the warnings of
cmake/warnings.txt and -Werror (KVIK_WERROR=0 lets warnings pass, as CMake's -DKVIK_WERROR=OFF
does). In a checkout those files lie in the directory above; an sdist carries them in libkvik/.
Only PyInit__lib is exported (-fvisibility=hidden), so a libkvik.so loaded elsewhere in the
process cannot clash.

Remote files (kvik.RemoteFile) need libcurl 7.85 or newer at run time, which the library loads
on the first remote call (libcurl.so.4, or the file that KVIK_CURL_LIBRARY names), as it loads the
GPU libraries: nothing of it is needed to build. Without it remote calls raise KvikError
(KVIK_ENOREMOTE).
"""
import os
import re
import subprocess
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


def run_tool(*command):
    """The output of a helper program such as git, or None where it is missing or fails."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


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
