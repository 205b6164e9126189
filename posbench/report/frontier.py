"""The frontier: each method's quality against its cost at one target length and budget, the
Pareto front, and the verdict (which method is best, and is each difference beyond the seed-level
noise), with its verdict table and chart. Task-neutral: a task names its ``Quality`` and how a row
gives its values per target length (``frontier_points``). docs/tasks/frontier.md.

Separable: two methods differ beyond the seed-level noise when their 95% t intervals over seeds
(``posbench.report.stats.seed_interval``) do not overlap; otherwise "not separable". The verdict
also says in how many seeds (paired by seed) the better one won.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from posbench.report import numbers as fmt
from posbench.report.grouping import by_params, ordered, short_commit, task_groups
from posbench.report.names import slug
from posbench.report.rows import Runs
from posbench.report.sections import Block, Section
from posbench.report.stats import SEED_INTERVAL, seed_interval
from posbench.report.table import Cell, Table, TableSpec

NOT_SEPARABLE = "not separable"


@dataclass
class Point:
    """One (method, L_train) at one target length and budget: its quality over seeds and its cost."""

    method: str
    L_train: int
    by_seed: dict  # seed -> quality (None where that seed has none)
    cost: float | None  # the cost axis: mean over seeds (e.g. training seconds per token)
    memory: float | None = None  # peak training memory (bytes), mean over seeds
    extra: dict = field(default_factory=dict)
    serving: float | None = None  # serving cost at the target length: ms per generated token, KV cache
    serving_range: tuple[float, float] | None = None  # its fastest and slowest repeat (ms)
    bounds: tuple[float, float] | None = None  # the values the quality can take (accuracy: 0 to 1)

    @property
    def label(self) -> str:
        return f"{self.method}, L_train={self.L_train}"

    @property
    def interval(self) -> tuple[float, float, int, float | None, float | None]:
        """(mean, std, seeds, low, high): the quality's 95% t interval over seeds, cut to ``bounds``.
        Over 2 seeds a t interval of an accuracy reached -2.7 and 4.1 on the ruler page: values no accuracy
        takes. Cutting both intervals to one range keeps every overlap (so every verdict)."""
        mean, std, n, lo, hi = seed_interval(list(self.by_seed.values()))
        if self.bounds is not None and lo is not None:
            floor, ceiling = self.bounds
            lo, hi = min(max(lo, floor), ceiling), max(min(hi, ceiling), floor)
        return mean, std, n, lo, hi

    @property
    def quality(self) -> float | None:
        mean, _, n, _, _ = self.interval
        return mean if n else None


def better(a: float, b: float, lower_is_better: bool) -> bool:
    return a < b if lower_is_better else a > b


def pareto_front(points: list[Point], lower_is_better: bool = True) -> list[Point]:
    """The points no other point dominates (at most the cost and at least as good a quality, and
    strictly better in one), by ascending cost. Points without a quality or a cost are left out."""
    usable = [p for p in points if p.quality is not None and p.cost is not None and math.isfinite(p.cost)]

    def dominates(a: Point, b: Point) -> bool:
        no_worse = a.cost <= b.cost and not better(b.quality, a.quality, lower_is_better)
        return no_worse and (a.cost < b.cost or better(a.quality, b.quality, lower_is_better))

    front = [p for p in usable if not any(dominates(q, p) for q in usable if q is not p)]
    return sorted(front, key=lambda p: (p.cost, p.quality if lower_is_better else -p.quality))


@dataclass
class Verdict:
    """The best point against one other: whether it is worse beyond the seed-level noise."""

    best: Point
    other: Point
    separable: bool
    wins: int  # seeds (paired by seed) where best was better
    paired: int  # seeds both have

    def text(self, fmt=lambda v: f"{v:.2f}", name: str = "") -> str:
        """``alibi beats sinusoidal, 3 of 3 seeds, ppl 11.60 [11.40, 11.80] vs 15.20 [14.70, 15.90]``,
        or ``not separable from alibi (2 of 3 seeds), ...``."""

        def shown(p: Point) -> str:
            mean, _, n, lo, hi = p.interval
            return fmt(mean) + (f" [{fmt(lo)}, {fmt(hi)}]" if lo is not None else "")

        numbers = f"{name + ' ' if name else ''}{shown(self.best)} vs {shown(self.other)}"
        if self.separable:
            return f"worse beyond seed-level noise: {self.best.label} beats it, {self.wins} of {self.paired} seeds, {numbers}"
        return f"{NOT_SEPARABLE} from {self.best.label} ({self.wins} of {self.paired} seeds better), {numbers}"


def compare_points(best: Point, other: Point, lower_is_better: bool = True) -> Verdict:
    """``best`` against ``other``: separable when both have an interval over seeds and they do not
    overlap (``best``'s wholly better); a single seed is never separable."""
    _, _, _, blo, bhi = best.interval
    _, _, _, olo, ohi = other.interval
    if blo is None or olo is None:
        separable = False
    else:
        separable = bhi < olo if lower_is_better else blo > ohi
    seeds = [
        s
        for s in best.by_seed
        if isinstance(best.by_seed.get(s), (int, float)) and isinstance(other.by_seed.get(s), (int, float))
    ]
    wins = sum(better(best.by_seed[s], other.by_seed[s], lower_is_better) for s in seeds)
    return Verdict(best, other, separable, wins, len(seeds))


def verdicts(points: list[Point], lower_is_better: bool = True) -> tuple[Point | None, list[Verdict]]:
    """(the best point by mean quality, its verdict against every other point with a quality)."""
    usable = [p for p in points if p.quality is not None]
    if not usable:
        return None, []
    best = (min if lower_is_better else max)(usable, key=lambda p: p.quality)
    return best, [compare_points(best, p, lower_is_better) for p in usable if p is not best]


INTERVAL_NOTE = (
    f"Brackets: the {SEED_INTERVAL} of the mean; 'worse beyond seed-level noise' when the best "
    f"point's interval and this one's do not overlap, else '{NOT_SEPARABLE}'; 'k of n seeds': the seeds "
    "(paired by seed) in which the best point did better."
)


# -- a task's frontier: its quality, its points from rows, the verdict table and the chart ---------

BUDGET_KINDS = ("time_s", "flops", "tokens", "steps")
SERVING = "serving ms / token"


@dataclass(frozen=True)
class Quality:
    """What a task's frontier puts against cost, and how it reads."""

    task: str
    name: str  # the column and the axis: "perplexity", "accuracy"
    short: str  # in a verdict: "ppl", "acc"
    target: str  # the target length's name: "L_valid", "n"
    lower_is_better: bool
    fmt: Callable[[float], str]
    describe: str  # the caption's first words: "Non-overlapping perplexity"
    cost_unit: str = "s / token"  # training seconds per token (or per example)
    log_axis: bool = False

    @property
    def reads(self) -> str:
        return "lower is better" if self.lower_is_better else "higher is better"

    @property
    def table_spec(self) -> TableSpec:
        """The frontier tables of this quality: a row per (method, L_train), a column per measure."""
        return TableSpec(
            task=self.task, metric="frontier", unit=self.name, column_header="measure", higher_is_better=not self.lower_is_better
        )


def fraction(v: float) -> str:
    """An accuracy as the frontier shows it: three decimals, so intervals line up."""
    return f"{v:.3f}"


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def budget_text(metrics: dict) -> str:
    """``time_s=60`` from a row's ``budget_<kind>``; older rows: ``steps=<train_steps>``."""
    for kind in BUDGET_KINDS:
        value = metrics.get(f"budget_{kind}")
        if is_number(value):
            return f"{kind}={value:g}"
    steps = metrics.get("train_steps")
    return f"steps={steps:g}" if is_number(steps) else "budget unknown"


def wanted(rows) -> bool:
    """Whether a run asks for a frontier: a compute budget (time or flops) or several seeds."""
    for r in rows:
        m = r.metrics if isinstance(r.metrics, dict) else {}
        if is_number(m.get("budget_time_s")) or is_number(m.get("budget_flops")) or (m.get("n_seeds") or 0) > 1:
            return True
    return False


def per_unit(metrics: dict, seconds: str, units: str) -> float | None:
    """``metrics[seconds] / metrics[units]`` (training seconds per token or example), None without both."""
    s, n = metrics.get(seconds), metrics.get(units)
    return s / n if is_number(s) and is_number(n) and n > 0 else None


# (target length, {seed: quality}, serving cost: None, ms per token, or (median, fastest, slowest) over repeats)
Cells = Callable[[object], Iterable[tuple[int, dict, object]]]


def serving_parts(serving) -> tuple[float | None, tuple[float, float] | None]:
    """(ms per token, (fastest, slowest) or None) of a cell's serving cost; non-numbers are None."""
    if isinstance(serving, tuple):
        ms, low, high = serving
        spread = (low, high) if is_number(ms) and is_number(low) and is_number(high) else None
        return (ms if is_number(ms) else None), spread
    return (serving if is_number(serving) else None), None


def frontier_points(
    runs: Runs,
    task: str,
    cells: Cells,
    cost: Callable[[dict], float | None],
    of: Callable[[object], str] = lambda r: "",
    bounds: tuple[float, float] | None = None,
) -> dict[tuple, list[Point]]:
    """{(suite, hardware, budget, of, target): [Point]} of the finished ``task`` rows of runs that
    ask for a frontier. ``cells(row)`` yields (target length, {seed: quality}, serving cost: see ``Cells``);
    ``cost(metrics)`` is the row's cost; ``of(row)`` what else a frontier is drawn per (a probe);
    ``bounds`` the values a quality can take (``ACCURACY``), its intervals cut to them."""
    out: dict[tuple, list[Point]] = {}
    for suite, hardware, group in task_groups(runs.rows, task):
        rows = [r for rs in by_params(group).values() for r in rs if r.status == "ok"]
        if not wanted(rows):
            continue
        for r in rows:
            m = r.metrics if isinstance(r.metrics, dict) else {}
            c = cost(m)
            memory = m.get("peak_mem_train_bytes")
            for target, by_seed, serving in cells(r):
                point = Point(
                    r.method,
                    r.params.get("L_train"),
                    by_seed,
                    c if is_number(c) else None,
                    memory if is_number(memory) else None,
                    {"case_id": r.case_id, "run_id": r.run_id, "commit": r.git_commit},
                    *serving_parts(serving),
                    bounds=bounds,
                )
                out.setdefault((suite, hardware, budget_text(m), of(r), target), []).append(point)
    return out


def seed_values(row, metric: str) -> dict:
    """{seed: value} of ``metric`` in a row: each seed's (``series["<metric>_by_seed"]``, seeds from
    ``series["seeds"]`` or counted) or, for a single seed, the row's own."""
    series = row.series if isinstance(row.series, dict) else {}
    metrics = row.metrics if isinstance(row.metrics, dict) else {}
    values = series.get(f"{metric}_by_seed")
    if not isinstance(values, list):
        return {0: metrics.get(metric) if is_number(metrics.get(metric)) else None}
    seeds = series.get("seeds") if isinstance(series.get("seeds"), list) else list(range(len(values)))
    return {s: v if is_number(v) else None for s, v in zip(seeds, values)}


ACCURACY = (0.0, 1.0)  # the bounds of an accuracy (``frontier_points``)


def accuracy_cells(row):
    """(length, {seed: accuracy}, None) of every ``acc@<length>`` of a row, shortest first."""
    metrics = row.metrics if isinstance(row.metrics, dict) else {}
    lengths = sorted(int(k[4:]) for k in metrics if k.startswith("acc@") and k[4:].isdigit())
    for n in lengths:
        yield n, seed_values(row, f"acc@{n}"), None


def frontier_table(q: Quality, suite: str, hardware: str, budget: str, target: int, points: list[Point], of: str = "") -> Table:
    """One budget and target length: a row per (method, L_train), best first."""
    best, against = verdicts(points, q.lower_is_better)
    front = {p.label for p in pareto_front(points, q.lower_is_better)}
    said = {v.other.label: v.text(q.fmt, q.short) for v in against}
    sign = 1 if q.lower_is_better else -1
    order = sorted(points, key=lambda p: (p.quality is None, sign * p.quality if p.quality is not None else 0.0))
    serving = any(p.serving is not None for p in points)
    columns = [q.name, q.cost_unit, "peak memory"] + ([SERVING] if serving else []) + ["Pareto", "verdict"]
    where = f"{q.target} = {target}"
    table = Table(
        q.table_spec,
        key=slug(f"{suite}-frontier-{of + '-' if of else ''}{budget}-{q.target.replace('_', '')}{target}-{hardware}"),
        title=f"Frontier{' of ' + of if of else ''} at {where}, {budget}: best method and what beats what",
        columns=columns,
        hardware=hardware,
        commit=short_commit(p.extra.get("commit") for p in points),
        extra={q.target: target, "budget": budget, "points": points, "front": sorted(front), "quality": q},
    )
    for p in order:
        link = {"case_id": p.extra.get("case_id"), "run_id": p.extra.get("run_id")}
        table.rows.append(p.label)
        mean, _, n, lo, hi = p.interval
        text = "—" if not n else q.fmt(mean) + (f" [{q.fmt(lo)}, {q.fmt(hi)}]" if lo is not None else "")
        table.cells[(p.label, q.name)] = Cell(
            text=text, value=mean if n else None, spread=(lo, hi) if lo is not None else None, **link
        )
        table.cells[(p.label, q.cost_unit)] = Cell(text="—" if p.cost is None else f"{p.cost:.3g}", value=p.cost, **link)
        table.cells[(p.label, "peak memory")] = Cell(
            text="—" if p.memory is None else fmt.number(p.memory, "bytes"), value=p.memory, **link
        )
        if serving:
            table.cells[(p.label, SERVING)] = serving_cell(p, link)
        table.cells[(p.label, "Pareto")] = Cell(text="yes" if p.label in front else "", **link)
        verdict = "best" if best is not None and p is best else said.get(p.label, f"no {q.name}")
        table.cells[(p.label, "verdict")] = Cell(text=verdict, **link)
    serving_note = serving_caption(points, target) if serving else ""
    table.caption = (
        f"{q.describe}{' of ' + of if of else ''} at {where} ({q.reads}, mean over seeds) of every "
        f"method and L_train trained under {budget}, against its cost: training {q.cost_unit.replace(' / ', ' per ')} "
        "and peak training memory measured in the same run. Pareto: no other row is both cheaper "
        f"({q.cost_unit}) and better.{serving_note} {INTERVAL_NOTE}{bounds_note(points)} {hardware}, commit {table.commit}."
    )
    return table


def serving_cell(p: Point, link: dict) -> Cell:
    """The serving cost of a point: ``1.02 [0.95, 1.10]`` (median [fastest, slowest repeat]), or one pass's."""
    if p.serving is None:
        return Cell(text="—", **link)
    text = f"{p.serving:.3g}" + (f" [{p.serving_range[0]:.3g}, {p.serving_range[1]:.3g}]" if p.serving_range else "")
    return Cell(text=text, value=p.serving, spread=p.serving_range, **link)


def bounds_of(points: list[Point]) -> str:
    """The range a bounded quality's intervals were cut to, as "[0, 1]" ("" when unbounded)."""
    bounds = next((p.bounds for p in points if p.bounds is not None), None)
    return "" if bounds is None else f"[{bounds[0]:g}, {bounds[1]:g}]"


def bounds_note(points: list[Point]) -> str:
    """The table caption's sentence on what a bounded quality's brackets were cut to ("" when unbounded)."""
    cut = bounds_of(points)
    return (
        f" Intervals are cut to {cut}, the values it can take (a t interval over 2 or 3 seeds reaches past them)." if cut else ""
    )


def serving_caption(points: list[Point], target: int) -> str:
    head = f" Serving: milliseconds per generated token with a KV cache at context {target}"
    if any(p.serving_range for p in points):
        return (
            f"{head}, the median over repeats of each repeat's median step, brackets: the fastest and slowest "
            "repeat; measured per method and L_train in the same run."
        )
    return (
        f"{head} (median over the timed steps), measured once per method and L_train in the same run (one "
        "pass: its spread is not known)."
    )


def frontier_chart(table: Table):
    """Quality against training cost (from zero; the caption gives the costs' spread), a point per
    (method, L_train), seed intervals as error bars, the Pareto front as a line."""
    from posbench.report.charts import caption, cost_axis, fit, line_style, new_figure, perplexity_axis

    q: Quality = table.extra["quality"]
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
        bar = ax.errorbar(
            [p.cost],
            [mean],
            yerr=err,
            color=style["color"],
            marker=style["marker"],
            linestyle="none",
            markersize=7 if p.L_train == max(q_.L_train for q_ in points) else 5,
            capsize=3,
            label=p.method if p.method not in markers else None,
        )
        markers[p.method] = bar
        ax.annotate(f"L={p.L_train}", (p.cost, mean), fontsize=7, xytext=(4, 4), textcoords="offset points")
    front = pareto_front(points, q.lower_is_better)
    if len(front) > 1:
        ax.plot(
            [p.cost for p in front],
            [p.quality for p in front],
            color="0.3",
            linestyle="--",
            linewidth=1,
            label="Pareto front",
            gid="pareto",
        )
    if q.log_axis:
        perplexity_axis(ax)
    spread, log_cost = cost_axis(ax, [p.cost for p in points if p.quality is not None])
    unit = q.cost_unit.replace("s / ", "seconds per ")
    ax.set(
        xlabel=f"Training {unit} (cost{', log scale' if log_cost else ', from zero'})",
        ylabel=f"{q.name.capitalize()} ({q.reads}{', log scale' if q.log_axis else ''})",
    )
    ax.set_title(table.title, fontsize=9, wrap=True)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=8)
    cut = bounds_of(points)
    bars = "bars: 95% t interval over seeds" + (f", cut to {cut}" if cut else "")
    caption(
        fig,
        table.hardware,
        table.commit,
        "; ".join(n for n in (spread, bars, "dashed: the Pareto front") if n),
    )
    fit(fig)
    return fig


def frontier_section(heading: str, task: str, tables: list[Table]) -> list[Section]:
    """The report's frontier section of a task: each verdict table with its chart (none without tables)."""
    blocks = [Block(t, [lambda t=t: [(t.key, t.title, frontier_chart(t))]]) for t in tables]
    return [Section(heading, task, blocks)] if blocks else []
