"""The summary a report opens with (posbench/report/headline.py), the captions at a reading measure
of their own, figures that do not repeat their title, and the CI job summary
(posbench/report/job_summary.py): Markdown tables, the charts named as files of the artifact."""

from __future__ import annotations

import re
from dataclasses import replace
from html import unescape as html_unescape

import pytest

from posbench.cli.run_output import FAILED_STATUSES
from posbench.report import headline as hl
from posbench.report import job_summary as js
from posbench.report.build import build_report, collect_sections, load_runs
from posbench.report.charts import bar_label
from posbench.report.learn_first import BROKEN, NOT_LEARNT
from posbench.report.table import Cell, Table, TableSpec
from posbench.tasks import find as find_task
from tests.helpers.report_rows import (
    PRECISION_SUITE_METRICS,
    efficiency_rows,
    extrapolation_rows,
    precision_rows,
    retrieval_rows,
    write_run,
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    results = tmp_path_factory.mktemp("summary") / "results"
    write_run(results, efficiency_rows(), metrics=["train_wps", "eval_wps", "peak_mem_train_bytes"])
    write_run(results, extrapolation_rows())
    write_run(results, precision_rows(), metrics=PRECISION_SUITE_METRICS, baseline=None)
    write_run(results, retrieval_rows())
    return results


@pytest.fixture(scope="module")
def report(runs):
    return build_report([runs], runs.parent / "out", find_task=find_task)  # built once: charts take seconds


SPEED = TableSpec(task="efficiency", metric="train_wps", unit="words/s", column_header="seq_len", higher_is_better=True)
LOWER_IS_BETTER = replace(SPEED, higher_is_better=False)


def _table(spec: TableSpec = SPEED, **kw) -> Table:
    base = dict(
        key="t",
        title="Training speed (words/s), efficiency",
        columns=[256, 512],
        rows=["sinusoidal", "alibi", "rotary"],
        baseline="sinusoidal",
    )
    return Table(spec, **{**base, **kw})


def test_the_failed_statuses_are_those_that_make_bench_exit_3():
    assert hl.FAILED == FAILED_STATUSES


def test_the_summary_counts_cases_and_reads_each_tables_ratios_at_its_last_column(runs):
    loaded = load_runs(runs, find_task=find_task)
    sections = collect_sections(loaded)
    lines = hl.headline(sections, loaded.rows)
    assert lines[0] == hl.Line("26 cases: 20 ok, 5 unavailable here, 1 failed (1 oom).", alarm=True)
    speed = next(b.table for s in sections for b in s.blocks if b.table.metric == "train_wps")
    (line,) = [x for x in lines if x.table == speed.key]
    # every number is the table's own cell at seq_len 1024, as the bars note it
    assert line.text == (
        f"Training speed (words/s), efficiency, at seq_len 1024, ratio to sinusoidal (higher is "
        f"better): rotary {bar_label(speed.cell('rotary', 1024))}; t5_bias OOM; alibi "
        f"{bar_label(speed.cell('alibi', 1024))}; alibi_triton unavailable. Not separable: sinusoidal, rotary, alibi."
    )  # ratios without intervals (one measurement each) separate nothing
    assert bar_label(speed.cell("rotary", 1024)) == "0.92x"
    # a table without a baseline: its values at the last L_valid, failed cells by status
    ppl = next(x for x in lines if x.text.startswith("Perplexity, L_train = 64, nonoverlapping"))
    assert ppl.text.endswith("at L_valid 512, values: sinusoidal 1280.00; rotary OOM; alibi 18.03.")
    assert not any(x.alarm for x in lines[1:])


def test_a_ratio_with_an_interval_is_shown_with_it_and_ties_are_not_separable():
    table = _table(
        cells={
            ("sinusoidal", 512): Cell("10.0k (1.00x)", 10_000.0, ratio=1.0),
            ("alibi", 512): Cell("9.2k", 9_200.0, ratio=0.92, ratio_interval=(0.9, 0.94)),
            ("rotary", 512): Cell("error", status="error"),
        }
    )
    assert hl.table_line(table).text == (
        "Training speed (words/s), efficiency, at seq_len 512, ratio to sinusoidal "
        "(higher is better): alibi 0.92x [0.90, 0.94]; rotary error. Best: sinusoidal."
    )
    tie = _table(
        baseline=None,
        spec=LOWER_IS_BETTER,
        columns=[512],
        cells={("sinusoidal", 512): Cell("3.0", 3.0), ("alibi", 512): Cell("3.0", 3.0), ("rotary", 512): Cell("4.0", 4.0)},
    )
    assert hl.table_line(tie).text.endswith(
        "values (lower is better): sinusoidal 3.0; alibi 3.0; rotary 4.0. Not separable: sinusoidal, alibi, rotary."
    )
    assert hl.table_line(_table(columns=["float32"], baseline=None)) is None  # nothing numeric to read


def test_a_best_is_named_only_outside_every_other_interval_and_the_floor_never():
    # the project's own screenshot: "Best: sinusoidal" inside overlapping intervals
    inside = _table(
        rows=["sinusoidal", "alibi", "rotary", "nope"],
        extra={"floor": "nope"},
        cells={
            ("sinusoidal", 512): Cell("10.0k (1.00x)", 10_000.0, ratio=1.0),
            ("alibi", 512): Cell("9.9k", 9_900.0, ratio=0.99, ratio_interval=(0.96, 1.02)),
            ("rotary", 512): Cell("9.0k", 9_000.0, ratio=0.90, ratio_interval=(0.88, 0.92)),
            ("nope", 512): Cell("10.2k", 10_200.0, ratio=1.02, ratio_interval=(0.97, 1.05)),
        },
    )
    text = hl.table_line(inside).text
    assert text.endswith("Not separable: sinusoidal, alibi. nope is the floor, not ranked.") and "Best" not in text
    # alibi's interval wholly above every other's: named, and nope still only the floor
    inside.cells[("alibi", 512)] = Cell("11k", 11_000.0, ratio=1.10, ratio_interval=(1.06, 1.14))
    assert hl.table_line(inside).text.endswith("Best: alibi. nope is the floor, not ranked.")
    # nope fastest by far: the best is the fastest method that is not the floor
    inside.cells[("nope", 512)] = Cell("20k", 20_000.0, ratio=2.0, ratio_interval=(1.9, 2.1))
    assert hl.table_line(inside).text.endswith("Best: alibi. nope is the floor, not ranked.")
    # values without ratios: their spreads decide (min-max of windows, seed intervals)
    spreads = _table(
        baseline=None,
        spec=LOWER_IS_BETTER,
        columns=[512],
        cells={
            ("sinusoidal", 512): Cell("3.0", 3.0, spread=(2.9, 3.1)),
            ("alibi", 512): Cell("2.0", 2.0, spread=(1.9, 2.1)),
            ("rotary", 512): Cell("3.05", 3.05, spread=(2.95, 3.2)),
        },
    )
    assert hl.table_line(spreads).text.endswith("Best: alibi.")
    spreads.cells[("sinusoidal", 512)] = Cell("2.2", 2.2, spread=(2.05, 2.4))
    assert hl.table_line(spreads).text.endswith("Not separable: alibi, sinusoidal.")


def test_a_table_that_should_have_ratios_says_why_it_has_none():
    table = _table(rows=["alibi"], cells={("alibi", 512): Cell("9.2k", 9_200.0)})
    assert hl.table_line(table) == hl.Line(
        "Training speed (words/s), efficiency: no ratios, baseline sinusoidal was not run.",
        "t",
        lead="Training speed (words/s), efficiency",
    )
    table.rows.append("sinusoidal")
    table.cells[("sinusoidal", 512)] = Cell("OOM", status="oom")
    assert hl.table_line(table).text.endswith("baseline sinusoidal has no finished case.")


def test_learn_first_verdicts_reach_the_summary():
    columns = [8, "effective length"]
    table = _table(
        title="passkey: accuracy",
        columns=columns,
        baseline=None,
        rows=["alibi", "nope", "rotary"],
        cells={
            ("nope", "effective length"): Cell(NOT_LEARNT),
            ("rotary", "effective length"): Cell(NOT_LEARNT),
            ("alibi", "effective length"): Cell("16", 16.0),
        },
    )
    assert hl.verdict_lines(table) == [
        hl.Line(f"passkey: accuracy: {NOT_LEARNT}, so not compared beyond it: nope, rotary.", "t", lead="passkey: accuracy")
    ]
    table.title += f" — {BROKEN}: 1 of 3 learnt the task at L_train"
    (line,) = hl.verdict_lines(table)
    assert line.alarm and line.text.endswith("compares nothing; fix its training before reading it.")


def test_html_opens_with_the_summary_and_links_each_line_to_its_table(runs, report):
    html = report["report.html"].read_text()
    summary = re.search(r'<section class="summary" id="summary"><h2>Summary</h2><ul>(.*?)</ul></section>', html)
    assert summary and html.index("<h1>") < summary.start() < html.index('<table class="results"')
    items = re.findall(r"<li( class=\"alarm\")?>(.*?)</li>", summary.group(1))
    assert items[0] == (' class="alarm"', "26 cases: 20 ok, 5 unavailable here, 1 failed (1 oom).")
    ids = set(re.findall(r'<table class="results" id="(table-[^"]+)"', html))
    links = [re.match(r'<a href="#([^"]+)">([^<]+)</a>', text) for _, text in items[1:]]
    assert links and {m.group(1) for m in links} <= ids
    # the link is the table's name; the numbers after it read as plain text
    titles = {
        f"table-{t.key}": t.title
        for s in collect_sections(load_runs(runs, find_task=find_task))
        for t in (b.table for b in s.blocks)
    }
    assert all(html_unescape(m.group(2)) == titles[m.group(1)] for m in links)


def test_captions_sit_above_their_tables_at_a_measure_of_their_own_and_figures_repeat_no_title(report):
    html = report["report.html"].read_text()
    assert "<caption>" not in html and "<figcaption>" not in html
    tables = re.findall(r'<table class="results" id="table-([^"]+)" aria-describedby="caption-\1">', html)
    assert tables and len(tables) == html.count('<table class="results"')
    for key in tables:  # the caption paragraph, then its table's scroll box
        assert f'<p class="caption" id="caption-{key}"><b>' in html
        assert re.search(
            rf'id="caption-{re.escape(key)}">.*?</p>\n<div class="scroll"><table class="results" '
            rf'id="table-{re.escape(key)}"',
            html,
        )
    from posbench.report.html import _STYLE

    assert re.search(r"p\.caption \{[^}]*max-width: 72ch", _STYLE)
    for alt in re.findall(r'<figure class="chart" data-table="[^"]+"><img alt="([^"]+)"', html):
        assert alt  # the title stays for screen readers, once


def test_the_job_summary_holds_the_summary_and_tables_and_names_charts_in_the_artifact(runs, report, tmp_path):
    out = report["report.md"].parent
    text = js.job_summary([runs], out, "report-efficiency-NVIDIA-H100", find_task=find_task)
    md = report["report.md"].read_text()
    assert "![" not in text and "](charts/" not in text
    charts = sorted(p.name for p in (out / "charts").glob("*.png"))
    assert charts and all(f"`charts/{name}` in the artifact `report-efficiency-NVIDIA-H100`" in text for name in charts)
    assert text.startswith(
        md.split("\n", 1)[0] + "\n\n## Summary\n\n- **26 cases: 20 ok, 5 unavailable here, 1 failed (1 oom).**\n- Training speed"
    )
    table_lines = [x for x in md.splitlines() if x.startswith("|")]
    assert table_lines and all(x in text.splitlines() for x in table_lines)  # every table, in Markdown


def test_the_job_summary_command_and_its_size_limit(runs, report, tmp_path, monkeypatch, capsys):
    out = report["report.md"].parent
    assert js.main([str(runs), "--report", str(out), "--artifact", "report-x"], find_task=find_task) == 0
    assert "## Summary" in capsys.readouterr().out
    assert js.main([str(runs), "--report", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.startswith("job_summary: ")
    monkeypatch.setattr(js, "SUMMARY_LIMIT", 2000)
    text = js.job_summary([runs], out, "report-x", find_task=find_task)
    assert len(text.encode()) < 2200 and text.rstrip().endswith(
        "*Cut at 2,000 bytes (a job summary's limit): the whole report is in the artifact `report-x`.*"
    )


def test_a_method_not_learnt_at_L_train_is_neither_ranked_nor_read_beyond_it():
    table = _table(
        title="multikey: accuracy",
        baseline=None,
        columns=[32, 256, "effective length"],
        rows=["alibi", "rotary", "t5_bias"],
        cells={
            ("alibi", 256): Cell("90%", 0.9, spread=(0.85, 0.95)),  # best number, but never learnt at 32
            ("alibi", "effective length"): Cell(NOT_LEARNT),
            ("rotary", 256): Cell("40%", 0.4, spread=(0.35, 0.45)),
            ("t5_bias", 256): Cell("10%", 0.1, spread=(0.05, 0.15)),
        },
    )
    text = hl.table_line(table).text
    assert f"alibi {NOT_LEARNT}; rotary 40%" in text and text.endswith("Best: rotary.")


def test_seed_intervals_widen_a_retrieval_cell_so_two_seeds_separate_nothing():
    from posbench.tasks.retrieval.report import spread

    one_seed = {"lo": 0.78, "hi": 0.91, "seed_lo": None}
    assert spread(one_seed) == (0.78, 0.91)
    two = {"lo": 0.78, "hi": 0.91, "seed_lo": -0.4, "seed_hi": 1.9}  # a t interval of two seeds
    assert spread(two) == (0.0, 1.0)
    assert spread({"lo": 0.5, "hi": 0.6, "seed_lo": 0.52, "seed_hi": 0.7}) == (0.5, 0.7)


def test_memory_is_ranked_beyond_its_resolution_and_never_within_it(tmp_path):
    # Issue 66: "t5_bias 2.80x; alibi 2.59x ... Not separable" for peak evaluation memory above the
    # resting footprint, one measurement each. With the memory resolution a 2.8x gap is a ranking
    # and a 2% one is not.
    from posbench.report.tabulate import metric_tables
    from tests.helpers.report_rows import base_row

    mib = 1 << 20
    above = {"sinusoidal": 10 * mib, "t5_bias": 28 * mib, "alibi": 25.9 * mib, "rotary": 10.2 * mib}
    rows = []
    for method, value in above.items():
        row = base_row("efficiency", "efficiency", method, {"seq_len": 64}, "r")
        row["metrics"] = {"peak_mem_eval_above_base_bytes": value}
        rows.append(row)
    run = write_run(tmp_path, rows, metrics=["peak_mem_eval_above_base_bytes"])
    (table,) = metric_tables(load_runs(run, find_task=find_task), "efficiency", metrics=["peak_mem_eval_above_base_bytes"])
    text = hl.table_line(table).text
    assert "ratio to sinusoidal (lower is better; differences under max(5%, 8 MiB) not claimed): t5_bias 2.80x" in text
    assert text.endswith("Not separable: sinusoidal, rotary.")  # 0.2 MiB apart; t5_bias and alibi ranked out
    above["rotary"] = 20 * mib  # 10 MiB more: beyond the resolution
    rows[-1]["metrics"]["peak_mem_eval_above_base_bytes"] = above["rotary"]
    run = write_run(tmp_path / "2", rows, metrics=["peak_mem_eval_above_base_bytes"])
    (table,) = metric_tables(load_runs(run, find_task=find_task), "efficiency", metrics=["peak_mem_eval_above_base_bytes"])
    assert hl.table_line(table).text.endswith("Best: sinusoidal.")


def test_report_md_opens_with_the_summary_the_html_shows(runs, report):
    md = report["report.md"].read_text()
    title, summary = md.split("\n", 1)
    assert summary.startswith("\n## Summary\n\n- **26 cases: 20 ok, 5 unavailable here, 1 failed (1 oom).**\n- Training speed")
    loaded = load_runs(runs, find_task=find_task)
    lines = hl.headline(collect_sections(loaded), loaded.rows)
    assert "\n".join(hl.summary_markdown(lines)) in md
    # the CI job summary keeps report.md's summary, once
    text = js.job_summary([runs], report["report.md"].parent, "report-x", find_task=find_task)
    assert text.count("## Summary") == 1
