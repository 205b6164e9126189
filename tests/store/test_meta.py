"""run.json: a join it records (``RunMeta.joins``) reads back as written, a run.json written before
joins were recorded reads with none (and as format 1, whose ``methods`` were the suite's), and a
join of the wrong shape is one line naming the file and the key."""

import json

import pytest

from posbench.store.bounds import RowsError
from posbench.store.meta import RUN_FILE, Join, RunMeta, read_run_meta, write_run_meta


def _meta(**fields) -> RunMeta:
    base = dict(suite="t", version=1, task="_testing", baseline="sinusoidal", methods=["sinusoidal"], metrics=["value"])
    return RunMeta(**base, **fields)


def test_a_recorded_join_reads_back_as_written(tmp_path):
    join = Join(methods=["alibi"], points=[{"n": 1}, {"n": 2}], started_at="2026-01-02T00:00:00+00:00", paired=False)
    meta = _meta(joins=[join])
    write_run_meta(tmp_path, meta)
    assert json.loads((tmp_path / RUN_FILE).read_text())["joins"][0]["points"] == [{"n": 1}, {"n": 2}]
    assert read_run_meta(tmp_path) == meta and meta.format == 2


def test_a_run_json_from_before_joins_reads_with_none(tmp_path):
    record = dict(suite="t", version=1, task="_testing", baseline=None, methods=["a", "b"], metrics=[])
    (tmp_path / RUN_FILE).write_text(json.dumps(record))
    meta = read_run_meta(tmp_path)
    assert meta.joins == [] and meta.format == 1  # its methods were the suite's, not those that ran


@pytest.mark.parametrize(
    ("joins", "says"),
    [
        ({"methods": ["a"]}, "joins: expected a list of objects"),
        ([{"methods": "a", "points": [], "started_at": "x", "paired": True}], "joins[0].methods: expected a list of strings"),
        ([{"methods": ["a"], "points": [1], "started_at": "x", "paired": True}], "joins[0].points: expected a list of objects"),
        ([{"methods": ["a"], "points": [], "paired": True}], "joins[0]: no 'started_at'"),
        ([{"methods": ["a"], "points": [], "started_at": "x", "paired": "yes"}], "joins[0].paired: expected true or false"),
    ],
)
def test_a_join_of_the_wrong_shape_is_one_line(tmp_path, joins, says):
    record = dict(suite="t", version=1, task="_testing", baseline=None, methods=[], metrics=[], joins=joins)
    (tmp_path / RUN_FILE).write_text(json.dumps(record))
    with pytest.raises(RowsError) as err:
        read_run_meta(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / RUN_FILE}: {says}") and "\n" not in str(err.value)
