"""RULER's summaries: the weighted averages over lengths and the effective length relative to the
model's own accuracy at L_train, hand-computed on fixtures, in a row's metrics, and in the tables
with their intervals over seeds and learn first."""

import pytest

from posbench.report.stats import seed_interval
from posbench.tasks.retrieval import accuracy
from posbench.tasks.retrieval import report as charts
from posbench.tasks.retrieval import run as R
from posbench.tasks.retrieval.summaries import relative_effective_length, weighted_average


def test_weighted_averages_weigh_lengths_linearly_towards_long_or_short():
    acc = {64: 1.0, 128: 0.5, 256: 0.0}
    assert weighted_average(acc, "long") == pytest.approx((1 * 1.0 + 2 * 0.5 + 3 * 0.0) / 6)
    assert weighted_average(acc, "short") == pytest.approx((3 * 1.0 + 2 * 0.5 + 1 * 0.0) / 6)
    assert weighted_average({64: 0.7}, "long") == weighted_average({64: 0.7}, "short") == pytest.approx(0.7)
    assert weighted_average({64: 1.0, 128: None}, "long") is None and weighted_average({}, "short") is None
    with pytest.raises(ValueError, match="towards 'middle' is not known; allowed: long, short"):
        weighted_average(acc, "middle")


def test_the_relative_effective_length_keeps_a_share_of_the_own_accuracy_at_L_train():
    acc = {64: 0.8, 128: 0.7, 256: 0.6, 512: 0.7}  # 0.8 x 0.8 = 0.64: 256 falls below, 512 no longer counts
    assert relative_effective_length(acc, 64, 0.8) == 128
    assert relative_effective_length(acc, 64, 0.7) == 512  # 0.56
    assert relative_effective_length({64: 0.3, 128: 0.3}, 64, 1.0) == 128  # a low but flat curve keeps its length
    assert relative_effective_length({64: 0.9, 128: None, 256: 0.9}, 64, 0.5) == 64
    assert relative_effective_length({128: 0.9}, 64, 0.5) is None  # no accuracy at L_train


def _cell(Lv, k, n, seed=None):
    c = {"L_valid": Lv, "depth": None, "correct": k, "total": n, "status": "ok", "message": ""}
    return c if seed is None else dict(c, seed=seed)


def test_a_rows_metrics_carry_the_summaries_and_hide_the_relative_length_when_not_learnt():
    cells = [_cell(8, 10, 10), _cell(16, 9, 10), _cell(32, 7, 10)]
    m = R.summarize(cells, 8, threshold=0.5, learned_threshold=0.9, relative=0.8)
    assert m["wavg_long"] == pytest.approx((1.0 + 2 * 0.9 + 3 * 0.7) / 6) and m["wavg_short"] == pytest.approx(
        (3 * 1.0 + 2 * 0.9 + 0.7) / 6
    )
    assert m["effective_length_rel"] == 16 and m["effective_length"] == 32
    m = R.summarize(cells, 8, threshold=0.5, learned_threshold=0.9, relative=0.5)
    assert m["effective_length_rel"] == 32
    m = R.summarize([_cell(8, 5, 10), _cell(16, 5, 10)], 8, 0.5, learned_threshold=0.9)
    assert m["learned"] == 0 and m["effective_length_rel"] is None and m["wavg_long"] == pytest.approx(0.5)


def _row(method, cells, bar=0.7, relative=0.8):
    return {
        "method": method,
        "task": "retrieval",
        "status": "ok",
        "params": {"L_train": 8, "probe": "multikey"},
        "metrics": {},
        "series": {"cells": cells, "learned_threshold": bar, "relative_threshold": relative},
    }


# Two seeds of alibi: per seed accuracies (8, 16, 32) = (1.0, 0.9, 0.3) and (0.8, 0.8, 0.5); rotary one seed.
ALIBI = [
    _cell(8, 10, 10, 0),
    _cell(16, 9, 10, 0),
    _cell(32, 3, 10, 0),
    _cell(8, 8, 10, 1),
    _cell(16, 8, 10, 1),
    _cell(32, 5, 10, 1),
]
ROTARY = [_cell(8, 10, 10), _cell(16, 2, 10), _cell(32, 0, 10)]


