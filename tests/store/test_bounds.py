"""The one row reader stays bounded whatever a run folder holds: only regular files are read (never
opened in a way that blocks), lines and nesting are bounded, and no row makes a reader allocate a
slot per claimed round or window (issue 26)."""

import json
import os
import random
import signal
import time
from contextlib import contextmanager

import pytest

from posbench.report.build import build_report
from posbench.report.rows import find_run_dirs, load_runs
from posbench.report.sections import collect_sections
from posbench.store import bounds as stored
from posbench.store.bounds import MAX_LINE, MAX_ROUNDS, MAX_WINDOWS, RowsError, check_row
from posbench.store.meta import read_env, read_run_meta
from posbench.store.row import ROW_KEYS
from posbench.store.run_rows import case_rows, read_rows
from posbench.tasks import find as find_task
from tests.helpers.report_rows import base_row, efficiency_rows, extrapolation_rows, retrieval_rows, write_run


@contextmanager
def within(seconds: int):
    """Fail (instead of hanging the suite) when the block takes longer than ``seconds``."""

    def expired(*_):
        raise TimeoutError(f"took longer than {seconds}s: the reader blocked")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _row(case_id="a", **extra):
    return base_row("s", "efficiency", "alibi", {"seq_len": 8}, "run", case_id=case_id, **extra)


def _lines(path, *lines):
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


