"""The command line: exit codes, one-line errors on stderr, nothing written for an invalid suite."""
import json

import pytest

from posbench import cli

from test_suite import VALID as SUITE  # the same valid suite the validation tests start from


@pytest.fixture
def suite_file(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(SUITE)
    return path


def test_validate_ok_and_invalid(suite_file, tmp_path, capsys):
    assert cli.main(["validate", str(suite_file)]) == 0
    assert "ok:" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text(SUITE.replace("version: 1", "version: 1\nspeed: fast"))
    assert cli.main(["validate", str(bad)]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err == f"SuiteError: {bad}:4: speed: unknown key; allowed: name, description, version, task, methods, " \
                  "baseline, metrics, grid, settings, profiles\n"


def test_invalid_suite_runs_nothing_and_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(SUITE.replace("[sinusoidal, alibi]", "[sinusoidal, alibbi]"))
    results = tmp_path / "results"
    assert cli.main(["--suite", str(bad), "--results", str(results)]) == cli.EXIT_USAGE
    assert "did you mean 'alibi'?" in capsys.readouterr().err
    assert not results.exists()


def test_bad_set_value_is_one_line(suite_file, tmp_path, capsys):
    code = cli.main(["run", "--suite", str(suite_file), "--set", "timeout_s=[1", "--results", str(tmp_path / "r")])
    assert code == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("SuiteError: --set timeout_s=[1: timeout_s: value is not YAML") and err.count("\n") == 1


def test_dry_run_lists_cases_and_writes_nothing(suite_file, tmp_path, capsys):
    results = tmp_path / "results"
    args = ["--suite", str(suite_file), "--device", "cpu", "--results", str(results), "--dry-run",
            "--methods", "alibi", "--set", "grid.n=[5, 6]"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "profile cpu, device cpu" in out and "  run   alibi/n=5\n  run   alibi/n=6\n" in out
    assert "sinusoidal" not in out.split("settings:")[1].split("case(s)")[0].replace("run   alibi", "")
    assert not results.exists()


def test_schema_is_json_schema(capsys):
    assert cli.main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "SuiteFile" and "methods" in schema["properties"]


def test_list_shows_methods_with_availability_and_suites(capsys):
    assert cli.main(["list", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "sinusoidal" in out and "available" in out and "methods/sinusoidal.py" in out
    assert "efficiency" in out.split("suites:")[1]


def test_help_has_examples(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    assert "python bench.py --suite efficiency --profile cpu" in capsys.readouterr().out
