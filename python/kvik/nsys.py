"""kvikio.nsys: where kvikio's Nsight Systems plugins lie.

kvik ships no Nsight Systems plugin (kvikio's reports the NIC traffic of libkvikio, which kvik
does not use). nsys_plugin_search_dir() still answers as kvikio does outside a pip install, so
that code handing the directory to nsys runs unchanged: nsys finds no plugin there.
"""
import os
import sys


def nsys_plugin_search_dir() -> str:
    """The directory kvikio's conda package installs its Nsight Systems plugins into:
    share/kvikio/nsys-plugins under sys.prefix (the environment's prefix in a conda environment).

    Returned whether or not it exists, as kvikio returns it where its plugin was not built; kvik
    puts nothing there. kvikio's libkvikio wheel, installed or not, is not asked.
    """
    return os.path.join(sys.prefix, "share", "kvikio", "nsys-plugins")
