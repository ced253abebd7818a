"""kvik's version and the commit its package was built from, as kvikio's kvikio._version has them.

python/setup.py stamps the commit into the package's GIT_COMMIT file when it builds from a git
checkout (or from an sdist made in one); elsewhere, and in an editable install, there is no file and
the commit is "", as in a kvikio built from a source tree without git.
"""
from importlib import resources

from ._lib import __version__


def _built_from():
    """The commit in the package's GIT_COMMIT file, or "" where there is none."""
    try:
        return resources.files(__package__).joinpath("GIT_COMMIT").read_text().strip()
    except FileNotFoundError:
        return ""


__git_commit__ = _built_from()

__all__ = ["__git_commit__", "__version__"]
