"""The frontier (issue 39): the Pareto front on a fixture, the verdict ("worse beyond seed-level
noise (k of n seeds)" or "not separable"), and the frontier section of a seeded, time-budgeted
extrapolation run (table and chart, the decode cost with its spread over repeats)."""

import matplotlib.pyplot as plt

from posbench.report import charts
from posbench.report.build import collect_sections, load_runs
from posbench.report.frontier import (
    NOT_SEPARABLE,
    Point,
    bounds_note,
    compare_points,
    frontier_chart,
    pareto_front,
    verdicts,
)
from posbench.report.table import Cell, Table, TableSpec
from posbench.tasks import find as find_task
from posbench.tasks.extrapolation.frontier_report import frontier_tables, verdict_table
from tests.helpers.report_rows import base_row, write_run


def P(method, L, ppls, cost, memory=None):
    return Point(method, L, dict(enumerate(ppls)), cost, memory)


def test_pareto_front_on_a_fixture():
    points = [
        P("alibi", 64, [11.4, 11.6, 11.8], 1.0),  # cheapest and best: on the front
        P("sinusoidal", 128, [10.9, 11.0, 11.1], 2.0),  # dearer but better: on the front
        P("rotary", 64, [14.0, 15.0, 16.0], 1.5),  # dearer and worse than alibi 64: dominated
        P("t5_bias", 128, [11.0, 11.0, 11.0], 3.0),  # as good as sinusoidal 128, dearer: dominated
        P("nope", 64, [None, None, None], 0.5),  # no quality: not a point
        P("fire", 64, [9.0, 9.0, 9.0], None),
    ]  # no cost: not a point
    assert [p.label for p in pareto_front(points)] == ["alibi, L_train=64", "sinusoidal, L_train=128"]
    # higher is better (an accuracy): the front flips
    acc = [P("a", 8, [0.5], 1.0), P("b", 8, [0.9], 2.0), P("c", 8, [0.4], 3.0)]
    assert [p.method for p in pareto_front(acc, lower_is_better=False)] == ["a", "b"]


def test_verdict_beyond_the_noise_and_not_separable():
    best = P("alibi", 64, [11.4, 11.6, 11.8], 1.0)  # 11.6 ± 4.303 * 0.2 / sqrt(3) = [11.10, 12.10]
    far = P("sinusoidal", 64, [14.7, 15.2, 15.9], 1.0)  # [13.7, 16.8]: no overlap
    near = P("rotary", 64, [11.5, 12.4, 11.7], 1.0)  # overlaps alibi's interval
    chosen, said = verdicts([far, near, best])
    assert chosen is best
    by = {v.other.method: v for v in said}
    assert by["sinusoidal"].separable and (by["sinusoidal"].wins, by["sinusoidal"].paired) == (3, 3)
    assert (
        by["sinusoidal"]
        .text(name="ppl")
        .startswith(
            "worse beyond seed-level noise: alibi, L_train=64 beats it, 3 of 3 seeds, ppl 11.60 [11.10, 12.10] vs 15.27 ["
        )
    )
    assert not by["rotary"].separable and (by["rotary"].wins, by["rotary"].paired) == (2, 3)  # seed 0 and 1 ...
    assert by["rotary"].text().startswith(f"{NOT_SEPARABLE} from alibi, L_train=64 (2 of 3 seeds better)")
    # one seed has no interval: never separable, however far apart
    assert not compare_points(P("a", 8, [1.0], 1.0), P("b", 8, [100.0], 1.0)).separable


