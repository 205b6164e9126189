"""The extrapolation task's frontier (``posbench.report.frontier``): per hardware, budget and
target length L_valid, each (method, L_train)'s perplexity (non-overlapping, over seeds) against
its cost (training seconds per token; peak training memory beside it), the Pareto front, the
verdict table and a chart. Shown for runs with a compute budget (time_s, flops) or several seeds.
"""
from __future__ import annotations

import math

from posbench.report import numbers as fmt
from posbench.report.charts import caption, fit, line_style, new_figure, perplexity_axis
from posbench.report.frontier import INTERVAL_NOTE, Point, pareto_front, verdicts
from posbench.report.rows import Runs
from posbench.report.sections import Block, Section
from posbench.report.table import Cell, Table, by_params, ordered, short_commit, slug, task_groups
from posbench.tasks.extrapolation.ppl_tables import evals

BUDGET_KINDS = ("time_s", "flops", "tokens", "steps")
COLUMNS = ["perplexity", "s / token", "peak memory", "Pareto", "verdict"]


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def budget_text(metrics: dict) -> str:
    """``time_s=60`` from a row's ``budget_<kind>``; older rows: ``steps=<train_steps>``."""
    for kind in BUDGET_KINDS:
        value = metrics.get(f"budget_{kind}")
        if _number(value):
            return f"{kind}={value:g}"
    steps = metrics.get("train_steps")
    return f"steps={steps:g}" if _number(steps) else "budget unknown"


def wanted(rows) -> bool:
    """Whether a run asks for a frontier: a compute budget (time or flops) or several seeds."""
    for r in rows:
        m = r.metrics if isinstance(r.metrics, dict) else {}
        if _number(m.get("budget_time_s")) or _number(m.get("budget_flops")) or (m.get("n_seeds") or 0) > 1:
            return True
    return False


def frontier_points(runs: Runs) -> dict[tuple, list[Point]]:
    """{(suite, hardware, budget, L_valid): [Point]} of the finished extrapolation rows that ask for
    a frontier: non-overlapping perplexity per seed at each L_valid, cost from the row's means."""
    out: dict[tuple, list[Point]] = {}
    for suite, hardware, group in task_groups(runs.rows, "extrapolation"):
        rows = [r for rs in by_params(group).values() for r in rs if r.status == "ok"]
        if not wanted(rows):
            continue
        for r in rows:
            m = r.metrics if isinstance(r.metrics, dict) else {}
            series = r.series if isinstance(r.series, dict) else {}
            seeds = series.get("seeds") if isinstance(series.get("seeds"), list) else [0]
            cost = m.get("train_s_per_token")
            if not _number(cost) and _number(m.get("train_seconds")) and _number(m.get("train_tokens")) \
                    and m["train_tokens"] > 0:
                cost = m["train_seconds"] / m["train_tokens"]
            for e in evals(r):
                if e.get("mode") != "nonoverlapping" or e.get("interpolate") or e.get("status") != "ok":
                    continue
                values = e.get("ppl_by_seed") if isinstance(e.get("ppl_by_seed"), list) else [e.get("ppl")]
                point = Point(r.method, r.params.get("L_train"), dict(zip(seeds, values)),
                              cost if _number(cost) else None,
                              m.get("peak_mem_train_bytes") if _number(m.get("peak_mem_train_bytes")) else None,
                              {"case_id": r.case_id, "run_id": r.run_id, "commit": r.git_commit})
                out.setdefault((suite, hardware, budget_text(m), e["L_valid"]), []).append(point)
    return out


