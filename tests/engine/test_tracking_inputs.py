"""Tracking options and folders (posbench/engine/tracking.py): POSBENCH_LOG is refused up front
as --log is, a results path TensorBoard cannot write is one line before any case runs, and a
link at cases/<name> or cases/ never receives event files (issue 44)."""

from __future__ import annotations

import importlib.util
import os

import pytest

from posbench.cli import app as cli
from posbench.core.files import UnsafeFile
from posbench.engine import tracking


def dry_run(tmp_path, capsys, results=None) -> tuple[int, str]:
    code = cli.main(["--suite", "extrapolation", "--dry-run", "--results", str(results or tmp_path / "results")])
    return code, capsys.readouterr().err


def test_posbench_log_bogus_in_the_environment_is_refused_up_front(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(tracking.LOG_ENV, "bogus")
    code, err = dry_run(tmp_path, capsys)
    assert code == 2 and err == "SuiteError: POSBENCH_LOG: unknown writer 'bogus'; allowed: wandb, none\n"
    assert not (tmp_path / "results").exists()


def test_posbench_log_wandb_without_wandb_is_refused_up_front(tmp_path, capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    monkeypatch.setenv(tracking.LOG_ENV, "wandb")
    code, err = dry_run(tmp_path, capsys)
    assert code == 2 and err.startswith("SuiteError: POSBENCH_LOG=wandb: the wandb package is not installed")
    assert err.count("\n") == 1


def test_a_results_path_that_is_not_utf8_is_one_line_up_front(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(tracking.LOG_ENV, raising=False)
    if tracking.tensorboard_version() is None:
        pytest.skip("tensorboard is not installed: no event files, nothing to refuse")
    bad = os.fsdecode(os.fsencode(str(tmp_path)) + b"/r\xff")
    code, err = dry_run(tmp_path, capsys, bad)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("SuiteError: --results ") and "the path is not UTF-8" in err and "--log none" in err
    with pytest.raises(ValueError, match=r"^training curves: .*the path is not UTF-8"):
        tracking.open_tracker(tracking.case_folder(bad, "alibi/L_train=8"))


@pytest.mark.parametrize("link", ["cases/alibi__L_train=8", "cases"])
def test_a_link_in_cases_never_receives_event_files(tmp_path, monkeypatch, link):
    monkeypatch.delenv(tracking.LOG_ENV, raising=False)
    outside = tmp_path / "outside"
    (outside / "alibi__L_train=8").mkdir(parents=True)
    run = tmp_path / "run"
    (run / link).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(outside if link == "cases" else outside / "alibi__L_train=8", run / link)
    with pytest.raises(UnsafeFile, match=r"is a symbolic link; posbench does not follow links in a run folder"):
        tracking.open_tracker(tracking.case_folder(run, "alibi/L_train=8"))
    assert list((outside / "alibi__L_train=8").iterdir()) == []
