"""A run folder's files are never opened through a link, and never read when not regular files
(issue 26, security and hangs): a planted link is refused in one line and its target untouched;
a FIFO or a link to /dev/zero does not block resume or --dry-run."""

import errno
import inspect
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from posbench.cli import app as cli
from posbench.core import files
from posbench.core.files import WriteError
from posbench.store.run_rows import read_usable_rows
from posbench.store.writing import _repair_tail, append_row, lock_run_dir, write_env
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


# Nothing is ever deleted from cases.jsonl except an incomplete last line (issue 26, data loss). A
# torn tail longer than any fixed window, a complete row that lost only its newline, and a writer
# killed at random moments while rows are appended and torn tails are left behind: every complete
# row survives the next append.


def row(i: int, message: str = "") -> dict:
    return {
        "case_id": f"m/n={i}",
        "suite": "s",
        "task": "_testing",
        "method": "m",
        "params": {"n": i},
        "status": "ok",
        "message": message,
        "metrics": {},
        "series": {},
        "info": {},
        "settings": {},
        "device": "cpu",
        "profile": "p",
        "run_id": "r",
        "started_at": "2026-01-01T00:00:00+00:00",
        "duration_s": 0.1,
        "posbench_version": "0",
        "git_commit": "x",
        "traceback": "",
        "round": 1,
    }


def line(i: int, message: str = "") -> bytes:
    return (json.dumps(row(i, message)) + "\n").encode()


def ids(path: Path) -> list[str]:
    return [r["case_id"] for r in read_usable_rows(path)]


def test_a_torn_tail_longer_than_64_kib_costs_only_itself(tmp_path):
    path = tmp_path / "cases.jsonl"
    torn = line(9, "x" * 200_000)[:150_000]  # a large error message, cut while the disk filled
    path.write_bytes(line(1) + line(2) + line(3) + torn)
    append_row(path, row(4))
    assert ids(path) == ["m/n=1", "m/n=2", "m/n=3", "m/n=4"]
    assert path.read_bytes() == line(1) + line(2) + line(3) + line(4)


def test_a_torn_tail_with_no_newline_in_the_whole_file_is_cut_alone(tmp_path):
    path = tmp_path / "cases.jsonl"
    path.write_bytes(line(1, "y" * 100_000)[:90_000])
    append_row(path, row(2))
    assert path.read_bytes() == line(2)


def test_a_complete_row_without_its_newline_is_kept_and_counted(tmp_path):
    path = tmp_path / "cases.jsonl"
    path.write_bytes(line(1) + line(2).rstrip(b"\n"))
    assert ids(path) == ["m/n=1", "m/n=2"]  # resume counts it as done ...
    append_row(path, row(3))
    assert ids(path) == ["m/n=1", "m/n=2", "m/n=3"]  # ... and the next append keeps it
    assert path.read_bytes() == line(1) + line(2) + line(3)


def test_a_large_complete_row_without_its_newline_is_kept(tmp_path):
    path = tmp_path / "cases.jsonl"
    path.write_bytes(line(1) + line(2, "z" * 300_000).rstrip(b"\n"))
    append_row(path, row(3))
    assert ids(path) == ["m/n=1", "m/n=2", "m/n=3"]


WRITER = """
import sys
from pathlib import Path
from posbench.store.writing import append_row
{row}
path, i, big = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
while True:
    append_row(path, row(i, "m" * (big if i % 3 == 0 else 10)))
    print(i, flush=True)  # after append_row returned: this row is complete
    i += 1
"""


@pytest.mark.subprocess
def test_killing_a_writer_at_random_moments_never_loses_a_complete_row(tmp_path):
    """Bounded: about 4 s of writers killed with SIGKILL at random moments; between writers the
    test leaves what a crash mid-write leaves (a torn prefix of a row, at times larger than 64 KiB,
    or a whole row without its newline). Every row a writer confirmed, and every whole row left
    without newline, is still there afterwards, once."""
    rng = random.Random(26)
    path = tmp_path / "cases.jsonl"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    confirmed: list[int] = []
    next_id, deadline, rounds = 0, time.monotonic() + 4.0, 0
    while time.monotonic() < deadline or rounds < 3:
        rounds += 1
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER.format(row=inspect.getsource(row)), str(path), str(next_id), "70000"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(rng.uniform(0.3, 0.9))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        written = [int(x) for x in out.split()]
        confirmed += written
        next_id = (max(written) if written else next_id) + 1000  # ids never repeat
        if path.exists() and not path.read_bytes().endswith(b"\n"):
            # the kill landed mid-write: the next run's first append repairs that before anything
            # else can be left behind (one crash per tail, as in life), so repair it the same way
            with open(path, "r+b") as fh:
                _repair_tail(fh, path.stat().st_size)
        tail = line(next_id, "t" * rng.choice([10, 100_000]))
        if rng.random() < 0.3:  # a whole row that lost only its newline
            with open(path, "ab") as fh:
                fh.write(tail.rstrip(b"\n"))
            confirmed.append(next_id)
        else:  # torn mid-write
            with open(path, "ab") as fh:
                fh.write(tail[: rng.randrange(1, len(tail) - 1)])
        next_id += 1
    append_row(path, row(next_id))
    confirmed.append(next_id)
    found = [int(cid.split("=")[1]) for cid in ids(path)]
    assert len(found) == len(set(found))
    missing = sorted(set(confirmed) - set(found))
    assert not missing, f"complete rows lost: {missing[:10]}"
    problems: list[str] = []
    read_usable_rows(path, problems)
    assert problems == []  # every torn tail was cut off, nothing else


def random_json(rng: random.Random, depth: int = 0):
    kind = rng.randrange(7 if depth < 4 else 4)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice([0, -1, 10**400, 1e308, rng.random()])
    if kind == 2:
        return "".join(chr(rng.randrange(1, 0x3000)) for _ in range(rng.randrange(8)))
    if kind == 3:
        return rng.choice(["", "=cmd", "\t", "ok"])
    if kind == 4:
        return [random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = ["case_id", "status", "round", "metrics", "params", "method", "x"]
    base = row(rng.randrange(5)) if kind == 6 else {}
    return dict(base, **{rng.choice(keys): random_json(rng, depth + 1) for _ in range(rng.randrange(4))})


def test_resume_reading_survives_random_bytes_random_json_and_deep_nesting(tmp_path):
    """Fuzz (bounded): a line of random bytes, random JSON, a 100,000-deep list: resume skips each
    bad line with a warning naming file and line, keeps the good rows, and never raises."""
    rng = random.Random(2026)
    path = tmp_path / "cases.jsonl"
    for trial in range(200):
        lines = [line(0)]
        for _ in range(rng.randrange(1, 6)):
            pick = rng.randrange(3)
            if pick == 0:
                lines.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))).replace(b"\n", b" ") + b"\n")
            elif pick == 1:
                lines.append(json.dumps(random_json(rng)).encode() + b"\n")
            else:
                lines.append(line(trial + 1))
        if trial % 50 == 0:
            lines.append(b"[" * 100_000 + b"]" * 100_000 + b"\n")
        path.write_bytes(b"".join(lines))
        problems: list[str] = []
        found = read_usable_rows(path, problems)
        assert found[0]["case_id"] == "m/n=0"
        assert all(p.startswith(f"{path}:") and p.endswith("; line skipped") for p in problems)
        assert len(found) + len(problems) == sum(1 for raw in lines if raw.strip())