@pytest.mark.parametrize("name", ["cases.jsonl", "run.json", "env.json"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder"])
def test_a_stored_file_that_is_no_regular_file_is_refused_in_one_line_without_blocking(tmp_path, name, kind):
    run_dir = write_run(tmp_path, efficiency_rows())
    target = run_dir / name
    target.unlink()
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "dev-zero":
        target.symlink_to("/dev/zero")
    else:
        target.mkdir()
    with within(10), pytest.raises(RowsError) as err:
        load_runs(run_dir, find_task=find_task)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{target}: ")
    assert "not a regular file; allowed: a regular file" in message
    with within(10), pytest.raises(RowsError):  # the report says the same line (bench.py report exits 2)
        build_report([run_dir], tmp_path / "out", find_task=find_task)


def test_read_rows_refuses_a_fifo_and_a_device_itself(tmp_path):
    fifo = tmp_path / "cases.jsonl"
    os.mkfifo(fifo)
    with within(10), pytest.raises(RowsError, match="a FIFO, not a regular file"):
        read_rows(fifo)
    link = tmp_path / "zero.jsonl"
    link.symlink_to("/dev/zero")
    with within(10), pytest.raises(RowsError, match="a character device, not a regular file"):
        read_rows(link)


def test_a_line_longer_than_the_bound_is_skipped_without_holding_it(tmp_path, monkeypatch):
    monkeypatch.setattr(stored, "MAX_LINE", 4096)
    path = _lines(tmp_path / "cases.jsonl", _row("a"), _row("b", message="x" * 100_000), _row("c"))
    problems = []
    assert [r["case_id"] for r in read_rows(path, problems)] == ["a", "c"]
    assert problems == [f"{path}:2: longer than 4,096 bytes; allowed: lines up to that; line skipped"]


def test_the_default_line_bound_is_16_mib_and_a_longer_line_is_skipped(tmp_path):
    assert MAX_LINE == 16 << 20
    path = tmp_path / "cases.jsonl"
    with path.open("w") as fh:
        fh.write(json.dumps(_row("a")) + "\n")
        fh.write('{"case_id": "' + "x" * (17 << 20) + '"}\n')
        fh.write(json.dumps(_row("c")) + "\n")
    problems = []
    assert [r["case_id"] for r in read_rows(path, problems)] == ["a", "c"]
    assert problems[0].startswith(f"{path}:2: longer than 16 MiB")


def test_json_nested_100000_deep_is_a_skipped_line_never_a_recursion_error(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    deep_row = '{"case_id": "d", "method": "m", "status": "ok", "params": {}, "metrics": {}, "series": {"x": ' + deep + "}}"
    path = _lines(tmp_path / "cases.jsonl", _row("a"), deep, deep_row, _row("c"))
    problems = []
    assert [r["case_id"] for r in read_rows(path, problems)] == ["a", "c"]
    assert [p.split(": ", 1)[0] for p in problems] == [f"{path}:2", f"{path}:3"]
    assert all("nested deeper than 64 levels" in p and p.endswith("; line skipped") for p in problems)


@pytest.mark.parametrize("name", ["run.json", "env.json"])
def test_deep_or_huge_json_in_run_and_env_files_is_one_line(tmp_path, name):
    run_dir = write_run(tmp_path, efficiency_rows())
    for text, what in (
        ("[" * 100_000 + "]" * 100_000, "nested deeper than 64 levels"),
        ('{"x": ' + "9" * 400 + "}", "an integer of 400 digits"),
    ):
        (run_dir / name).write_text(text)
        with pytest.raises(RowsError) as err:
            load_runs(run_dir, find_task=find_task)
        assert str(err.value).startswith(f"{run_dir / name}: ") and what in str(err.value)


def test_a_billion_rounds_make_the_row_invalid_not_a_billion_slots(tmp_path):
    path = _lines(
        tmp_path / "cases.jsonl",
        _row("a", round=1, metrics={"train_wps": 1.0}),
        _row("a", round=1_000_000_000, metrics={"train_wps": 1.0}),
        _row("a", round=MAX_ROUNDS, metrics={"train_wps": 2.0}),
    )
    problems = []
    rows = read_rows(path, problems)
    assert [r["round"] for r in rows] == [1, MAX_ROUNDS]
    assert problems == [f"{path}:2: round: expected a whole number from 1 to 10000 or null, got 1000000000; line skipped"]
    merged = case_rows(rows)["a"]  # the largest allowed round: 10,000 slots, no more
    assert len(merged["series"]["train_wps_by_round"]) == 10_000 and merged["metrics"]["n_rounds"] == 2


def test_a_series_of_more_windows_than_the_bound_makes_the_row_invalid(tmp_path):
    many = _row("b", series={"train_wps_windows": [1.0] * (MAX_WINDOWS + 1)})
    nested = _row("c", series={"train_wps_by_window": [{"group": "g", "values": [1.0] * (MAX_WINDOWS + 1)}]})
    path = _lines(tmp_path / "cases.jsonl", _row("a"), many, nested)
    problems = []
    assert [r["case_id"] for r in read_rows(path, problems)] == ["a"]
    assert len(problems) == 2 and all("more than 10000 values" in p for p in problems)


@pytest.mark.parametrize(
    "data, message",
    [
        (b'{"suite": "\xff"}', "not UTF-8 text"),
        (
            json.dumps({"suite": 5, "version": 1, "task": "t", "baseline": None, "methods": [], "metrics": []}).encode(),
            "suite: expected a string, got int",
        ),
        (
            json.dumps({"suite": "s", "version": "one", "task": "t", "baseline": None, "methods": [], "metrics": []}).encode(),
            "version: expected a whole number, got str",
        ),
        (
            json.dumps({"suite": "s", "version": 1, "task": "t", "baseline": 3, "methods": [], "metrics": []}).encode(),
            "baseline: expected a string or null, got int",
        ),
        (
            json.dumps({"suite": "s", "version": 1, "task": "t", "baseline": None, "methods": [1], "metrics": []}).encode(),
            "methods: expected a list of strings, got list",
        ),
        (
            json.dumps(
                {"suite": "s", "version": 1, "task": "t", "baseline": None, "methods": [], "metrics": [], "settings": [1]}
            ).encode(),
            "settings: expected an object, got list",
        ),
        (
            json.dumps(
                {"suite": "s", "version": 1, "task": "t", "baseline": None, "methods": [], "metrics": [], "grid": {"seq_len": 5}}
            ).encode(),
            "grid: expected an object of lists, got dict",
        ),
    ],
)
def test_a_malformed_run_json_is_one_clean_line(tmp_path, data, message):
    (tmp_path / "run.json").write_bytes(data)
    with pytest.raises(RowsError) as err:
        read_run_meta(tmp_path)
    assert str(err.value) == f"{tmp_path / 'run.json'}: {message}"


def test_a_huge_env_json_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(stored, "MAX_FILE", 1000)
    (tmp_path / "env.json").write_text(json.dumps({"x": "y" * 5000}))
    with pytest.raises(RowsError, match=r"env.json: larger than 1,000 bytes; allowed: a JSON file up to that size$"):
        read_env(tmp_path)


def test_finding_run_folders_does_not_follow_a_link_loop(tmp_path):
    run_dir = write_run(tmp_path / "results", efficiency_rows())
    (run_dir / "loop").symlink_to(tmp_path / "results")
    with within(20):
        assert find_run_dirs(tmp_path / "results") == [run_dir]


@pytest.mark.parametrize(
    "change, what",
    [
        (lambda r: r.update(method="m" * 5000), "method: 5,000 characters"),
        (lambda r: r["params"].update(seq_len=8, note="n" * 5000), "params.note: 5,000 characters"),
        (lambda r: r["metrics"].update({"w" * 5000: 1.0}), "metrics key 'wwww"),
    ],
)
def test_a_name_of_thousands_of_characters_makes_the_row_invalid(tmp_path, change, what):
    bad = _row("b")
    change(bad)
    path = _lines(tmp_path / "cases.jsonl", _row("a"), bad)
    problems = []
    assert [r["case_id"] for r in read_rows(path, problems)] == ["a"]
    assert len(problems) == 1 and what in problems[0] and "allowed: names up to 4,096" in problems[0]
    assert len(problems[0]) < 300


# Fuzzing the one row reader: random bytes, random JSON and randomly damaged rows never make it
# raise anything but its one-line ``RowsError``, and never make it hang (seeded, a few seconds).


SEED = 26
BUDGET_S = 3.0
NASTY_STRINGS = ["", "=1+1", "-", "a/b", "../../x", "\x00", "é", "\ud800", "x" * 300, "NaN", "[", "{"]


def _value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(10 if depth < 90 else 6)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice([0, -1, 1, 2**63, -(2**63) - 1, 10**400, 10 ** rng.randrange(30)])
    if kind == 2:
        return rng.choice([0.0, -5.0, 1e308, -1e308, 1e-308, float("nan"), float("inf"), rng.random()])
    if kind in (3, 4, 5):
        return rng.choice(NASTY_STRINGS + list(ROW_KEYS))
    if kind in (6, 7):
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(list(ROW_KEYS) + NASTY_STRINGS): _value(rng, depth + 1) for _ in range(rng.randrange(5))}


def _damaged(rng: random.Random, row: dict) -> dict:
    row = json.loads(json.dumps(row))
    for _ in range(rng.randrange(1, 4)):
        target = row
        for key in ("params", "metrics", "series", "info", "settings"):
            if isinstance(row.get(key), dict) and row[key] and rng.random() < 0.3:
                target = row[key]
                break
        key = rng.choice(list(target) or ["x"])
        if rng.random() < 0.15:
            target.pop(key, None)
        else:
            target[key] = _value(rng)
    return row


def _line(rng: random.Random, good: list[dict]) -> bytes:
    kind = rng.randrange(5)
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(80))).replace(b"\n", b"")
    if kind == 1:
        return json.dumps(_value(rng)).encode()
    if kind == 2:  # a deep or a wide value as text
        n = rng.choice([10, 65, 1000, 100_000])
        return (rng.choice(["[", '{"a":']) * n).encode()
    if kind == 3:
        return json.dumps(_damaged(rng, rng.choice(good)), allow_nan=True).encode()
    return json.dumps(rng.choice(good)).encode()


