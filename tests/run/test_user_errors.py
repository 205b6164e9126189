"""Every user-facing error is a ``PosbenchError``: the CLI prints its one line and exits 2."""

import re
from pathlib import Path

import pytest

from posbench import tasks
from posbench.cli import app as cli
from posbench.core.outcome import PosbenchError

REPO = Path(__file__).resolve().parents[2]
TASK_NAMES = re.compile(r"\b(efficiency|extrapolation|precision|kernels|decode|retrieval|lengthgen)\b", re.I)


def test_user_facing_errors_share_the_base_and_keep_their_old_one():
    from posbench.core.files import WriteError
    from posbench.core.registry import RegistryError
    from posbench.data.corpus import DataError
    from posbench.run.suite import SuiteError
    from posbench.store.bounds import RowsError
    from posbench.store.writing import RowNotSaved, RunLocked

    for kind in (SuiteError, RegistryError, DataError, RowsError, WriteError, RowNotSaved, RunLocked):
        assert issubclass(kind, PosbenchError), kind
    for kind in (SuiteError, RegistryError, DataError, RowsError):
        assert issubclass(kind, ValueError), kind  # code that caught ValueError still does
    assert issubclass(WriteError, OSError)
    assert not hasattr(cli, "_user_errors")


def test_any_posbench_error_is_one_line_and_exit_2(monkeypatch, capsys):
    from posbench.run import suite as suitemod

    class PluginsError(PosbenchError):
        pass

    def broken():
        raise PluginsError("plugins.yaml: something the user wrote\nsecond line")

    monkeypatch.setattr(suitemod, "schema", broken)
    assert cli.main(["schema"]) == cli.EXIT_USAGE
    assert capsys.readouterr().err == "PluginsError: plugins.yaml: something the user wrote\n"


@pytest.mark.subprocess
def test_data_flag_names_the_tasks_whose_settings_read_a_corpus(tmp_path, capsys):
    path = tmp_path / "t.yaml"
    path.write_text("name: t\ndescription: d\nversion: 1\ntask: _testing\nmethods: [sinusoidal]\ngrid:\n  n: [1]\n")
    assert cli.main(["--suite", str(path), "--data", str(tmp_path), "--dry-run"]) == cli.EXIT_USAGE
    readers = [n for n in tasks.names() if "corpus" in tasks.get(n).Settings.model_fields]
    assert {"extrapolation", "precision"} <= set(readers)
    assert capsys.readouterr().err == (
        f"SuiteError: --data: suite 't' (task _testing) reads no corpus; allowed with: {', '.join(readers)}\n"
    )


@pytest.mark.parametrize("folder", ["posbench/run", "posbench/cli"])
def test_no_task_is_named_and_no_module_is_over_500_lines(folder):
    for path in sorted((REPO / folder).rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        named = [(n, line) for n, line in enumerate(text.splitlines(), 1) if TASK_NAMES.search(line)]
        assert not named, f"{path}: names a task: {named[0]}"
        assert text.count("\n") <= 500, f"{path}: {text.count(chr(10))} lines"


def test_help_examples_name_a_shipped_suite_they_run_on(capsys):
    from posbench.run import suite as suitemod

    name = cli.example_suite()
    assert name in suitemod.names()
    resolved = suitemod.resolve(
        suitemod.load(name), "cpu", suitemod.parse_set(["warmup_steps=5", "grid.seq_len=[128, 256]"])
    )  # the example's --set, as written
    assert resolved.grid["seq_len"] == [128, 256]
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    assert f"python bench.py --suite {name} --profile cpu" in capsys.readouterr().out
