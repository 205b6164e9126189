"""`make test-fast` leaves out the tests marked slow or subprocess; `make test` (CI's) runs them all."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _recipe(target: str) -> list[str]:
    """The recipe lines (tab-indented) of ``target`` in the Makefile."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"{re.escape(target)}\s*:(?!=)", line))
    recipe = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe


def test_test_fast_leaves_out_slow_and_subprocess_and_test_runs_everything(pytestconfig):
    text = (ROOT / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:(.*)$", text, flags=re.M).group(1).split()
    assert {"test", "test-fast"} <= set(phony)
    (fast,) = _recipe("test-fast")
    workers = "-n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder"  # a module per worker, in collection order
    assert fast == f'$(BIN)/python -m pytest -q {workers} -m "not slow and not subprocess"'
    (everything,) = _recipe("test")
    # CI's command (.ci/run): no marker left out; the slowest tests named in the log
    assert everything == f"$(BIN)/python -m pytest -q {workers} --durations=25"
    assert re.search(r"^TEST_WORKERS \?= 2$", text, flags=re.M)
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
    make = ["make", "-n", "-C", str(ROOT), f"VENV={venv}", "TORCH_SPEC=torch==2.13.0"]
    install = subprocess.run(make + ["install"], capture_output=True, text=True, check=True).stdout
    stamp = next(line.split()[-1] for line in install.splitlines() if line.startswith("touch"))
    Path(stamp).touch()  # installed: make -n shows the test command alone
    out = subprocess.run(make + ["test-fast"], capture_output=True, text=True, check=True).stdout
    assert f'{venv}/bin/python -m pytest -q -n 2 --dist loadscope --no-loadscope-reorder -m "not slow and not subprocess"' in out
