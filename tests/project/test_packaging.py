"""`pip install .` (not editable) gives a working posbench: methods and suites ship in the wheel.

One module-scoped fixture builds the wheel from a copy of the checkout (offline: no index, no
build isolation, so the setuptools of this environment builds it), installs it into a fresh
virtualenv, and runs the installed ``posbench`` console script from an empty folder. The new
environment finds torch and the other dependencies through a ``.pth`` file naming this
environment's site-packages, written after the install so that pip never sees (or touches) the
editable posbench installed here. About a minute: building, then two efficiency cases.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from posbench.core import registry

REPO = Path(__file__).resolve().parents[2]
# methods/ssmax.py holds a modifier (METHOD+ssmax), not a method: listed in the header, not as a line
MODIFIER_FILES = {Path(origin).stem for origin in registry.modifiers().values()}
METHOD_FILES = sorted(p.stem for p in (REPO / "methods").glob("*.py") if not p.name.startswith("_"))
RECIPE_FILES = {Path(origin).stem for origin in registry.recipes().values()}  # methods/recipes.py: several names
BUILTIN_METHODS = [stem for stem in METHOD_FILES if stem not in MODIFIER_FILES | RECIPE_FILES]
BUILTIN_SUITES = sorted(p.stem for p in (REPO / "suites").glob("*.yaml"))

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]  # builds a wheel, installs it, runs its console script


class Installed:
    """The wheel's virtualenv: ``run(*args)`` calls its ``posbench`` script in an empty folder."""

    def __init__(self, root: Path):
        self.venv = root / "venv"
        self.bin = self.venv / ("Scripts" if os.name == "nt" else "bin")
        self.python = self.bin / "python"
        self.cwd = root / "empty"
        self.cwd.mkdir()
        # Nothing may leak in from the checkout: no PYTHONPATH, no extra method or task folders.
        self.env = {
            k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", registry.METHODS_ENV_PATH, registry.TASKS_ENV_PATH)
        }

    def run(self, *args: str, script: bool = True) -> subprocess.CompletedProcess:
        argv = [str(self.bin / "posbench")] if script else [str(self.python), str(REPO / "bench.py")]
        return subprocess.run(argv + list(args), cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=600)


