"""Tasks are found as methods are: the packages of posbench/tasks/, of the folders of
``POSBENCH_TASKS_PATH`` and the ``posbench.tasks`` entry points (posbench/core/registry/_tasks.py).
Listing names imports no task; asking for one imports its package alone."""

import os
import re
import subprocess
import sys
import textwrap

import pytest

from posbench import tasks
from posbench.core import registry
from posbench.core.registry import RegistryError

TASK_PY = textwrap.dedent("""
    from pydantic import BaseModel

    from posbench.core.registry import register_task
    from posbench.core.task import Metric, Task, TaskSettings

    from .run import run


    class Params(BaseModel):
        n: int = 1


    TASK = register_task(Task(TaskSettings, Params, {{"x": Metric(title="X", unit="", doc="x", higher_is_better=True)}},
                              run, name="{name}"))
""")


def write_task(folder, name, task_py=None):
    """A task package ``folder/name`` in the shape of the built-in ones (its task.py imports its run.py)."""
    package = folder / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from .task import TASK\n")
    (package / "task.py").write_text(TASK_PY.format(name=name) if task_py is None else task_py)
    (package / "run.py").write_text("def run(case):\n    return {'metrics': {'x': case.params.n}, 'series': {}}\n")
    return package


@pytest.fixture
def task_path(tmp_path, monkeypatch):
    """``add(folder)``: look for task packages in ``folder`` too, for one test."""

    def add(folder):
        monkeypatch.setenv(registry.TASKS_ENV_PATH, os.pathsep.join([str(folder), os.environ[registry.TASKS_ENV_PATH]]))
        return folder

    return add


def test_a_users_task_package_is_listed_unimported_and_imported_alone(tmp_path, task_path):
    folder = task_path(tmp_path / "mine")
    write_task(folder, "mine")
    write_task(folder, "_hidden")
    broken = write_task(folder, "broken", "raise RuntimeError('boom at import')\n")
    (folder / "notes").mkdir()  # a folder that is no package: not a task
    assert {"mine", "broken", "efficiency"} <= set(tasks.names()) and "_hidden" not in tasks.names()
    assert {"_hidden", "_testing"} <= set(tasks.names(include_hidden=True)) and "notes" not in tasks.names(True)
    task = tasks.get("mine")
    assert task.name == "mine" and task.module.__name__.startswith("posbench_tasks_mine_")
    assert task.run(type("Case", (), {"params": task.Params(n=3)})) == {"metrics": {"x": 3}, "series": {}}
    assert tasks.get("mine") is task  # imported once
    assert not [m for m in sys.modules if m.startswith("posbench_tasks_broken_")]
    for _ in range(2):  # asking again says why again
        with pytest.raises(
            RegistryError,
            match=rf"^error importing task package {re.escape(str(broken.resolve()))}: "
            r"RuntimeError: boom at import$",
        ):
            tasks.get("broken")
    with pytest.raises(KeyError):
        tasks.get("nowhere")
    assert tasks.find("nowhere") is None


def test_a_task_name_found_twice_names_both(tmp_path, task_path):
    write_task(task_path(tmp_path / "one"), "efficiency")
    with pytest.raises(
        RegistryError,
        match=rf"^duplicate task name 'efficiency': found in "
        rf"{re.escape(str(registry.TASKS_DIR / 'efficiency'))} and in "
        rf"{re.escape(str((tmp_path / 'one' / 'efficiency').resolve()))}$",
    ):
        tasks.names()


def test_a_missing_tasks_folder_is_one_line(tmp_path, task_path):
    task_path(tmp_path / "nowhere")
    with pytest.raises(
        RegistryError,
        match=rf"^tasks folder {re.escape(str(tmp_path / 'nowhere'))} "
        r"\(POSBENCH_TASKS_PATH\) does not exist or is not a folder$",
    ):
        tasks.names()


def test_a_second_declaration_of_a_task_name_is_refused():
    known = tasks.get("_testing")
    with pytest.raises(
        RegistryError,
        match=rf"^duplicate task name '_testing': declared in {re.escape(os.path.realpath(known.module.__file__))} "
        rf"and in {re.escape(os.path.realpath(__file__))}$",
    ):
        registry.register_task(known)
    assert tasks.get("_testing") is known


def test_the_testing_task_is_imported_under_one_name():
    task = tasks.get("_testing")
    where = os.path.realpath(task.module.__file__)
    same = [m for m, mod in list(sys.modules.items()) if os.path.realpath(getattr(mod, "__file__", None) or "") == where]
    assert same == [task.module.__name__] and where.endswith(os.path.join("tests", "helpers", "tasks", "_testing", "task.py"))


@pytest.mark.subprocess
def test_listing_tasks_imports_none_and_no_torch():
    code = (
        "import sys; from posbench import tasks; names = tasks.names(); "
        "print(names, [m for m in sys.modules if m.startswith('posbench.tasks.') or m == 'torch'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(registry.TASKS_DIR.parents[1])},
    ).stdout
    assert out.startswith("['decode', 'efficiency', ") and out.rstrip().endswith("] []")


@pytest.mark.subprocess
def test_entry_point_task_group(tmp_path):
    """A package declaring a task under the ``posbench.tasks`` entry-point group is found by its name."""
    site = tmp_path / "site"
    (site / "extpkg").mkdir(parents=True)
    (site / "extpkg" / "__init__.py").write_text(
        TASK_PY.format(name="ext_task").replace("from .run import run\n", "").replace("run, name=", "lambda case: {}, name=")
    )
    dist = site / "extpkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: extpkg\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[posbench.tasks]\next_task = extpkg\n")
    code = (
        "from posbench import tasks; print('ext_task' in tasks.names()); task = tasks.get('ext_task'); "
        "print(task.name, task.module.__name__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": f"{site}{os.pathsep}{registry.TASKS_DIR.parents[1]}"},
    ).stdout
    assert out.split() == ["True", "ext_task", "extpkg"]
