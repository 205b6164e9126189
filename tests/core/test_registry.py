"""Discovery, registration errors and method options."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from posbench import tasks
from posbench.cli import app as cli
from posbench.core import registry
from posbench.core.method import ModelConfig
from posbench.core.registry import RegistryError
from tests.helpers.methods import NEW

PLUGIN = textwrap.dedent(
    """
    from posbench.core.method import PositionMethod
    from posbench.core.registry import register

    @register
    class {cls}(PositionMethod):
        name = "{name}"
    """
)


@pytest.fixture
def clean_registry():
    before = set(registry.names())
    yield
    for name in set(registry.registered()) - before:
        registry.unregister(name)
    registry.reset_search()


def write_plugin(folder, filename, name, cls="Plugin"):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / filename
    path.write_text(PLUGIN.format(cls=cls, name=name))
    return path


def test_extra_folder_flag(tmp_path, clean_registry):
    write_plugin(tmp_path / "mine", "my_method.py", "my_method")
    registry.add_methods_dir(tmp_path / "mine")
    assert "my_method" in registry.names()
    assert registry.origin("my_method") == str((tmp_path / "mine" / "my_method.py").resolve())


def test_extra_folder_from_environment(tmp_path, monkeypatch, clean_registry):
    write_plugin(tmp_path / "env", "env_method.py", "env_method")
    monkeypatch.setenv(registry.METHODS_ENV_PATH, str(tmp_path / "env"))
    assert "env_method" in registry.discover(force=True)


def test_duplicate_name_names_both_files(tmp_path, clean_registry):
    write_plugin(tmp_path / "dup", "again.py", "alibi")
    registry.add_methods_dir(tmp_path / "dup")  # read when names are wanted, not here
    with pytest.raises(registry.RegistryError) as err:
        registry.names()
    msg = str(err.value)
    assert "duplicate method name 'alibi'" in msg
    assert "methods/alibi.py" in msg and "dup/again.py" in msg


def test_unknown_name_lists_known_with_did_you_mean():
    with pytest.raises(registry.RegistryError) as err:
        registry.get("alibii")
    msg = str(err.value)
    assert "unknown method 'alibii' (did you mean 'alibi'?)" in msg
    assert "known methods: " in msg and "rotary" in msg and "\n" not in msg


def test_unknown_option_is_one_line():
    with pytest.raises(registry.RegistryError, match=r"method 'rotary': unknown option\(s\) slope; allowed: base"):
        registry.build(ModelConfig(method="rotary", method_options={"slope": 1}))


def test_broken_plugin_file_names_the_file(tmp_path, clean_registry):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "oops.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(registry.RegistryError, match=r"error importing method file .*oops.py: RuntimeError: boom"):
        registry.scan_dir(tmp_path / "bad")


def test_missing_folder_is_one_line(tmp_path):
    with pytest.raises(registry.RegistryError, match="does not exist"):
        registry.scan_dir(tmp_path / "nowhere")


@pytest.mark.subprocess
def test_entry_point_group(tmp_path):
    """A package exposing a class under the `posbench.methods` entry-point group is found."""
    pkg = tmp_path / "site"
    (pkg / "extpkg").mkdir(parents=True)
    (pkg / "extpkg" / "__init__.py").write_text(PLUGIN.format(cls="Ext", name="ext_method").replace("@register\n", ""))
    dist = pkg / "extpkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: extpkg\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[posbench.methods]\next_method = extpkg:Ext\n")
    code = "from posbench.core import registry; print(registry.names()); print(registry.origin('ext_method'))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": f"{pkg}:{registry.METHODS_DIR.parent}"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "'ext_method'" in out and "extpkg" in out


def test_listing_reads_literal_names_without_importing(tmp_path, monkeypatch, clean_registry):
    path = write_plugin(tmp_path / "lit", "lit_method.py", "lit_method")
    path.write_text(path.read_text() + "raise RuntimeError('imported')\n")  # importing it would fail
    monkeypatch.setenv(registry.METHODS_ENV_PATH, str(tmp_path / "lit"))
    found = registry.listing()
    assert found["lit_method"] == str(path.resolve()) and list(found) == sorted(found)
    assert not registry.is_imported(path)
    assert registry.require("lit_method") == str(path.resolve())
    with pytest.raises(registry.RegistryError, match=r"unknown method 'lit_methd' \(did you mean 'lit_method'\?\)"):
        registry.require("lit_methd")


@pytest.mark.parametrize(
    "source",
    [
        # a computed name, register called as a function, register renamed, an inherited name
        PLUGIN.format(cls="P", name="x").replace('name = "x"', 'name = "comp" + "uted"'),
        PLUGIN.format(cls="P", name="computed").replace("@register\n", "") + "register(P)\n",
        PLUGIN.format(cls="P", name="computed").replace("import register", "import register as reg").replace("@register", "@reg"),
        PLUGIN.format(cls="Base", name="computed").replace("@register\n", "") + "\n@register\nclass P(Base):\n    pass\n",
    ],
    ids=["computed", "called", "renamed", "inherited"],
)
def test_listing_imports_files_it_cannot_read(tmp_path, monkeypatch, clean_registry, source):
    (tmp_path / "dyn").mkdir()
    (tmp_path / "dyn" / "dyn.py").write_text(source)
    monkeypatch.setenv(registry.METHODS_ENV_PATH, str(tmp_path / "dyn"))
    assert registry.listing()["computed"] == str((tmp_path / "dyn" / "dyn.py").resolve())
    assert registry.is_imported(tmp_path / "dyn" / "dyn.py")


def test_listing_finds_a_duplicate_without_importing(tmp_path, monkeypatch, clean_registry):
    write_plugin(tmp_path / "dup2", "again.py", "rotary")
    monkeypatch.setenv(registry.METHODS_ENV_PATH, str(tmp_path / "dup2"))
    with pytest.raises(
        registry.RegistryError,
        match=r"duplicate method name 'rotary': defined in .*methods/rotary.py "
        r"and in .*dup2/again.py",
    ):
        registry.listing()


def test_listing_agrees_with_importing_for_the_builtin_methods():
    assert {name: registry.origin(name) for name in registry.discover()} == registry.listing()


def test_a_broken_plugin_file_is_skipped_with_a_one_line_warning(tmp_path, monkeypatch, capsys, clean_registry):
    """A file that does not parse, and one that parses but fails to import (its name cannot be
    read), are skipped by listing with a warning naming each; the other methods still work."""
    write_plugin(tmp_path / "mixed", "good.py", "good_method")
    (tmp_path / "mixed" / "syntax.py").write_text("def oops(:\n")
    (tmp_path / "mixed" / "fails.py").write_text(
        PLUGIN.format(cls="P", name="x").replace('name = "x"', 'name = "a" + "b"') + "raise RuntimeError('boom at import')\n"
    )
    monkeypatch.setenv(registry.METHODS_ENV_PATH, str(tmp_path / "mixed"))
    found = registry.listing()
    assert "good_method" in found and "alibi" in found
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"warning: method file {tmp_path / 'mixed' / 'fails.py'} skipped: RuntimeError: boom at import",
        f"warning: method file {tmp_path / 'mixed' / 'syntax.py'} skipped: SyntaxError: invalid syntax (line 1)",
    ]
    registry.listing()
    assert capsys.readouterr().err == ""  # once per file
    assert registry.get("good_method").name == "good_method"
    with pytest.raises(registry.RegistryError, match=r"unknown method 'ab'; .*skipped \(cannot load\): .*fails.py"):
        registry.get("ab")


def test_get_imports_only_the_file_that_defines_the_name(tmp_path, monkeypatch, clean_registry):
    write_plugin(tmp_path / "two", "used.py", "used_method")
    other = write_plugin(tmp_path / "two", "other.py", "other_method")
    other.write_text(other.read_text() + "raise RuntimeError('imported')\n")  # importing it would fail
    monkeypatch.setenv(registry.METHODS_ENV_PATH, str(tmp_path / "two"))
    assert registry.get("used_method").name == "used_method"
    assert not registry.is_imported(other)
    with pytest.raises(registry.RegistryError, match=r"error importing method file .*other.py: RuntimeError: imported"):
        registry.get("other_method")  # the method asked for is broken: that is an error naming its file


def test_the_worker_prepares_threads_and_method_folders_once_for_every_task(tmp_path, clean_registry):
    """worker.prepare, not each task, sets torch's threads and loads the suite's method folders."""
    import torch

    from posbench import tasks
    from posbench.core.case import Case
    from posbench.run.worker import prepare

    _testing = tasks.get("_testing")
    write_plugin(tmp_path / "plugins", "prepared.py", "prepared_here")
    case = Case(
        suite="s",
        task="_testing",
        method="sinusoidal",
        params=_testing.Params(n=1),
        settings=_testing.Settings(threads=1),
        device="cpu",
        profile="default",
        run_id="r",
        methods_dirs=[str(tmp_path / "plugins")],
    )
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        prepare(case)
        assert torch.get_num_threads() == 1 and "prepared_here" in registry.names()
    finally:
        torch.set_num_threads(before)


# --- the method group `all` (suites and the CLI: tests/run/test_suite_loading.py)


def test_registry_expands_all_to_every_method_once():
    every = registry.names()
    assert registry.expand(["all"]) == every
    assert set(NEW) | {"rotary_pi", "rotary_ntk", "rotary_dynamic_ntk", "rotary_yarn"} <= set(every)
    mixed = registry.expand(["rotary", "all"])
    assert mixed[0] == "rotary" and sorted(mixed) == every
    assert registry.expand(["sinusoidal", "alibi"]) == ["sinusoidal", "alibi"]


# --- one registry: its state is its own


def test_no_module_outside_the_registry_reads_its_private_modules():
    """posbench/core/registry/__init__.py is the interface: no other module names a private module
    of the package or a private name of it (``registry._METHODS``, ``registry._tables``)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    package = root / "posbench" / "core" / "registry"
    private = re.compile(r"\bregistry\._\w|posbench\.core\.registry\._\w|from posbench\.core\.registry import _\w")
    files = [p for top in ("posbench", "methods", "benchmarks", "tests", ".github/scripts") for p in (root / top).rglob("*.py")]
    found = [
        f"{p.relative_to(root)}:{n}"
        for p in files
        if package not in p.parents
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if private.search(line) and p != Path(__file__).resolve()
    ]
    assert not found, f"private registry state read outside posbench/core/registry/: {found}"