def _expired(*_):
    raise TimeoutError("the reader hung")


def test_random_bytes_and_json_never_raise_anything_but_the_one_line_error(tmp_path):
    rng = random.Random(SEED)
    good = efficiency_rows() + extrapolation_rows() + retrieval_rows()
    old = signal.signal(signal.SIGALRM, _expired)
    signal.alarm(60)
    try:
        start, rounds = time.monotonic(), 0
        while rounds < 20 or time.monotonic() - start < BUDGET_S:
            rounds += 1
            path = tmp_path / "cases.jsonl"
            data = b"\n".join(_line(rng, good) for _ in range(rng.randrange(1, 12)))
            path.write_bytes(data + (b"\n" if rng.random() < 0.7 else b""))
            problems: list[str] = []
            rows = read_rows(path, problems)
            for row in rows:
                check_row(row, "again")  # what it hands back is a row
            assert all("\n" not in p and p.endswith("; line skipped") for p in problems)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert rounds >= 20


def test_randomly_damaged_rows_never_fail_loading_or_tabulating(tmp_path):
    rng = random.Random(SEED + 1)
    sets = [efficiency_rows, extrapolation_rows, retrieval_rows]
    old = signal.signal(signal.SIGALRM, _expired)
    signal.alarm(120)
    try:
        start, rounds = time.monotonic(), 0
        while rounds < 10 or time.monotonic() - start < BUDGET_S:
            rounds += 1
            clean = rng.choice(sets)()
            run_dir = write_run(tmp_path / str(rounds), clean)
            rows = [_damaged(rng, r) if rng.random() < 0.3 else r for r in clean]
            (run_dir / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            try:
                runs = load_runs(run_dir, report=lambda _p: None, find_task=find_task)
            except RowsError:
                continue
            if len(runs.rows):
                for section in collect_sections(runs):
                    for block in section.blocks:
                        assert block.table.key
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
