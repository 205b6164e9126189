"""The Makefile: the install stamp follows TORCH_SPEC (a new spec reinstalls; the same one does not),
and `make test-fast` leaves out the tests marked slow or subprocess while `make test` runs all."""
import re
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


def _recipe(target: str) -> list[str]:
    """The recipe lines (tab-indented) of ``target`` in the Makefile."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"{re.escape(target)}\s*:(?!=)", line))
    recipe = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe


def test_test_fast_leaves_out_slow_and_subprocess_and_test_runs_everything(pytestconfig):
    text = (ROOT / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:(.*)$", text, flags=re.M).group(1).split()
    assert {"test", "test-fast"} <= set(phony)
    (fast,) = _recipe("test-fast")
    assert fast == '$(BIN)/python -m pytest -q -m "not slow and not subprocess"'
    (everything,) = _recipe("test")
    assert everything == "$(BIN)/python -m pytest -q"  # CI's command (.ci/run): no marker left out
    # Both markers are registered, and a misspelt one is an error rather than a silently empty selection.
    # (pyproject.toml's [tool.pytest.ini_options], as pytest read it)
    registered = {m.split(":")[0] for m in pytestconfig.getini("markers")}
    assert {"slow", "subprocess"} <= registered
    assert "--strict-markers" in pytestconfig.getini("addopts")


@pytest.mark.subprocess
@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_test_fast_runs_pytest_without_slow_and_subprocess_tests(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    stamp = next(line.split()[-1] for line in plan(venv, "torch==2.13.0").splitlines() if line.startswith("touch"))
    Path(stamp).touch()  # installed: make -n shows the test command alone
    out = subprocess.run(["make", "-n", "-C", str(ROOT), "test-fast", f"VENV={venv}", "TORCH_SPEC=torch==2.13.0"],
                         capture_output=True, text=True, check=True).stdout
    assert f'{venv}/bin/python -m pytest -q -m "not slow and not subprocess"' in out