def test_a_replaced_task_is_put_back():
    import dataclasses

    from posbench import tasks

    task = tasks.get("_testing")
    with registry.task_replaced(dataclasses.replace(task, TITLE="for a moment")):
        assert tasks.get("_testing").TITLE == "for a moment"
    assert tasks.get("_testing") is task


def test_forget_since_drops_what_a_folder_registered_after_the_snapshot(tmp_path):
    before = registry.snapshot()
    write_plugin(tmp_path / "mine", "passing.py", "passing_method")
    registry.add_methods_dir(tmp_path / "mine")
    assert registry.get("passing_method").name == "passing_method"
    assert registry.is_imported(tmp_path / "mine" / "passing.py")
    registry.forget_since(before, str(tmp_path.resolve()))
    assert "passing_method" not in registry.registered() and "passing_method" not in registry.names()
    assert not registry.is_imported(tmp_path / "mine" / "passing.py")


# --------------------------------------------------------------------------------------------------
# Hardening round 5 (issue 56): a FIFO named ``*.py`` in a methods folder is skipped with one
# warning naming it, never opened (``list`` waited 120 s for the child reading it).


@pytest.mark.subprocess  # list reads the method files in a child process
def test_list_skips_a_fifo_named_py_with_one_warning(tmp_path, capsys):
    os.mkfifo(tmp_path / "pipe.py")
    assert cli.main(["list", "--methods-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert f"warning: method file {(tmp_path / 'pipe.py').resolve()} skipped: not a regular file" in err
    assert "alibi" in out


# --------------------------------------------------------------------------------------------------
# A method file that blocks at import costs seconds, not minutes: listing names (``list``,
# ``validate``, ``run``) and ``check`` cut its import after ``POSBENCH_IMPORT_TIMEOUT_S`` with one
# line naming the file (posbench/core/registry/_imports.py; issue 44, left from round 3).

ROOT = Path(__file__).resolve().parents[2]
# The name is not a literal, so listing must import the file to learn it; the plugin even
# swallows Exception while it blocks.
BLOCKING = """
import time
from posbench.core.method import PositionMethod
from posbench.core.registry import register

while True:
    try:
        time.sleep(1000)
    except Exception:
        pass


@register
class Slow(PositionMethod):
    name = "sl" + "ow"
"""


@pytest.fixture
def blocking(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "slow.py").write_text(BLOCKING)
    yield folder
    registry.reset_search()


def test_a_blocking_import_is_cut_after_the_limit(blocking):
    import posbench.core.method  # noqa: F401  (torch, imported outside the timed stretch)

    started = time.monotonic()
    with pytest.raises(RegistryError, match=r"slow.py: TimeoutError: its import did not finish within 0.5 s"):
        registry.import_method_file(blocking / "slow.py", 0.5)
    assert time.monotonic() - started < 5


def test_listing_skips_a_blocking_file_in_seconds_naming_it(blocking, monkeypatch, capsys):
    monkeypatch.setenv(registry.IMPORT_LIMIT_ENV, "0.5")
    import posbench.core.method  # noqa: F401

    registry.add_methods_dir(blocking)
    started = time.monotonic()
    names = registry.listing()
    assert "alibi" in names and "slow" not in names
    assert registry.listing() == names  # not waited for a second time
    assert time.monotonic() - started < 5
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"warning: method file {(blocking / 'slow.py').resolve()} skipped: " in err
    assert "did not finish within 0.5 s (does it block at import?)" in err


@pytest.mark.subprocess
@pytest.mark.parametrize("command", [["list"], ["check", "slow"]])
def test_list_and_check_answer_within_seconds(blocking, command):
    env = {**os.environ, registry.IMPORT_LIMIT_ENV: "1", "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench.py"), *command, "--methods-dir", str(blocking)],
        capture_output=True,
        text=True,
        env=env,
        timeout=100,
    )
    assert time.monotonic() - started < 60  # it was 120 s
    assert (
        "skipped: TimeoutError: its import did not finish within 1 s" in out.stderr
        or "slow.py (its import did not finish within 1 s)" in out.stderr
    ), out.stderr
    assert "no answer after" not in out.stderr