def test_the_table_shows_the_summaries_with_their_seed_intervals():
    rows = [_row("alibi", ALIBI), _row("rotary", ROTARY)]
    table = {(t["method"], t["L_valid"]): t for t in accuracy.accuracy_table(rows)}
    a = table["alibi", 8]
    # pooled curve (0.9, 0.85, 0.4): 0.8 x 0.9 = 0.72, so 16 keeps it and 32 does not
    assert a["effective_length_rel"] == 16 and a["wavg_long"] == pytest.approx((0.9 + 2 * 0.85 + 3 * 0.4) / 6)
    per_seed = [(1.0 + 2 * 0.9 + 3 * 0.3) / 6, (0.8 + 2 * 0.8 + 3 * 0.5) / 6]
    assert a["wavg_long_seeds"] == pytest.approx(seed_interval(per_seed)[3:])
    assert a["effective_length_rel_seeds"] == (16.0, 16.0)  # seed 0: 0.3 < 0.8 at 32; seed 1: 0.5 < 0.64
    assert table["rotary", 8]["wavg_short_seeds"] == (None, None)
    t = charts.probe_table(rows, "multikey")
    assert t.columns[-4:] == ["effective length (rel)", "wAvg long", "wAvg short", "steps"]
    lo, hi = seed_interval(per_seed)[3:]
    assert t.cell("alibi", "wAvg long").text == f"{100 * a['wavg_long']:.0f}% seeds [{100 * max(0, lo):.0f}, {100 * hi:.0f}]"
    assert t.cell("rotary", "effective length (rel)").text == "8" and t.cell("rotary", "wAvg long").text == "23%"
    assert "keeping >= 0.8 x the model's own accuracy at L_train" in t.caption
    md = charts.markdown_table(rows, "multikey")
    assert "| wAvg short | effective length |" in md and "| 8 | 23% | 57% | 8 |" in md


def test_a_model_that_did_not_learn_shows_no_relative_length():
    rows = [_row("alibi", ALIBI, bar=0.95), _row("rotary", ROTARY, bar=0.95)]
    t = charts.probe_table(rows, "multikey")
    assert t.cell("alibi", "effective length (rel)").text == "not learnt at L_train"
    assert t.cell("alibi", "effective length (rel)").value is None and t.cell("rotary", "effective length (rel)").value == 8.0


def test_effective_lengths_of_seeds_show_their_interval_clipped_to_the_lengths_measured():
    # alibi's seeds: effective length (0.5) 16 and 32, relative 16 and 16; the t interval of (16, 32)
    # with two seeds is about [-78, 126]: a learnt model's length lies in 8..32, so it is shown clipped
    rows = [_row("alibi", ALIBI), _row("rotary", ROTARY)]
    a = {(t["method"], t["L_valid"]): t for t in accuracy.accuracy_table(rows)}["alibi", 8]
    lo, hi = seed_interval([16, 32])[3:]
    assert a["effective_length_seeds"] == pytest.approx((lo, hi)) and lo < 8 and hi > 32
    t = charts.probe_table(rows, "multikey")
    assert t.cell("alibi", "effective length").text == "16 seeds [8, 32]"  # pooled curve (0.9, 0.85, 0.4): 0.4 < 0.5 at 32
    assert t.cell("alibi", "effective length (rel)").text == "16 seeds [16, 16]"
    assert t.cell("rotary", "effective length").text == "8"  # one seed: no interval


def test_the_steps_column_lists_each_seeds_steps_and_whether_it_stopped():
    series = {"train_steps_by_seed": [700.0, 2000.0], "stopped_at_step_by_seed": [700.0, None]}
    assert charts.steps_text({"train_steps": 1350.0}, series) == "700 (stopped), 2000"
    assert charts.steps_text({"train_steps": 900, "stopped_at_step": 900}) == "900 (stopped)"
    assert charts.steps_text({"train_steps": 1350.0}) == "-"  # a mean over seeds without their list says nothing