def verdict_table(key: tuple, points: list[Point]) -> Table:
    """One budget and target length: a row per (method, L_train), best first."""
    suite, hardware, budget, lv = key
    best, against = verdicts(points)
    front = {p.label for p in pareto_front(points)}
    said = {v.other.label: v.text(fmt.ppl, "ppl") for v in against}
    order = sorted(points, key=lambda p: (p.quality is None, p.quality if p.quality is not None else 0.0))
    table = Table(key=slug(f"{suite}-frontier-{budget}-Lvalid{lv}-{hardware}"),
                  title=f"Frontier at L_valid = {lv}, {budget}: best method and what beats what", caption="",
                  task="extrapolation", metric="frontier", unit="perplexity", column_header="measure",
                  columns=list(COLUMNS), rows=[], hardware=hardware,
                  commit=short_commit(p.extra.get("commit") for p in points), higher_is_better=False,
                  extra={"L_valid": lv, "budget": budget, "points": points, "front": sorted(front)})
    for p in order:
        link = {"case_id": p.extra.get("case_id"), "run_id": p.extra.get("run_id")}
        table.rows.append(p.label)
        mean, _, n, lo, hi = p.interval
        text = "—" if not n else fmt.ppl(mean) + (f" [{fmt.ppl(lo)}, {fmt.ppl(hi)}]" if lo is not None else "")
        table.cells[(p.label, "perplexity")] = Cell(text=text, value=mean if n else None,
                                                    spread=(lo, hi) if lo is not None else None, **link)
        table.cells[(p.label, "s / token")] = Cell(text="—" if p.cost is None else f"{p.cost:.3g}", value=p.cost, **link)
        table.cells[(p.label, "peak memory")] = Cell(text="—" if p.memory is None else fmt.number(p.memory, "bytes"),
                                                     value=p.memory, **link)
        table.cells[(p.label, "Pareto")] = Cell(text="yes" if p.label in front else "", **link)
        verdict = "best" if best is not None and p is best else said.get(p.label, "no perplexity")
        table.cells[(p.label, "verdict")] = Cell(text=verdict, **link)
    table.caption = (f"Non-overlapping perplexity at L_valid = {lv} (lower is better, mean over seeds) of every "
                     f"method and L_train trained under {budget}, against its cost: training seconds per token "
                     "and peak training memory measured in the same run. Pareto: no other row is both cheaper "
                     f"(s / token) and better. {INTERVAL_NOTE} {hardware}, commit {table.commit}.")
    return table


def frontier_chart(table: Table):
    """Perplexity against training seconds per token, a point per (method, L_train), seed
    intervals as error bars, the Pareto front as a line."""
    fig, ax = new_figure()
    points = table.extra["points"]
    methods = ordered(p.method for p in points)
    markers = {}
    for p in points:
        mean, _, n, lo, hi = p.interval
        if not n or p.cost is None:
            continue
        style = line_style(methods.index(p.method))
        err = [[mean - lo], [hi - mean]] if lo is not None else None
        bar = ax.errorbar([p.cost], [mean], yerr=err, color=style["color"], marker=style["marker"], linestyle="none",
                          markersize=7 if p.L_train == max(q.L_train for q in points) else 5, capsize=3,
                          label=p.method if p.method not in markers else None)
        markers[p.method] = bar
        ax.annotate(f"L={p.L_train}", (p.cost, mean), fontsize=7, xytext=(4, 4), textcoords="offset points")
    front = pareto_front(points)
    if len(front) > 1:
        ax.plot([p.cost for p in front], [p.quality for p in front], color="0.3", linestyle="--", linewidth=1,
                label="Pareto front", gid="pareto")
    perplexity_axis(ax)
    ax.set(xlabel="Training seconds per token (cost)", ylabel="Perplexity (lower is better, log scale)")
    ax.set_title(table.title, fontsize=9, wrap=True)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=8)
    caption(fig, table.hardware, table.commit, "bars: 95% t interval over seeds; dashed: the Pareto front")
    fit(fig)
    return fig


def frontier_tables(runs: Runs) -> list[Table]:
    """A verdict table per (suite, hardware, budget, L_valid) of the runs that ask for a frontier."""
    return [verdict_table(key, points) for key, points in frontier_points(runs).items()]


def frontier_sections(runs: Runs) -> list[Section]:
    """The report's frontier section: each verdict table with its chart (none when no run asks)."""
    blocks = []
    for table in frontier_tables(runs):
        blocks.append(Block(table, [lambda t=table: [(t.key, t.title, frontier_chart(t))]]))
    return [Section("Frontier: perplexity against cost", "extrapolation", blocks)] if blocks else []