def seeded_rows():
    """Two methods at two L_train under time_s=60, three seeds; alibi 64 cheapest and best at 256."""
    rows = []
    ppl = {
        ("alibi", 64): [11.4, 11.6, 11.8],
        ("alibi", 128): [11.5, 11.9, 12.2],
        ("sinusoidal", 64): [30.0, 32.0, 35.0],
        ("sinusoidal", 128): [11.3, 12.5, 11.9],
    }
    for (method, L), values in ppl.items():
        row = base_row("frontier", "extrapolation", method, {"L_train": L}, "run-f")
        row["metrics"] = {
            "budget_time_s": 60.0,
            "n_seeds": 3,
            "train_seconds": 60.0,
            "train_tokens": 60000.0 / (L / 64),
            "peak_mem_train_bytes": 1e8 * L / 64,
            "train_steps": 100,
        }
        row["series"] = {
            "seeds": [0, 1, 2],
            "evals": [
                {
                    "mode": "nonoverlapping",
                    "L_valid": 256,
                    "stride": None,
                    "interpolate": False,
                    "status": "ok",
                    "message": "",
                    "ppl": sum(values) / 3,
                    "ppl_by_seed": values,
                    "n_seeds": 3,
                }
            ],
        }
        rows.append(row)
    return rows


def test_frontier_section_of_a_seeded_time_budget_run(tmp_path):
    runs = load_runs(write_run(tmp_path, seeded_rows()), find_task=find_task)
    (table,) = frontier_tables(runs)
    assert table.title == "Frontier at L_valid = 256, time_s=60: best method and what beats what"
    assert table.rows[0] == "alibi, L_train=64" and table.cell("alibi, L_train=64", "verdict").text == "best"
    assert table.cell("alibi, L_train=64", "s / token").value == 0.001
    assert table.cell("alibi, L_train=64", "Pareto").text == "yes"
    assert table.cell("alibi, L_train=128", "Pareto").text == ""  # dearer and worse
    assert table.cell("sinusoidal, L_train=64", "verdict").text.startswith("worse beyond seed-level noise")
    assert table.cell("sinusoidal, L_train=128", "verdict").text.startswith(NOT_SEPARABLE)
    assert "95% t interval over seeds" in table.caption
    fig = frontier_chart(table)
    assert not any(line.get_gid() == "pareto" for line in fig.axes[0].lines)  # a single-point front: no line
    two = verdict_table(
        ("s", "cpu", "time_s=60", 256), [P("alibi", 64, [11.4, 11.6, 11.8], 1.0), P("sinusoidal", 128, [10.9, 11.0, 11.1], 2.0)]
    )
    (line,) = [line for line in frontier_chart(two).axes[0].lines if line.get_gid() == "pareto"]
    assert list(line.get_xdata()) == [1.0, 2.0] and list(line.get_ydata()) == [11.6, 11.0]
    section = [s for s in collect_sections(runs) if s.heading.startswith("Frontier")]
    assert len(section) == 1 and section[0].blocks[0].table.key == table.key


def test_no_frontier_for_a_plain_run(tmp_path):
    rows = seeded_rows()
    for r in rows:
        r["metrics"] = {"train_steps": 100}
        r["series"]["seeds"] = [0]
    runs = load_runs(write_run(tmp_path, rows), find_task=find_task)
    assert frontier_tables(runs) == []


def test_frontier_settings_evaluate_fixed_target_lengths():
    from posbench.tasks import get as get_task

    settings = get_task("extrapolation").Settings.model_validate(
        {"model": "tiny", "time_s": 30.0, "seeds": [0, 1, 2], "L_valid": [512, 128]}
    )
    assert settings.valid_lengths(64) == settings.valid_lengths(128) == [128, 512]  # the same for every L_train
    assert get_task("extrapolation").Settings.model_validate({"model": "tiny", "steps": 3}).valid_lengths(8) == [
        8,
        16,
        32,
        64,
        128,
    ]


def accuracy_rows(task, name, param, accs):
    """Rows of an accuracy task under time_s=60, three seeds: ``accs[(method, L)] = {length: [acc by seed]}``."""
    rows = []
    for (method, L), by_length in accs.items():
        row = base_row(task, task, method, {"L_train": L, param: name}, "run-a")
        row["metrics"] = {
            "budget_time_s": 60.0,
            "n_seeds": 3,
            "train_seconds": 60.0,
            "train_tokens": 30000.0 * 64 / L,
            "train_examples": 1000.0 * 64 / L,
            "peak_mem_train_bytes": 1e8,
        }
        row["series"] = {}
        for n, values in by_length.items():
            row["metrics"][f"acc@{n}"] = sum(values) / len(values)
            row["series"][f"acc@{n}_by_seed"] = values
        rows.append(row)
    return rows


