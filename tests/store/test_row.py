"""``posbench.store.row``: the typed row reads today's rows and writes them back unchanged, and
``make_row`` (the one place rows are built) writes the keys and values the runner always wrote."""

import json
from datetime import datetime, timezone
from pathlib import Path

from posbench.core.case import CaseSpec
from posbench.store.row import ROW_KEYS, Result, Row, Spread, finite_metrics, make_row
from posbench.store.run_rows import merge_rounds, read_run_rows
from tests.helpers.report_rows import efficiency_rows

FIXTURES = Path(__file__).parent / "fixtures" / "old_runs" / "res"


def _stored_lines() -> list[str]:
    return [line for path in sorted(FIXTURES.rglob("*.jsonl")) for line in path.read_text().splitlines() if line]


def test_every_stored_row_round_trips_byte_for_byte():
    lines = _stored_lines()
    assert len(lines) > 20
    for line in lines:
        data = json.loads(line)
        assert json.dumps(Row.from_json(data).to_json()) == json.dumps(data)


def test_rows_written_without_newer_keys_round_trip_and_keep_extra_keys():
    for data in efficiency_rows():  # no "round", "info" or "traceback"
        data = dict(data, source="/a/run", hardware="CPU (x)")
        row = Row.from_json(data)
        assert row.extra == {"source": "/a/run", "hardware": "CPU (x)"}
        assert json.dumps(row.to_json()) == json.dumps(data)


def test_spread_rounds_and_windows_are_fields_of_a_merged_row():
    rows = [json.loads(line) for line in (FIXTURES / "effw" / "eff-w" / "cases.jsonl").read_text().splitlines()]
    alibi = Row.from_json(merge_rounds([r for r in rows if r["method"] == "alibi"]))
    assert alibi.spread("train_wps") == Spread(lo=90.0, hi=92.0, std=0.5)
    assert alibi.spread("eval_wps") is None
    assert alibi.by_round("train_wps") == [91.0, 92.0]
    assert alibi.by_window("train_wps") == [
        {"group": "g1", "values": [90.0, 91.0, 92.0]},
        {"group": "g2", "values": [90.0, 91.0, 92.0]},
    ]
    assert alibi.windows("train_wps") == [90.0, 91.0, 92.0]
    assert alibi.n_rounds == 2


def test_make_row_writes_every_key_in_order():
    case = CaseSpec(
        suite="t",
        task="_testing",
        method="alibi",
        device="cpu",
        profile="default",
        run_id="r",
        params={"n": 1},
        settings={"timeout_s": 30.0},
    )
    started = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    row = make_row(
        case,
        {"status": "ok", "metrics": {"value": 1.0, "bad": float("nan")}, "series": {"s": [1]}, "info": {"a": "1"}},
        started,
        1.23456,
        "abc",
        2,
        {"unit": "n=1"},
    )
    assert tuple(row) == ROW_KEYS
    assert row["case_id"] == case.id and row["metrics"] == {"value": 1.0, "bad": None}
    assert row["info"] == {"a": "1", "unit": "n=1"} and row["started_at"] == "2026-01-02T03:04:05+00:00"
    assert row["duration_s"] == 1.235 and row["round"] == 2 and row["git_commit"] == "abc"
    assert row["message"] == "" and row["traceback"] == ""
    failed = make_row(case, Result("timeout", "no result after 30 s"), started, 0.0, "abc")
    assert failed["status"] == "timeout" and failed["info"] == {} and failed["metrics"] == {}
    assert finite_metrics({"a": float("inf"), "b": 2}) == {"a": None, "b": 2}


def test_the_fixture_rows_are_read_by_the_store():
    assert len(read_run_rows(FIXTURES / "rounds" / "old", [])) == 12
