"""kvikio.benchmarks: kvikio's benchmark scripts and their helpers, on kvik.

kvik's own benchmark is the ``kvik bench`` command (``python -m kvik bench``). This package has
what kvikio's has, for code and scripts written against it:

* :mod:`kvik.benchmarks.utils`: ``parse_directory``, ``pprint_sys_info`` and ``drop_vm_cache``,
  which kvikio's scripts import, with ``parse_bytes`` and ``format_bytes`` (kvikio takes these
  from Dask; kvik's need no Dask);
* ``python -m kvik.benchmarks.single_node_io`` and ``python -m kvik.benchmarks.http_io``: kvikio's
  round-trip and HTTP benchmarks with the same command lines, in GPU memory where CuPy finds a
  GPU and in host memory otherwise.
"""
