"""`python -m kvik` runs the kvik command's own code: the same output and exit codes."""
import os
import subprocess
import sys

import pytest

import kvik

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KVIK_COMMAND = os.path.join(os.environ.get("KVIK_BUILD_DIR", os.path.join(ROOT, "build")), "kvik")


def run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "kvik", *args], capture_output=True, text=True, env=env)


def test_version():
    result = run("--version")
    assert result.returncode == 0
    assert result.stdout == f"kvik {kvik.__version__}\n"


def test_info_prints_settings_and_runtime_libraries(tmp_path):
    env = dict(os.environ, KVIKIO_NTHREADS="3")
    result = run("info", str(tmp_path), env=env)
    assert result.returncode == 0, result.stderr
    assert "num_threads" in result.stdout and "KVIKIO_NTHREADS" in result.stdout
    assert "CUDA driver" in result.stdout and "cuFile" in result.stdout
    assert f"O_DIRECT in {tmp_path}" in result.stdout


def test_bench_runs(tmp_path):
    result = run("bench", "--dir", str(tmp_path), "--size", "8M", "--threads", "2", "--repeat", "1")
    assert result.returncode == 0, result.stderr
    assert "kvik" in result.stdout
    assert list(tmp_path.iterdir()) == [], "the benchmark removes its file"


def test_usage_errors_and_exit_codes():
    assert run().returncode == 2
    bad = run("frobnicate")
    assert bad.returncode == 2 and "unknown command 'frobnicate'" in bad.stderr
    bad_env = run("info", env=dict(os.environ, KVIKIO_NTHREADS="many"))
    assert bad_env.returncode == 1 and "KVIKIO_NTHREADS" in bad_env.stderr


@pytest.mark.skipif(not os.access(KVIK_COMMAND, os.X_OK), reason=f"the kvik command is not built ({KVIK_COMMAND})")
@pytest.mark.parametrize("args", [["--help"], ["bench", "--help"], ["info", "--help"]])
def test_same_output_as_the_kvik_command(args):
    ours = run(*args)
    theirs = subprocess.run([KVIK_COMMAND, *args], capture_output=True, text=True)
    assert (ours.returncode, ours.stdout, ours.stderr) == (theirs.returncode, theirs.stdout, theirs.stderr)
