"""Flags that contradict or say nothing, mistyped commands, odd bytes, signals: one clear line each
(issue 26, unclear and crashes)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from posbench.cli import app as cli
from tests.helpers.suites import TWO_METHODS as SUITE

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def suite(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(SUITE)
    return path


def one_line(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1, captured.err
    return captured.err


@pytest.mark.subprocess
def test_fresh_dry_run_names_no_old_folder_and_lists_every_case(tmp_path, suite, capsys):
    results = str(tmp_path / "results")
    assert cli.main(["--suite", str(suite), "--results", results, "--quiet"]) == 0
    capsys.readouterr()
    assert cli.main(["--suite", str(suite), "--results", results, "--fresh", "--dry-run"]) == 0
    out = capsys.readouterr().out
    (old,) = (tmp_path / "results" / "t").iterdir()
    assert old.name not in out.replace(f"{old.name}-<date>-<time>", "")
    assert "already" not in out and "  done  " not in out
    assert out.count("  run   ") == 4 and "4 case(s) to run in a new run folder" in out


def test_fresh_with_retry_failed_is_refused(suite, capsys):
    assert cli.main(["--suite", str(suite), "--fresh", "--retry-failed", "--dry-run"]) == cli.EXIT_USAGE
    assert "--fresh and --retry-failed contradict each other" in one_line(capsys)


@pytest.mark.parametrize("value", ["", ",,,", " , "])
def test_methods_that_name_no_method_are_refused(suite, capsys, value):
    assert cli.main(["--suite", str(suite), "--methods", value, "--dry-run"]) == cli.EXIT_USAGE
    assert f"--methods: {value!r} names no method" in one_line(capsys)


@pytest.mark.subprocess
def test_an_empty_data_folder_is_refused(suite, capsys):
    assert cli.main(["--suite", str(suite), "--data", "", "--dry-run"]) == cli.EXIT_USAGE
    assert "--data: empty" in one_line(capsys)


def test_a_mistyped_command_says_it_is_not_one_and_lists_the_commands(capsys):
    assert cli.main(["frobnicate"]) == cli.EXIT_USAGE
    err = one_line(capsys)
    assert "'frobnicate' is not a command" in err and "--suite" not in err.split(";")[0]
    assert all(name in err for name in cli.ALL_COMMANDS)


@pytest.mark.subprocess
def test_a_set_value_that_is_not_utf8_is_one_line(suite, capsys):
    value = os.fsdecode(b"warmup_steps=\xff")  # what Python makes of the shell's raw bytes
    assert cli.main(["--suite", str(suite), "--set", value, "--dry-run"]) == cli.EXIT_USAGE
    err = one_line(capsys)
    assert err.startswith("SuiteError: --set warmup_steps=\\udcff: not UTF-8 text") and "internal" not in err


def test_download_with_an_empty_url_is_one_line(tmp_path, capsys):
    assert cli.main(["download", "wikitext-103", "--data", str(tmp_path), "--url", ""]) == cli.EXIT_USAGE
    err = one_line(capsys)
    assert err.startswith("DataError: ") and "internal" not in err


@pytest.mark.parametrize("command", [["check", "alibi", "--device", "cuda"], ["list", "--device", "cuda"]])
def test_cuda_on_a_cpu_only_torch_is_one_line(capsys, command):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert cli.main(command) == cli.EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == "" and "alibi" not in captured.out
    assert captured.err.count("\n") == 1 and "CUDA is not available here" in captured.err


def test_a_huge_error_message_is_cut_in_the_progress_line_and_kept_whole_in_the_row():
    message = "x" * 3_000_000
    row = {"method": "alibi", "params": {"n": 1}, "settings": {}, "status": "error", "message": message, "duration_s": 1.0}
    line = cli.case_line(row, [])
    assert len(line) < 500 and "message cut: 3000000 characters in the row" in line
    assert row["message"] == message
    multi = cli.case_line(dict(row, message="first\nsecond"), [])
    assert "\n" not in multi and "first" in multi and "message cut" in multi


@pytest.mark.parametrize(
    "command, target",
    [
        (["report", "somewhere"], "posbench.report.build:build_report"),
        (["download", "wikitext-103", "--data", "d"], "posbench.data.download:download_wikitext103"),
    ],
)
def test_ctrl_c_in_report_and_download_is_one_line_and_exit_130(monkeypatch, capsys, command, target):
    import importlib

    module, name = target.split(":")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module(module), name, interrupted)
    assert cli.main(command) == 130
    err = capsys.readouterr().err
    assert err.strip() == f"interrupted (Ctrl-C): bench.py {command[0]} stopped" and "Traceback" not in err


@pytest.mark.subprocess
def test_sigterm_during_a_run_prints_the_resume_command_and_exits_143(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(SUITE + "settings:\n  by_method: {alibi: sleep}\n  sleep_s: 60\n")
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "bench.py"), "--suite", str(path), "--results", "results", "--quiet"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    deadline = time.monotonic() + 120
    cases = None
    while time.monotonic() < deadline:  # the first case (sinusoidal) is saved, alibi sleeps
        found = list((tmp_path / "results" / "t").glob("*/cases.jsonl"))
        if found and found[0].read_text().count("\n") >= 1:
            cases = found[0]
            break
        time.sleep(0.2)
    assert cases is not None, "the run saved no row"
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "terminated (SIGTERM): 1 of 4 cases finished and saved" in err
    assert "resume with: python bench.py " in err and "--run-id" in err and "Traceback" not in err
    assert [json.loads(line)["method"] for line in cases.read_text().splitlines()] == ["sinusoidal"]
