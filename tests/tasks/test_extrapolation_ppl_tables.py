"""The extrapolation perplexity tables' learn first (posbench/tasks/extrapolation/ppl_tables.py,
``mark_not_learnt``; issue 66): a model far from its peers or the bound at L_train is flagged,
its cells beyond L_train say so, and the summary ranks it nowhere."""

from __future__ import annotations

from posbench import tasks
from posbench.report.headline import table_line, verdict_lines
from posbench.report.learn_first import BROKEN, NOT_LEARNT
from posbench.report.rows import load_runs
from posbench.tasks.extrapolation.ppl_tables import extrapolation_tables
from tests.helpers.report_rows import extrapolation_rows, write_run


def tables(tmp_path, at_train: dict[str, float], bound: float = 12.5):
    rows = extrapolation_rows()
    for row in rows:
        row["metrics"] = {"ppl_at_train_len": at_train[row["method"]], "best_ppl_eval": bound}
    runs = load_runs([write_run(tmp_path, rows)], find_task=tasks.find)
    return [t for t in extrapolation_tables(runs) if t.extra["mode"] == ("nonoverlapping", None, False)]


def test_an_undertrained_model_is_flagged_beyond_L_train(tmp_path):
    (table,) = tables(tmp_path, {"sinusoidal": 40.0, "rotary": 20.0, "alibi": 21.0})  # 40 > 1.5 x 20
    assert table.extra["not_learnt"] == ["sinusoidal"] and BROKEN not in table.title
    assert table.cell("sinusoidal", 64).text != NOT_LEARNT  # the L_train cell keeps its number
    assert [table.cell("sinusoidal", lv).text for lv in (128, 256, 512)] == [NOT_LEARNT] * 3
    assert table.cell("sinusoidal", 512).value is not None  # the value stays for the chart and the CSV
    assert table.cell("alibi", 512).text != NOT_LEARNT
    assert "Learn first: 2 of 3 learnt the task at L_train (perplexity at L_train at most 1.5x" in table.caption
    assert f"{NOT_LEARNT}: sinusoidal" in table.caption
    # the summary: sinusoidal is said not learnt and never named best beyond L_train
    line = table_line(table).text
    assert f"sinusoidal {NOT_LEARNT}" in line and "Best: sinusoidal" not in line
    assert any("not compared beyond it: sinusoidal" in v.text for v in verdict_lines(table))


def test_every_model_far_from_the_bound_is_a_broken_profile(tmp_path):
    (table,) = tables(tmp_path, {"sinusoidal": 30.0, "rotary": 26.0, "alibi": 27.0}, bound=12.5)  # all > 2 x 12.5
    assert BROKEN in table.title and table.extra["learnt"] == []


def test_models_that_learnt_are_not_marked(tmp_path):
    (table,) = tables(tmp_path, {"sinusoidal": 20.0, "rotary": 20.0, "alibi": 21.0})
    assert table.extra["not_learnt"] == [] and BROKEN not in table.title and "Learn first" not in table.caption
    assert NOT_LEARNT not in {c.text for c in table.cells.values()}