def test_retrieval_accuracy_frontier_on_a_fixture(tmp_path):
    from posbench.tasks.retrieval.report import frontier_tables as retrieval_tables

    rows = accuracy_rows(
        "retrieval",
        "passkey",
        "probe",
        {
            ("alibi", 64): {64: [1.0, 1.0, 1.0], 128: [0.90, 0.92, 0.94]},
            ("rotary", 64): {64: [1.0, 1.0, 1.0], 128: [0.20, 0.25, 0.30]},
            ("alibi", 128): {128: [0.95, 0.93, 0.97]},
        },
    )
    runs = load_runs(write_run(tmp_path, rows), find_task=find_task)
    tables = {t.title: t for t in retrieval_tables(runs)}
    t = tables["Frontier of passkey at L_valid = 128, time_s=60: best method and what beats what"]
    # higher is better: alibi trained at 128 is best, alibi at 64 cheaper (half the s / token) and not separable
    assert t.rows == ["alibi, L_train=128", "alibi, L_train=64", "rotary, L_train=64"]
    assert t.cell("alibi, L_train=128", "verdict").text == "best"
    assert t.cell("alibi, L_train=64", "verdict").text.startswith(f"{NOT_SEPARABLE} from alibi, L_train=128 (3 of 3")
    assert t.cell("rotary, L_train=64", "verdict").text.startswith(
        "worse beyond seed-level noise: alibi, L_train=128 beats it, 3 of 3 seeds, acc 0.950 ["
    )
    assert t.cell("alibi, L_train=64", "s / token").value == 0.002
    assert [r for r in t.rows if t.cell(r, "Pareto").text == "yes"] == ["alibi, L_train=128", "alibi, L_train=64"]
    assert "higher is better" in t.caption and "serving ms / token" not in t.columns
    (line,) = [line for line in frontier_chart(t).axes[0].lines if line.get_gid() == "pareto"]
    assert list(line.get_xdata()) == [0.002, 0.004]
    section = [s for s in collect_sections(runs) if s.heading == "Frontier: retrieval accuracy against cost"]
    assert len(section) == 1 and len(section[0].blocks) == 2  # L_valid 64 and 128


def test_an_accuracys_seed_interval_is_cut_to_zero_and_one_and_keeps_its_verdict(tmp_path):
    """Two seeds at 0.2 and 1.0: the t interval (t = 12.7) is [-4.48, 5.68], printed on the ruler
    page as an accuracy's; cut to [0, 1] in the table, the verdict and the chart's error bar."""
    from posbench.tasks.retrieval.report import frontier_tables as retrieval_tables

    wide = {("alibi", 32): {64: [0.96, 0.98]}, ("nope", 32): {64: [0.2, 1.0]}, ("fox", 32): {64: [0.1, 0.3]}}
    runs = load_runs(write_run(tmp_path, accuracy_rows("retrieval", "multikey", "probe", wide)), find_task=find_task)
    (t,) = retrieval_tables(runs)
    assert t.cell("nope, L_train=32", "accuracy").text == "0.600 [0.000, 1.000]"
    assert t.cell("nope, L_train=32", "accuracy").spread == (0.0, 1.0)
    assert t.cell("alibi, L_train=32", "accuracy").text == "0.970 [0.843, 1.000]"  # 0.97 +- 0.127
    assert t.cell("nope, L_train=32", "verdict").text == (
        f"{NOT_SEPARABLE} from alibi, L_train=32 (1 of 2 seeds better), acc 0.970 [0.843, 1.000] vs 0.600 [0.000, 1.000]"
    )
    # fox's own interval, [-1.07, 1.47], cut to [0, 1], still overlaps alibi's: not separable as before
    assert t.cell("fox, L_train=32", "verdict").text.startswith(f"{NOT_SEPARABLE} from alibi")
    # unbounded (a perplexity), the same values keep the t interval
    assert P("nope", 32, [0.2, 1.0], 1.0).interval[3] < -4
    assert bounds_note([P("nope", 32, [0.2, 1.0], 1.0)]) == ""  # and its caption says nothing of bounds
    assert "Intervals are cut to [0, 1], the values it can take" in t.caption
    fig = frontier_chart(t)
    ys = [y for c in fig.axes[0].containers for seg in c.lines[2][0].get_segments() for _x, y in seg]
    assert len(ys) == 6 and min(ys) == 0.0 and max(ys) == 1.0  # three error bars, none beyond an accuracy's range
    said = " ".join(x.get_text().replace("\n", " ") for x in fig.texts)  # the caption, wrapped
    assert "bars: 95% t interval over seeds, cut to [0, 1]" in said
    plt.close("all")