# --------------------------------------------------------------------------------------------------
# Tasks are found as methods are: the packages of posbench/tasks/, of the folders of
# ``POSBENCH_TASKS_PATH`` and the ``posbench.tasks`` entry points (posbench/core/registry/_tasks.py).
# Listing names imports no task; asking for one imports its package alone.

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


# A task package is code that runs as a method file is: its import is cut at the same limit
# (``POSBENCH_IMPORT_TIMEOUT_S``) with one line naming its folder, and not waited for a second time.
BLOCKING_TASK = """
import time

try:
    time.sleep(60)
except Exception:  # the cut is no Exception: a package cannot swallow it
    pass
"""


def test_a_task_package_that_blocks_at_import_is_cut_after_the_limit(tmp_path, task_path, monkeypatch):
    monkeypatch.setenv(registry.IMPORT_LIMIT_ENV, "0.5")
    package = write_task(task_path(tmp_path / "mine"), "sleeper", BLOCKING_TASK)
    started = time.monotonic()
    assert "sleeper" in tasks.names()  # read from its folder: not imported
    for _ in range(2):  # the second ask is not waited for again
        with pytest.raises(
            RegistryError,
            match=rf"^error importing task package {re.escape(str(package.resolve()))}: TimeoutError: its import "
            r"did not finish within 0.5 s \(does it block at import\?\); allowed: a task package that imports in "
            r"seconds \(POSBENCH_IMPORT_TIMEOUT_S sets the limit\)$",
        ):
            tasks.get("sleeper")
    assert time.monotonic() - started < 5
    assert not [m for m in sys.modules if m.startswith("posbench_tasks_sleeper_")]
    registry.reset_search()  # forgotten: asking again tries again
    monkeypatch.setenv(registry.IMPORT_LIMIT_ENV, "0.1")
    with pytest.raises(RegistryError, match="did not finish within 0.1 s"):
        tasks.get("sleeper")
    registry.reset_search()


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