def _site_packages(python: str | Path) -> list[str]:
    code = "import json, sysconfig; p = sysconfig.get_paths(); print(json.dumps([p['purelib'], p['platlib']]))"
    return list(dict.fromkeys(json.loads(subprocess.check_output([str(python), "-c", code], text=True))))


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    root = tmp_path_factory.mktemp("wheel")
    # The wheel is built from a copy holding only what the build needs, so building writes
    # nothing (build/, *.egg-info) into the checkout and proves no other file is required.
    src = root / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for name in ("posbench", "methods", "suites"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    build = subprocess.run(
        pip + ["wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(root / "dist"), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = (root / "dist").glob("posbench-*.whl")

    env = Installed(root)
    venv.create(env.venv, with_pip=False)
    install = subprocess.run(
        pip + ["--python", str(env.python), "install", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    # Dependencies (torch, pydantic, ...) come from this environment, read-only.
    (new_site,) = _site_packages(env.python)[:1]
    Path(new_site, "posbench-test-deps.pth").write_text("\n".join(_site_packages(sys.executable)) + "\n")
    return env


def test_wheel_holds_methods_and_suites_inside_the_package(installed):
    shown = subprocess.run(
        [
            str(installed.python),
            "-c",
            "import posbench, posbench.core.registry as d, posbench.run.suite as s;"
            "print(posbench.__file__); print(d.METHODS_DIR); print(s.SUITES_DIR); print(d.TASKS_DIR)",
        ],
        cwd=installed.cwd,
        env=installed.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert shown.returncode == 0, shown.stderr
    package_file, methods_dir, suites_dir, tasks_dir = (Path(line) for line in shown.stdout.split())
    package = package_file.parent
    assert package.is_relative_to(installed.venv), f"imported {package}, not the wheel's copy"
    assert methods_dir == package / "methods" and suites_dir == package / "suites" and tasks_dir == package / "tasks"
    assert sorted(p.stem for p in methods_dir.glob("*.py")) == METHOD_FILES  # the modifier's file too
    assert sorted(p.stem for p in suites_dir.glob("*.yaml")) == BUILTIN_SUITES


def test_list_from_an_empty_folder(installed):
    result = installed.run("list")
    assert result.returncode == 0, result.stderr
    methods_part, suites_part = result.stdout.split("suites:\n")
    listed = [line.split()[0] for line in methods_part.splitlines()[1:]]
    # rotary.py also registers rotary_pi, rotary_ntk, ...: names, not file stems
    assert listed == list(registry.listing()) and set(BUILTIN_METHODS) <= set(listed)
    assert RECIPE_FILES == {"recipes"} and {"irope", "rnope_swa", "swan"} <= set(listed)
    header = methods_part.splitlines()[0].replace(os.sep, "/")
    assert MODIFIER_FILES == {"gate", "qknorm", "sink", "ssmax"} and "modifiers, taken as METHOD+MODIFIER: gate (" in header
    assert "site-packages" in header and "posbench/methods/ssmax.py" in header
    assert all(
        "site-packages" in line and "posbench/methods/" in line.replace(os.sep, "/") for line in methods_part.splitlines()[1:]
    ), methods_part
    assert [line.split()[0] for line in suites_part.splitlines()] == BUILTIN_SUITES
    assert "INVALID" not in suites_part


def test_validate_efficiency_from_an_empty_folder(installed):
    result = installed.run("validate", "efficiency")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok: ") and "task efficiency" in result.stdout
    assert "posbench/suites/efficiency.yaml" in result.stdout.replace(os.sep, "/")


def test_unknown_suite_is_one_line_listing_the_shipped_ones(installed):
    result = installed.run("validate", "efficency")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "no such suite" in result.stderr
    assert all(name in result.stderr for name in BUILTIN_SUITES)


def test_two_case_efficiency_run_from_an_empty_folder(installed):
    result = installed.run(
        "--suite",
        "efficiency",
        "--profile",
        "cpu",
        "--device",
        "cpu",
        "--methods",
        "sinusoidal,alibi",
        "--quiet",
        "--set",
        "grid.seq_len=[16]",
        "--set",
        "tokens_per_step=32",
        "--set",
        "warmup_steps=0",
        "--set",
        "measure_steps=1",
        "--set",
        "windows=1",
        "--set",
        "rounds=1",
        "--set",
        "model_overrides={n_layers: 1}",
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    (cases,) = (installed.cwd / "results" / "efficiency").glob("*/cases.jsonl")
    rows = [json.loads(line) for line in cases.read_text().splitlines()]
    assert [(r["method"], r["status"]) for r in rows] == [("sinusoidal", "ok"), ("alibi", "ok")], rows
    assert all(r["metrics"]["train_wps"] > 0 for r in rows)
    assert "2 case(s) run" in result.stdout


@pytest.mark.parametrize("args", [["--help"], ["schema"], ["validate", "--help"], ["list"]])
def test_console_script_and_bench_py_behave_the_same(installed, args):
    script, bench = installed.run(*args), installed.run(*args, script=False)
    assert script.returncode == bench.returncode == 0, script.stderr + bench.stderr
    if args == ["list"]:
        # The same methods and suites; only where the method files live differs.
        def same_root(text):
            return re.sub(r"\S*[/\\]methods[/\\]", "<methods>/", text)

        assert "site-packages" in script.stdout and "site-packages" not in bench.stdout
        assert same_root(script.stdout) == same_root(bench.stdout)
    else:
        # usage lines name the program as invoked (issue 42); all else is the same
        assert ("usage: posbench" in script.stdout) == (args != ["schema"])
        assert re.sub(r"^usage: posbench", "usage: bench.py", script.stdout, flags=re.M) == bench.stdout


def test_every_package_folder_is_in_the_wheel_list():
    # The wheel lists its packages by hand (pyproject.toml); a new task package left out of it
    # installs a posbench whose `list` fails (posbench.tasks.lengthgen was, once).
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "posbench").rglob("__init__.py")}
    assert folders - listed == set()
