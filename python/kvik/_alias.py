"""kvik under the name kvikio: ``import kvikio.defaults`` finds kvik.defaults once kvik is kvikio.

kvikio code is moved over with a module that stands in for kvikio, ``sys.modules["kvikio"] =
kvik`` (what ``import kvik as kvikio`` does for one file, done for a whole program). Python then
imports ``kvikio.defaults`` from kvik's directory under the new name: a second copy of each module,
whose classes are not kvik's, so that ``except kvikio.defaults.X`` or an ``isinstance`` check
misses what kvik raises or returns. This finder hands out the module kvik already has instead.

A ``kvikio.X`` that the finder handed out once and that was since taken out of sys.modules (as a
test does to import a module afresh: kvikio's test of kvikio.zarr without Zarr) executes kvik.X
afresh, as kvikio's own module would be: its import-time checks run again.
"""
import importlib
import importlib.abc
import importlib.util
import sys

_ALIAS = "kvikio"
_PACKAGE = __name__.rpartition(".")[0]


class KvikioAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``kvikio.X`` as ``kvik.X`` while sys.modules["kvikio"] is the kvik package."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(_ALIAS + "."):
            return None
        if sys.modules.get(_ALIAS) is not sys.modules.get(_PACKAGE):
            return None
        real = _PACKAGE + fullname[len(_ALIAS) :]
        try:
            if importlib.util.find_spec(real) is None:
                return None
        except ModuleNotFoundError:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def __init__(self):
        self._given = set()  # the kvikio.X names handed out so far

    def create_module(self, spec):
        real = _PACKAGE + spec.name[len(_ALIAS) :]
        if spec.name in self._given:
            module = _import_afresh(real)
        else:
            module = importlib.import_module(real)
        self._given.add(spec.name)
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module):
        # The import system stamped the alias's spec on kvik's module; give it back its own, so
        # that the module still names itself kvik.X (for reload, pickling and error messages).
        module.__spec__ = module.__spec__.loader_state


def _import_afresh(name):
    """Execute module `name` again as a new module; where that fails, the module kvik had stays."""
    old = sys.modules.pop(name, None)
    try:
        return importlib.import_module(name)
    except BaseException:
        if old is not None:
            sys.modules[name] = old
        raise


def install():
    """Put the finder first on sys.meta_path, once."""
    if not any(isinstance(finder, KvikioAlias) for finder in sys.meta_path):
        sys.meta_path.insert(0, KvikioAlias())
