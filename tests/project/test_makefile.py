"""The Makefile's install stamp follows TORCH_SPEC (a new spec reinstalls; the same one does not)."""
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def plan(venv: Path, spec: str) -> str:
    """What ``make install`` would run (``make -n``) for this venv folder and torch spec."""
    out = subprocess.run(["make", "-n", "-C", str(ROOT), "install", f"VENV={venv}", f"TORCH_SPEC={spec}"],
                         capture_output=True, text=True, check=True)
    return out.stdout


@pytest.mark.subprocess
@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_install_stamp_depends_on_torch_spec(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    first = plan(venv, "torch==2.13.0")
    assert 'pip install -q "torch==2.13.0"' in first
    # Pretend that install ran: touch the stamp make would have touched.
    stamp = next(line.split()[-1] for line in first.splitlines() if line.startswith("touch"))
    Path(stamp).touch()
    assert "pip install" not in plan(venv, "torch==2.13.0")  # up to date: nothing to do
    again = plan(venv, "torch==2.14.1")
    assert 'pip install -q "torch==2.14.1"' in again and "rm -f" in again

