"""Discovery, registration errors and method options."""

import subprocess
import sys
import textwrap

import pytest

from posbench.core import registry
from posbench.core.method import ModelConfig
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
