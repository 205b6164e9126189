"""Fuzzing the one row reader: random bytes, random JSON and randomly damaged rows never make it
raise anything but its one-line ``RowsError``, and never make it hang (seeded, a few seconds)."""

import json
import random
import signal
import time

from posbench.report.rows import load_runs
from posbench.report.sections import collect_sections
from posbench.store.bounds import RowsError, check_row
from posbench.store.row import ROW_KEYS
from posbench.store.run_rows import read_rows
from posbench.tasks import find as find_task
from tests.helpers.report_rows import efficiency_rows, extrapolation_rows, retrieval_rows, write_run

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
