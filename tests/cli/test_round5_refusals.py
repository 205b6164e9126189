"""Hardening round 5 (issue 56): valid input that was refused. ``--methods cope --set
method_options={cope: ...}`` (the method joins through ``--methods``) and a ``--data`` folder whose
name holds an emoji."""

import json

import pytest

from posbench.cli import app as cli


def _run(argv, capsys):
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.subprocess  # the CLI reads the method files in a child process
def test_options_for_a_method_that_joins_through_methods_are_accepted(tmp_path, capsys):
    base = ["--suite", "extrapolation", "--profile", "cpu", "--results", str(tmp_path), "--dry-run"]
    code, out, err = _run(base + ["--methods", "cope", "--set", "method_options={cope: {npos_max: 16}}"], capsys)
    assert code == 0, err
    assert json.loads(out.splitlines()[1].removeprefix("settings: "))["method_options"] == {"cope": {"npos_max": 16}}
    # a method neither the suite nor --methods names is still refused
    code, out, err = _run(base + ["--methods", "alibi", "--set", "method_options={cope: {npos_max: 16}}"], capsys)
    assert code == cli.EXIT_USAGE and "options for 'cope', which is not in methods" in err


@pytest.mark.subprocess  # the CLI reads the method files in a child process
def test_a_data_folder_named_with_an_emoji_is_read_as_a_path(tmp_path, capsys):
    data = tmp_path / "wiki \U0001f600"
    data.mkdir()
    code, out, err = _run(["--suite", "extrapolation", "--profile", "cpu", "--data", str(data), "--dry-run"], capsys)
    assert "not YAML" not in err and "\U0001f600" in err  # the corpus is missing there: said, by its name