def test_lengthgen_exact_match_frontier_on_a_fixture(tmp_path):
    from posbench.tasks.lengthgen.report import frontier_tables as lengthgen_tables

    rows = accuracy_rows(
        "lengthgen", "reverse", "task", {("alibi", 8): {16: [0.50, 0.60, 0.70]}, ("nope", 8): {16: [0.55, 0.45, 0.65]}}
    )
    runs = load_runs(write_run(tmp_path, rows), find_task=find_task)
    (t,) = lengthgen_tables(runs)
    assert t.title == "Frontier of reverse at n = 16, time_s=60: best method and what beats what"
    assert t.columns[:2] == ["exact match", "s / example"] and t.cell("nope, L_train=8", "s / example").value == 60.0 / 8000
    assert t.cell("alibi, L_train=8", "verdict").text == "best"
    # 0.60 [0.35, 0.85] vs 0.55 [0.30, 0.80]: the intervals overlap; alibi better in 2 of 3 seeds
    assert t.cell("nope, L_train=8", "verdict").text == (
        f"{NOT_SEPARABLE} from alibi, L_train=8 (2 of 3 seeds better), exact match 0.600 [0.352, 0.848] vs 0.550 [0.302, 0.798]"
    )
    assert any(s.heading == "Frontier: exact match against cost" for s in collect_sections(runs))


def test_frontier_shows_the_decode_cost_at_the_target_length(tmp_path):
    rows = seeded_rows()
    for r in rows:
        r["metrics"]["decode_tpot_ms@256"] = 2.0 if r["method"] == "alibi" else 3.0
    runs = load_runs(write_run(tmp_path, rows), find_task=find_task)
    (table,) = frontier_tables(runs)
    assert table.columns == ["perplexity", "s / token", "peak memory", "serving ms / token", "Pareto", "verdict"]
    assert table.cell("alibi, L_train=64", "serving ms / token").value == 2.0
    assert table.cell("sinusoidal, L_train=128", "serving ms / token").text == "3"
    assert "KV cache at context 256" in table.caption


def test_frontier_table_shows_the_decode_cost_spread_over_repeats(tmp_path):
    rows = seeded_rows()
    for r in rows:
        fast = r["method"] == "alibi"
        r["metrics"].update(
            {
                "decode_tpot_ms@256": 2.0 if fast else 3.0,
                "decode_tpot_ms_min@256": 1.8 if fast else 2.9,
                "decode_tpot_ms_max@256": 2.5 if fast else 3.6,
            }
        )
    runs = load_runs(write_run(tmp_path, rows), find_task=find_task)
    (table,) = frontier_tables(runs)
    cell = table.cell("alibi, L_train=64", "serving ms / token")
    assert (cell.text, cell.value, cell.spread) == ("2 [1.8, 2.5]", 2.0, (1.8, 2.5))
    assert table.cell("sinusoidal, L_train=128", "serving ms / token").text == "3 [2.9, 3.6]"
    assert "brackets: the fastest and slowest repeat" in table.caption


def test_frontier_table_says_a_single_pass_has_no_known_spread(tmp_path):
    rows = seeded_rows()
    for r in rows:
        r["metrics"]["decode_tpot_ms@256"] = 2.0  # a row of suite version 2: one pass, no repeats
    runs = load_runs(write_run(tmp_path, rows), find_task=find_task)
    (table,) = frontier_tables(runs)
    cell = table.cell("alibi, L_train=64", "serving ms / token")
    assert (cell.text, cell.spread) == ("2", None)
    assert "one pass: its spread is not known" in table.caption


