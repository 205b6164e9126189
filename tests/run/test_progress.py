"""posbench.run.progress: where a live run stands, read only while its lock is held (issue 66)."""

from __future__ import annotations

import os

from posbench.cli import app as cli
from posbench.run.progress import Progress, live_progress, lock_held, write_progress
from posbench.store.writing import lock_run_dir
from tests.helpers.report_rows import efficiency_rows, write_run


def test_progress_text_and_eta():
    assert Progress(3, 15, 100.0).text(now=115.0) == "running, 3 of 15, ETA 60 s"  # 5 s a row, 12 left
    assert Progress(3, 15, 100.0).text(now=400.0) == "running, 3 of 15, ETA 20 min"
    assert Progress(0, 15, 100.0).text(now=160.0) == "running, 0 of 15, ETA unknown"
    assert Progress(0, 0, 100.0).text() == "running (starting)"


def test_a_progress_file_counts_only_while_the_lock_is_held(tmp_path):
    write_progress(tmp_path, Progress(2, 5, 0.0))
    assert not lock_held(tmp_path) and live_progress(tmp_path) is None  # left by a run that ended
    fd = lock_run_dir(tmp_path)
    try:
        assert lock_held(tmp_path) and live_progress(tmp_path) == Progress(2, 5, 0.0)
    finally:
        os.close(fd)
    assert live_progress(tmp_path) is None


def test_status_of_a_live_run_says_running_k_of_n_and_eta(tmp_path, capsys):
    run_dir = write_run(tmp_path, efficiency_rows()[:4])
    write_progress(run_dir, Progress(4, 15, 0.0))
    fd = lock_run_dir(run_dir)  # as the runner holds it
    try:
        assert cli.main(["status", str(run_dir), "--allow-failures"]) == 0
        first = capsys.readouterr().out.splitlines()[0]
        assert ": running, 4 of 15, ETA " in first and first.endswith("4 case(s): 4 ok")
    finally:
        os.close(fd)
    assert cli.main(["status", str(run_dir), "--allow-failures"]) == 0
    assert "running" not in capsys.readouterr().out  # the run ended: its lock is free


def test_status_of_a_live_run_before_its_first_row(tmp_path, capsys):
    write_progress(tmp_path, Progress(0, 6, 0.0))
    fd = lock_run_dir(tmp_path)
    try:
        assert cli.main(["status", str(tmp_path)]) == 0
        assert capsys.readouterr().out == f"{tmp_path} (run folder): running, 0 of 6, ETA unknown; no case finished yet\n"
    finally:
        os.close(fd)
