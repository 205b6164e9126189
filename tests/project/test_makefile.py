"""The Makefile's install stamp follows TORCH_SPEC and pyproject.toml's content (a new spec or
dependency reinstalls; the same ones do not, however new the files are on disk)."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def plan(venv: Path, spec: str) -> str:
    """What ``make install`` would run (``make -n``) for this venv folder and torch spec."""
    out = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "install", f"VENV={venv}", f"TORCH_SPEC={spec}"],
        capture_output=True,
        text=True,
        check=True,
    )
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


@pytest.mark.subprocess
@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_install_stamp_follows_pyproject_content_not_its_age(tmp_path):
    """A fresh checkout writes pyproject.toml anew (newer than the stamp): a venv kept outside the
    workspace (the GPU workflow's) is still installed; a changed dependency reinstalls."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, checkout / name)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()

    def plan_here() -> str:
        return subprocess.run(
            ["make", "-n", "-C", str(checkout), "install", f"VENV={venv}", "TORCH_SPEC=torch==2.13.0"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    first = plan_here()
    stamp = next(line.split()[-1] for line in first.splitlines() if line.startswith("touch"))
    Path(stamp).touch()
    (checkout / "pyproject.toml").write_text((checkout / "pyproject.toml").read_text())  # checked out again
    assert "pip install" not in plan_here()
    with (checkout / "pyproject.toml").open("a") as fh:
        fh.write("\n# a new dependency\n")
    again = plan_here()
    assert 'pip install -q -e ".[dev]"' in again and "rm -f" in again


@pytest.mark.subprocess
@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_bench_installs_what_a_run_needs_without_the_dev_extras(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()

    def bench_plan() -> str:
        make = ["make", "-n", "-C", str(ROOT), "bench", f"VENV={venv}", "TORCH_SPEC=torch==2.13.0"]
        return subprocess.run(make, capture_output=True, text=True, check=True).stdout

    fresh = bench_plan()
    assert 'pip install -q "torch==2.13.0"' in fresh and "pip install -q -e ." in fresh
    assert ".[dev]" not in fresh  # pytest, ruff and the rest are for `make test`, not for a run
    stamp = next(line.split()[-1] for line in fresh.splitlines() if line.startswith("touch"))
    Path(stamp).touch()
    assert "pip install" not in bench_plan() and "bench.py --suite efficiency" in bench_plan()
    # a venv `make install` filled (dev extras and all) runs as it is
    Path(stamp).unlink()
    installed = plan(venv, "torch==2.13.0")
    Path(next(line.split()[-1] for line in installed.splitlines() if line.startswith("touch"))).touch()
    assert "pip install" not in bench_plan()