# Honest cost axes: the frontier's starts at zero (or is a labelled log axis) with the costs' spread
# in the caption, and counts on line charts start at zero.


KEY = ("frontier", "CPU", "time_s=60", 512)


def costed_point(method, L, ppls, cost):
    return Point(method, L, dict(enumerate(ppls)), cost, 1e8)


def footer(fig) -> str:
    return " ".join(t.get_text() for t in fig.texts if t.get_gid() == "caption").replace("\n", " ")


def test_frontier_cost_axis_starts_at_zero_and_says_the_spread():
    # costs 3% apart: before, matplotlib zoomed the x axis onto them and they looked far apart
    table = verdict_table(
        KEY,
        [
            costed_point("alibi", 64, [10.0, 10.2, 10.4], 1.00e-4),
            costed_point("rotary", 64, [11.0, 11.2, 11.4], 1.03e-4),
            costed_point("sinusoidal", 64, [14.0, 14.5, 15.0], 1.01e-4),
        ],
    )
    fig = frontier_chart(table)
    (ax,) = fig.axes
    assert ax.get_xscale() == "linear" and ax.get_xlim()[0] == 0
    assert ax.get_xlim()[1] >= 1.03e-4  # every point inside
    assert "from zero" in ax.get_xlabel()
    assert "costs within 1.03x of the cheapest" in footer(fig)
    plt.close(fig)


def test_frontier_cost_axis_turns_log_when_costs_span_decades():
    table = verdict_table(
        KEY, [costed_point("alibi", 64, [10.0, 10.2, 10.4], 1e-5), costed_point("rotary", 128, [9.0, 9.2, 9.4], 1e-3)]
    )
    fig = frontier_chart(table)
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and "log scale" in ax.get_xlabel()
    assert "costs within 100.00x of the cheapest" in footer(fig)
    plt.close(fig)


def test_cost_axis_without_costs_is_left_alone():
    fig, ax = charts.new_figure()
    assert charts.cost_axis(ax, [None, float("nan"), 0.0]) == ("", False)
    assert ax.get_xscale() == "linear"
    plt.close(fig)


def test_count_line_chart_starts_at_zero():
    """Training steps under one time budget (a count of the compute each method got), 2% apart."""
    spec = TableSpec(task="extrapolation", metric="train_steps", unit="steps", fmt="int", column_header="L_train")
    table = Table(spec, key="steps", title="Training steps, frontier", columns=[64, 128], rows=["a", "b"])
    for row, base in (("a", 1000.0), ("b", 1020.0)):
        for col in table.columns:
            table.cells[(row, col)] = Cell(text=f"{base:g}", value=base)
    fig = charts.metric_chart(table)
    assert fig.axes[0].get_ylim()[0] == 0 and fig.axes[0].get_ylim()[1] >= 1020
    plt.close(fig)


def test_a_model_not_learnt_at_L_train_leaves_the_frontier_and_is_named(tmp_path):
    """Issue 66, learn first: sinusoidal at L_train 64 has 2x alibi's perplexity there, so it is
    no point of the frontier (never ranked) and the caption names it."""
    rows = seeded_rows()
    at_train = {("alibi", 64): 10.0, ("sinusoidal", 64): 20.0, ("alibi", 128): 10.0, ("sinusoidal", 128): 11.0}
    for row in rows:
        row["metrics"]["ppl_at_train_len"] = at_train[(row["method"], row["params"]["L_train"])]
    (table,) = frontier_tables(load_runs(write_run(tmp_path, rows), find_task=find_task))
    assert "sinusoidal, L_train=64" not in table.rows and len(table.rows) == 3
    assert "Left out, not learnt at L_train (perplexity at L_train at most 1.5x" in table.caption
    assert "sinusoidal at {'L_train': 64}" in table.caption and "has perplexity 20 at L_train (best 10)" in table.caption
