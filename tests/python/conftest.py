import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def secmem_cmd():
    """The installed `secmem` command next to this Python, else `python -m secmem`."""
    exe = os.path.join(os.path.dirname(sys.executable), "secmem")
    if os.path.exists(exe):
        return [exe]
    found = shutil.which("secmem")
    return [found] if found else [sys.executable, "-m", "secmem"]


@pytest.fixture
def cli(tmp_path):
    """Runs the secmem command in a temporary directory; returns CompletedProcess."""

    def run(*args, check=None, cwd=None):
        res = subprocess.run(
            secmem_cmd() + [str(a) for a in args], capture_output=True, text=True, cwd=cwd or tmp_path, timeout=600
        )
        if check is True:
            assert res.returncode == 0, f"exit {res.returncode}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}"
        return res

    return run
