"""kvikio.benchmarks: kvikio ships its benchmark scripts under this name; kvik's benchmarks are
the ``kvik bench`` command (``python -m kvik bench``). The module is here so that code importing
the name finds it."""
