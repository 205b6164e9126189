"""The command line: exit codes, one-line errors on stderr, nothing written for an invalid suite."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from posbench.cli import app as cli
from posbench.core import registry
from posbench.run import suite as suitemod
from tests.helpers.suites import VALID as SUITE  # the same valid suite the validation tests start from

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def suite_file(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(SUITE)
    return path


@pytest.mark.subprocess
def test_validate_ok_and_invalid(suite_file, tmp_path, capsys):
    assert cli.main(["validate", str(suite_file)]) == 0
    assert "ok:" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text(SUITE.replace("version: 1", "version: 1\nspeed: fast"))
    assert cli.main(["validate", str(bad)]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert (
        err == f"SuiteError: {bad}:4: speed: unknown key; allowed: name, description, version, task, methods, "
        "baseline, metrics, grid, settings, profiles, launcher\n"
    )


@pytest.mark.subprocess
def test_invalid_suite_runs_nothing_and_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(SUITE.replace("[sinusoidal, alibi]", "[sinusoidal, alibbi]"))
    results = tmp_path / "results"
    assert cli.main(["--suite", str(bad), "--results", str(results)]) == cli.EXIT_USAGE
    assert "did you mean 'alibi'?" in capsys.readouterr().err
    assert not results.exists()


def test_options_are_never_abbreviated(capsys):
    # `validate` has no --methods; argparse would otherwise read it as --methods-dir and answer
    # "methods folder rotray does not exist".
    with pytest.raises(SystemExit):
        cli.main(["validate", "efficiency", "--methods", "rotray"])
    assert "unrecognized arguments: --methods rotray" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["list", "--methods-d", "x"])
    assert "unrecognized arguments: --methods-d" in capsys.readouterr().err


@pytest.mark.subprocess
def test_bad_set_value_is_one_line(suite_file, tmp_path, capsys):
    code = cli.main(["run", "--suite", str(suite_file), "--set", "timeout_s=[1", "--results", str(tmp_path / "r")])
    assert code == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("SuiteError: --set timeout_s=[1: timeout_s: value is not YAML") and err.count("\n") == 1


@pytest.mark.subprocess
def test_dry_run_lists_cases_and_writes_nothing(suite_file, tmp_path, capsys):
    results = tmp_path / "results"
    args = [
        "--suite",
        str(suite_file),
        "--device",
        "cpu",
        "--results",
        str(results),
        "--dry-run",
        "--methods",
        "alibi",
        "--set",
        "grid.n=[5, 6]",
    ]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "profile cpu, device cpu" in out and "  run   alibi/n=5\n  run   alibi/n=6\n" in out
    assert "sinusoidal" not in out.split("settings:")[1].split("case(s)")[0].replace("run   alibi", "")
    assert not results.exists()


def test_schema_is_json_schema(capsys):
    assert cli.main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "SuiteFile" and "methods" in schema["properties"]


@pytest.mark.subprocess
def test_list_shows_methods_with_availability_and_suites(capsys):
    assert cli.main(["list", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "sinusoidal" in out and "available" in out and "methods/sinusoidal.py" in out
    assert "efficiency" in out.split("suites:")[1]


def test_help_has_examples(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    assert "python bench.py --suite efficiency --profile cpu" in capsys.readouterr().out


@pytest.mark.subprocess
def test_list_without_check_reads_methods_from_their_files(capsys):
    assert cli.main(["list"]) == 0
    methods, suites = capsys.readouterr().out.split("suites:\n")
    lines = methods.splitlines()[1:]
    assert [line.split()[0] for line in lines] == sorted(registry.listing())
    assert "  sinusoidal     " in methods and "methods/sinusoidal.py" in methods and "available" not in methods
    assert [line.split()[0] for line in suites.splitlines()] == suitemod.names()


# The commands that only look at files answer without torch (or numpy, pandas, matplotlib): torch
# alone takes seconds to import, and these must answer in well under 1.5 s.
STARTUP = """
import sys
from posbench.cli import app as cli
try:
    code = cli.main({args!r})
except SystemExit as exc:  # --help leaves through argparse
    code = exc.code
heavy = sorted(m for m in ("torch", "numpy", "pandas", "matplotlib", "triton") if m in sys.modules)
print("RESULT", code, heavy)
"""


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["run", "--help"],
        ["list"],
        ["schema"],
        ["validate", "efficiency"],
        ["validate", "extrapolation"],
        ["validate", "precision"],
        ["validate", "kernels"],
        ["validate", "decode"],
        ["validate", "retrieval"],
    ],
    ids=" ".join,
)
def test_startup_commands_import_no_torch(args):
    env = {k: v for k, v in os.environ.items() if k != "POSBENCH_METHODS_PATH"}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(
        [sys.executable, "-c", STARTUP.format(args=args)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "RESULT 0 []"


@pytest.mark.subprocess
def test_list_check_imports_methods_and_says_availability(capsys):
    assert cli.main(["list", "--check"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("methods (availability on ") and re.search(r"^  rotary +available ", out, re.M)


def test_case_line_leaves_out_metrics_measured_in_another_row_and_says_n_a_for_missing_values():
    row = {
        "method": "rotary",
        "params": {"seq_len": 64},
        "settings": {"rounds": 5},
        "round": 2,
        "status": "ok",
        "task": "efficiency",
        "metrics": {"train_wps": 15100.0, "eval_wps": None},
        "duration_s": 4.7,
    }
    line = cli.case_line(row, ["train_wps", "eval_wps", "peak_mem_train_bytes"])
    assert line.startswith("rotary        seq_len=64 round 2/5 ok          train_wps 15.1k  eval_wps n/a  (4.7 s)")
    assert "peak_mem" not in line
