"""The README's Python quick start runs as written: each ```python block of README.md runs in a
fresh interpreter, in an empty directory, against the installed package. Blocks that import CuPy
need it and a GPU, and are skipped without them. tests/readme_test.sh does the same for the C
quick start."""
import pathlib
import re
import subprocess
import sys

import pytest

from conftest import CUPY_MISSING, cupy

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```$", README.read_text(), re.MULTILINE | re.DOTALL)


def test_readme_has_a_python_quick_start_without_a_gpu():
    assert any("import cupy" not in block for block in BLOCKS), f"{README}: no Python block to run"


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_python_block(block, tmp_path):
    if "import cupy" in block and cupy is None:
        pytest.skip(CUPY_MISSING)
    proc = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True,
                          text=True)
    assert proc.returncode == 0, f"README.md block failed:\n{block}\n{proc.stderr}"
