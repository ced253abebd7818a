"""kvikio.cufile's names: the file handle, its futures, and the page cache calls."""
import os
import subprocess

from ._lib import CuFile, IOFuture, IOFutureStream, drop_file_page_cache, get_page_cache_info
from .utils import kvikio_deprecation_notice

__all__ = [
    "CuFile",
    "IOFuture",
    "IOFutureStream",
    "clear_page_cache",
    "drop_file_page_cache",
    "drop_system_page_cache",
    "get_page_cache_info",
]


def drop_system_page_cache(reclaim_dentries_and_inodes: bool = True,
                           sync_first: bool = True) -> bool:
    """Drop the page cache of the whole system (vm.drop_caches: 3 with
    `reclaim_dentries_and_inodes`, which also frees dentries and inodes, else 1), after writing
    back dirty pages (sync(2)) if `sync_first`. Returns whether it was dropped.

    This needs privileges: it writes /proc/sys/vm/drop_caches, which root may, else runs
    ``sudo -n /sbin/sysctl vm.drop_caches=N``, which a sudoers entry may allow without a password
    (-n: never ask for one). To drop one file's pages without privileges, use
    drop_file_page_cache()."""
    if sync_first:
        os.sync()
    level = "3" if reclaim_dentries_and_inodes else "1"
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write(level)
        return True
    except OSError:
        pass
    try:
        proc = subprocess.run(["sudo", "-n", "/sbin/sysctl", f"vm.drop_caches={level}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:  # no sudo
        return False
    return proc.returncode == 0


@kvikio_deprecation_notice("Use drop_system_page_cache() instead.", since="26.04")
def clear_page_cache(reclaim_dentries_and_inodes: bool = True,
                     clear_dirty_pages: bool = True) -> bool:
    """drop_system_page_cache(reclaim_dentries_and_inodes, clear_dirty_pages), under kvikio's
    older name."""
    return drop_system_page_cache(reclaim_dentries_and_inodes, clear_dirty_pages)
