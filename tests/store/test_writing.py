"""A run folder's files are never opened through a link, and never read when not regular files
(issue 26, security and hangs): a planted link is refused in one line and its target untouched;
a FIFO or a link to /dev/zero does not block resume or --dry-run."""

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from posbench.cli import app as cli
from posbench.core import files
from posbench.core.files import WriteError
from posbench.store.writing import append_row, lock_run_dir, write_env
from tests.helpers.suites import TWO_METHODS as SUITE

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def suite(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(SUITE)
    return path


def run_dir_of(tmp_path, suite, capsys) -> Path:
    """The run folder the suite's command lands in (from a dry run)."""
    assert cli.main(["--suite", str(suite), "--results", str(tmp_path / "results"), "--dry-run"]) == 0
    run_id = capsys.readouterr().out.splitlines()[0].rsplit(" run ", 1)[1]
    return tmp_path / "results" / "t" / run_id


@pytest.mark.parametrize("name", [".lock", "cases.jsonl", "run.json", "env.json", "table.md", "table.csv"])
@pytest.mark.subprocess
def test_a_planted_link_is_refused_in_one_line_and_its_target_untouched(tmp_path, suite, capsys, name):
    run_dir = run_dir_of(tmp_path, suite, capsys)
    run_dir.mkdir(parents=True)
    outside = tmp_path / "precious.txt"  # outside results/
    outside.write_text("do not touch\n")
    (run_dir / name).symlink_to(outside)
    assert cli.main(["--suite", str(suite), "--results", str(tmp_path / "results"), "--quiet"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "symbolic link" in err and name in err, err
    assert outside.read_text() == "do not touch\n"
    assert not (run_dir / "cases.jsonl").exists() or (run_dir / "cases.jsonl").is_symlink()


@pytest.mark.subprocess
def test_a_run_folder_that_is_a_link_is_refused(tmp_path, suite, capsys):
    run_dir = run_dir_of(tmp_path, suite, capsys)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run_dir.parent.mkdir(parents=True)
    run_dir.symlink_to(elsewhere)
    assert cli.main(["--suite", str(suite), "--results", str(tmp_path / "results"), "--quiet"]) == cli.EXIT_USAGE
    assert "the run folder is a symbolic link" in capsys.readouterr().err
    assert list(elsewhere.iterdir()) == []


def test_append_row_and_the_lock_never_follow_a_link(tmp_path):
    outside = tmp_path / "precious.txt"
    outside.write_text("keep\n")
    (tmp_path / "cases.jsonl").symlink_to(outside)
    with pytest.raises(files.UnsafeFile, match="symbolic link"):
        append_row(tmp_path / "cases.jsonl", {"case_id": "x"})
    (tmp_path / ".lock").symlink_to(outside)
    with pytest.raises(files.UnsafeFile, match="symbolic link"):
        lock_run_dir(tmp_path)
    assert outside.read_text() == "keep\n"


def test_write_env_replaces_a_link_instead_of_writing_through_it(tmp_path):
    outside = tmp_path / "precious.json"
    outside.write_text("[1]\n")  # not a dict: write_env rewrites env.json
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "env.json").symlink_to(outside)
    write_env(tmp_path / "run" / "env.json", {"a": 1})
    assert outside.read_text() == "[1]\n" and not (tmp_path / "run" / "env.json").is_symlink()


def test_read_regular_refuses_fifos_and_devices_without_blocking(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(files.UnsafeFile, match="not a regular file .a FIFO."):
        files.read_regular(fifo)
    with pytest.raises(files.UnsafeFile, match="not a regular file"):
        files.read_regular("/dev/zero")
    (tmp_path / "zero").symlink_to("/dev/zero")
    with pytest.raises(files.UnsafeFile, match="symbolic link"):
        files.read_regular(tmp_path / "zero")


@pytest.mark.parametrize("kind", ["fifo", "zero"])
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "resume"])
@pytest.mark.subprocess
def test_a_fifo_or_dev_zero_as_cases_jsonl_neither_blocks_nor_fills_memory(tmp_path, suite, capsys, kind, dry_run):
    run_dir = run_dir_of(tmp_path, suite, capsys)
    run_dir.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(run_dir / "cases.jsonl")
    else:
        (run_dir / "cases.jsonl").symlink_to("/dev/zero")
    cmd = [sys.executable, str(REPO / "bench.py"), "--suite", str(suite), "--results", str(tmp_path / "results"), "--quiet"] + (
        ["--dry-run"] if dry_run else []
    )
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "cases.jsonl" in proc.stderr
    assert ("a FIFO" if kind == "fifo" else "symbolic link") in proc.stderr


def test_a_full_disk_while_writing_the_lock_names_the_file(tmp_path, monkeypatch):
    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(WriteError) as info:
        lock_run_dir(tmp_path)
    assert str(info.value) == f"cannot write {tmp_path / '.lock'}: No space left on device"
