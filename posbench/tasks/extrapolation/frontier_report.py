"""The extrapolation report's frontier (``posbench.report.frontier``): for runs with a compute
budget or several seeds, per hardware, budget and target length L_valid, each (method, L_train)'s
perplexity (non-overlapping, over seeds) against its cost (training seconds per token; peak
training memory and, when measured, the decode cost at L_valid beside it), the Pareto front, the
verdict table and a chart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from posbench.protocols.decode_cost import TPOT, TPOT_MAX, TPOT_MIN
from posbench.protocols.train_eval.evaluations import evals
from posbench.report import numbers as fmt
from posbench.report.rows import Runs

if TYPE_CHECKING:
    from posbench.report.frontier import Point, Quality
    from posbench.report.sections import Section
    from posbench.report.table import Table

# The report's modules (pandas, matplotlib) are imported inside the functions: the task's
# declaration imports this module, and `bench.py validate` must not wait for them.

DECODE_METRICS = (TPOT, TPOT_MIN, TPOT_MAX)  # + L_valid: the decode cost, its fastest and slowest repeat


def frontier_quality() -> Quality:
    """The frontier's quality axis: non-overlapping perplexity at each target length L_valid."""
    from posbench.report.frontier import Quality

    return Quality("extrapolation", "perplexity", "ppl", "L_valid", True, fmt.ppl, "Non-overlapping perplexity", log_axis=True)


def cost(metrics: dict):
    """Training seconds per token: the row's, else its seconds over its tokens."""
    from posbench.report.frontier import per_unit

    return (
        metrics.get("train_s_per_token")
        if metrics.get("train_s_per_token") is not None
        else per_unit(metrics, "train_seconds", "train_tokens")
    )


def cells(row):
    """(L_valid, {seed: non-overlapping perplexity}, (decode ms per token, fastest, slowest repeat) at L_valid)."""
    series = row.series if isinstance(row.series, dict) else {}
    metrics = row.metrics if isinstance(row.metrics, dict) else {}
    seeds = series.get("seeds") if isinstance(series.get("seeds"), list) else [0]
    for e in evals(row):
        if e.get("mode") != "nonoverlapping" or e.get("interpolate") or e.get("status") != "ok":
            continue
        values = e.get("ppl_by_seed") if isinstance(e.get("ppl_by_seed"), list) else [e.get("ppl")]
        yield e["L_valid"], dict(zip(seeds, values)), tuple(metrics.get(f"{m}{e['L_valid']}") for m in DECODE_METRICS)


def frontier_points(runs: Runs) -> dict[tuple, list[Point]]:
    """{(suite, hardware, budget, L_valid): [Point]} of the finished extrapolation rows that ask for
    a frontier: non-overlapping perplexity per seed at each L_valid, cost from the row's means.
    Learn first: a row that did not learn at L_train (``learn_first.not_learnt_rows``) is no point
    of it; ``left_out`` names it under the table."""
    from posbench.report.frontier import frontier_points as points_of

    weak = not_learnt(runs)
    return {
        (suite, hw, budget, lv): [p for p in pts if (p.extra.get("run_id"), p.extra.get("case_id")) not in weak]
        for (suite, hw, budget, _, lv), pts in points_of(runs, "extrapolation", cells, cost).items()
    }


def not_learnt(runs: Runs) -> dict[tuple, str]:
    """(run id, case id) -> a few words, for each extrapolation row that did not learn at L_train."""
    from posbench.report.learn_first import not_learnt_rows

    frame = runs.rows
    if frame is None or frame.empty:
        return {}
    rows = frame[frame["task"] == "extrapolation"].to_dict("records")
    run_of = {(r["source"], r["case_id"]): r["run_id"] for r in rows}
    return {(run_of[key], key[1]): words for key, words in not_learnt_rows(rows).items()}


def left_out(runs: Runs, key: tuple) -> list[str]:
    """The not-learnt rows a frontier at ``key`` (suite, hardware, budget, L_valid) leaves out."""
    from posbench.report.frontier import frontier_points as points_of

    weak = not_learnt(runs)
    out = []
    for (suite, hw, budget, _, lv), pts in points_of(runs, "extrapolation", cells, cost).items():
        if (suite, hw, budget, lv) == key:
            out += [weak[k] for k in dict.fromkeys((p.extra.get("run_id"), p.extra.get("case_id")) for p in pts) if k in weak]
    return out


def verdict_table(key: tuple, points: list[Point]) -> Table:
    """One budget and target length ``(suite, hardware, budget, L_valid)``: a row per (method, L_train), best first."""
    from posbench.report.frontier import frontier_table

    suite, hardware, budget, lv = key
    return frontier_table(frontier_quality(), suite, hardware, budget, lv, points)


def frontier_tables(runs: Runs) -> list[Table]:
    """A verdict table per (suite, hardware, budget, L_valid) of the runs that ask for a frontier;
    its caption names the rows left out as not learnt at L_train (learn first)."""
    from posbench.report.learn_first import NOT_LEARNT, PPL_RULE

    tables = []
    for key, points in frontier_points(runs).items():
        if not points:  # every row there failed learn first: nothing to rank
            continue
        table = verdict_table(key, points)
        weak = left_out(runs, key)
        if weak:
            table.caption += f" Left out, {NOT_LEARNT} ({PPL_RULE}): {'; '.join(weak)}."
        tables.append(table)
    return tables


def frontier_sections(runs: Runs) -> list[Section]:
    """The report's frontier section: each verdict table with its chart (none when no run asks)."""
    from posbench.report.frontier import frontier_section

    return frontier_section("Frontier: perplexity against cost", "extrapolation", frontier_tables(runs))