# --------------------------------------------------------------------------------------------------
# Issue 56: the registry tests pass in any order. At 0958d55 ``test_listing_agrees_with_importing_
# for_the_builtin_methods`` failed after ``test_extra_folder_from_environment`` (the discovery cache
# outlived the fixture that undid the environment). The whole file in order runs in every test run;
# this guard runs it in reverse, in a fresh process (a cheap check: the registry tests only).

REPO = Path(__file__).resolve().parents[2]
REGISTRY_TESTS = "tests/core/test_registry.py"


@pytest.mark.subprocess
def test_the_registry_tests_pass_in_reverse_order():
    tree = ast.parse((REPO / REGISTRY_TESTS).read_text())
    ids = [
        f"{REGISTRY_TESTS}::{node.name}"
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and node.name.startswith("test_")
        and node.name != "test_the_registry_tests_pass_in_reverse_order"  # itself: no recursion
    ]
    assert len(ids) > 10
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-n", "0", *reversed(ids)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout[-3000:]
    assert " passed" in ran.stdout and "failed" not in ran.stdout


@pytest.mark.parametrize(
    "name,allowed",
    [
        ("rotary+gate+qknorm", "rotary+qknorm+gate"),
        ("rotary+qknorm+ssmax", "rotary+ssmax+qknorm"),
        ("nope+sink+gate+gate", "nope+sink+gate"),
        ("alibi+gate+gate", "alibi+gate"),
    ],
)
def test_modifiers_compose_in_one_fixed_order(name, allowed):
    with pytest.raises(registry.RegistryError) as exc:
        registry.get(name)
    assert str(exc.value) == (
        f"unknown method {name!r}: modifiers compose once each, in the order ssmax, qknorm, sink, gate; allowed: {allowed}"
    )
    assert registry.get(allowed).name == allowed


