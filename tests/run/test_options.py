"""``bench.py run``'s flags reach the runner as one frozen ``RunOptions``."""

import dataclasses
import json
from pathlib import Path

import pytest

from posbench.cli import app as cli
from posbench.run import runner
from posbench.run.options import default_run_id

SUITE = """\
name: t
description: options test
version: 1
task: _testing
methods: [sinusoidal, rotary]
baseline: sinusoidal
metrics: [value]
grid:
  n: [1, 2]
settings:
  threads: 1
"""


def test_run_options_are_frozen_with_the_old_defaults():
    options = runner.RunOptions("cpu", Path("results"))
    assert (
        options.run_id,
        options.fresh,
        options.retry_failed,
        options.methods,
        tuple(options.methods_dirs),
        options.on_row,
        options.progress,
        options.shard,
        options.in_process,
    ) == (None, False, False, None, (), None, True, None, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.fresh = True


@pytest.mark.subprocess
def test_the_cli_builds_the_options_from_its_flags(tmp_path, monkeypatch, capsys):
    path = tmp_path / "t.yaml"
    path.write_text(SUITE)
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    seen = []

    def fake_run_suite(suite, options):
        seen.append((suite, options))
        return runner.RunResult(tmp_path / "res" / "t" / "x", "x")

    monkeypatch.setattr(runner, "run_suite", fake_run_suite)
    code = cli.main(
        [
            "--suite",
            str(path),
            "--results",
            str(tmp_path / "res"),
            "--methods",
            "rotary",
            "--methods-dir",
            str(plugins),
            "--fresh",
            "--run-id",
            "mine",
            "--shard",
            "1/2",
            "--quiet",
            "--device",
            "cpu",
        ]
    )
    assert code == 0, capsys.readouterr().err
    ((suite, options),) = seen
    assert suite.name == "t" and suite.methods == ["sinusoidal", "rotary"]
    assert options.device == "cpu" and options.results == tmp_path / "res"
    assert (options.run_id, options.fresh, options.retry_failed, options.shard) == ("mine", True, False, (1, 2))
    assert list(options.methods) == ["rotary"] and list(options.methods_dirs) == [str(plugins)]
    assert options.progress is False and options.in_process is False and callable(options.on_row)
    assert "0 case(s) run, 0 already done" in capsys.readouterr().out


@pytest.mark.subprocess
def test_a_run_through_the_options_writes_rows_and_reports_each(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(SUITE.replace("n: [1, 2]", "n: [1]"))
    from posbench.run import suite as suitemod

    suite = suitemod.resolve(suitemod.load(path), "default")
    lines = []
    options = runner.RunOptions(
        "cpu",
        tmp_path / "res",
        methods=("rotary",),
        progress=False,
        on_row=lambda row, i, n: lines.append((row["case_id"], i, n)),
    )
    result = runner.run_suite(suite, options)
    assert lines == [("rotary/n=1", 1, 1)]
    assert result.ran == 1 and result.run_id == default_run_id(suite, "cpu")
    stored = [json.loads(x) for x in (result.run_dir / "cases.jsonl").read_text().splitlines()]
    assert [(r["case_id"], r["status"]) for r in stored] == [("rotary/n=1", "ok")]