def test_every_built_in_modifier_says_whether_it_acts_on_the_probabilities_or_the_output():
    registry.get("rotary+ssmax+qknorm+sink+gate")  # loads every built-in modifier
    acts = {m: registry.modifier_acts_on(m) for m in ("ssmax", "qknorm", "sink", "gate")}
    assert acts == {"ssmax": "probabilities", "qknorm": "probabilities", "sink": "probabilities", "gate": "output"}


def test_every_new_method_is_registered():
    assert set(NEW) <= set(registry.names())


# Issue 67 (hardening round 6): a composed name out of order or with a modifier twice is refused
# where the name is looked up (suite validation, --methods), from the modifiers' files without
# importing them, not by each case's worker (an error row per case, exit 3).
@pytest.mark.subprocess
@pytest.mark.parametrize(
    "name,allowed",
    [("rotary+gate+ssmax", "rotary+ssmax+gate"), ("rotary+gate+gate", "rotary+gate"), ("alibi+sink+qknorm", "alibi+qknorm+sink")],
)
def test_modifiers_out_of_order_are_refused_without_importing_them(name, allowed):
    script = (
        "import sys\nfrom posbench.core import registry\n"
        f"try:\n    registry.require({name!r})\nexcept registry.RegistryError as exc:\n    print(exc)\n"
        f"registry.require({allowed!r})\nprint('torch' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k != "POSBENCH_METHODS_PATH"}
    ran = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.stdout.splitlines() == [
        f"unknown method {name!r}: modifiers compose once each, in the order ssmax, qknorm, sink, gate; allowed: {allowed}",
        "False",
    ], ran.stderr
