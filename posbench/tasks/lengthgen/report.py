"""The lengthgen task's report, from result rows alone: per algorithmic task, methods x test
length, exact-match accuracy with its Wilson interval (recomputed from the rows' counts), the
accuracy beyond L_train and the learn-first marking; the frontier of exact match against cost.
Details: docs/tasks/lengthgen.md.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from posbench.report.learn_first import NOT_LEARNT, comparability, learned, learned_over_seeds
from posbench.report.names import slug
from posbench.report.rows import Runs
from posbench.report.stats import SEED_INTERVAL, pooled_counts, seed_accuracies, seed_interval, wilson_interval
from posbench.report.table import Cell, Table, TableSpec
from posbench.tasks.lengthgen.run import beyond

# The report's row grouping and sections import pandas and matplotlib, so they are imported inside
# the functions: validating or listing suites imports this module, and must not wait for them.
if TYPE_CHECKING:
    from posbench.report.sections import Section

TITLE = "Length generalisation (algorithmic tasks)"
MAX_COUNT = 1 << 53
BEYOND, LEARNT = "beyond L_train", "learnt at L_train"

# An algorithmic task's accuracy table, methods x test length n; each names its task in the
# metric (``acc <task>``).
TASK_ACCURACY = TableSpec(
    task="lengthgen", metric="acc", unit="fraction", column_header="n (input length)", higher_is_better=True
)


def report_sections(runs: Runs, baseline: str | None = None) -> list[Section]:
    """The metric tables of ``METRICS``, then per algorithmic task the accuracy per test length
    with Wilson intervals and the learn-first marking, then the frontier."""
    from posbench.report.sections import Block, Section, metric_section

    records = runs.rows[runs.rows["task"] == "lengthgen"].to_dict("records")
    blocks = [Block(t, [], heading=t.metric.removeprefix("acc ")) for t in accuracy_tables(records)]
    accuracy = Section("Length generalisation: accuracy per length (Wilson 95% intervals)", "lengthgen", blocks)
    return [metric_section(runs, "lengthgen", baseline), accuracy] + frontier_sections(runs)


def summary_tables(runs: Runs) -> list[Table]:
    """Per algorithmic task: methods x test length accuracy with its interval, then the frontier's
    verdict tables, printed at the end of a run."""
    return accuracy_tables(runs.rows[runs.rows["task"] == "lengthgen"].to_dict("records")) + frontier_tables(runs)


def _whole(value, low: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= MAX_COUNT


def cells(row) -> list[dict]:
    """The well-formed entries of a stored row's ``series["cells"]`` (``n`` a positive whole
    number, ``0 <= correct <= total`` whole numbers, ``status`` a string); others are left out."""
    series = row.get("series") if isinstance(row.get("series"), dict) else {}
    stored = series.get("cells")
    return [
        c
        for c in (stored if isinstance(stored, list) else [])
        if isinstance(c, dict)
        and _whole(c.get("n"), 1)
        and _whole(c.get("total"))
        and _whole(c.get("correct"))
        and c["correct"] <= c["total"]
        and isinstance(c.get("status", "ok"), str)
    ]


def _threshold(row, default: float = 0.9) -> float:
    series = row.get("series") if isinstance(row.get("series"), dict) else {}
    t = series.get("learned_threshold", default)
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) and 0 <= t <= 1 else default


def _ok_rows(rows):
    for r in rows:
        if r.get("status", "ok") != "ok" or r.get("task", "lengthgen") != "lengthgen":
            continue
        params = r.get("params") if isinstance(r.get("params"), dict) else {}
        if isinstance(params.get("task"), str) and _whole(params.get("L_train"), 1):
            yield r


def _pooled(rows) -> dict[int, tuple[int, int, bool]]:
    """n -> (correct, total, every cell ok), pooled over the rows' cells."""
    return pooled_counts([c for r in rows for c in cells(r)], "n")


def _text(k: int, total: int, by_seed: dict | None = None) -> tuple[str, float, tuple[float, float]]:
    """``30% [11, 60]`` (Wilson 95%), then `` seeds [25, 35]`` (95% t interval over seeds) when
    ``by_seed`` holds two or more seeds' accuracies."""
    lo, hi = wilson_interval(k, total)
    acc = k / total
    text = f"{100 * acc:.0f}% [{100 * lo:.0f}, {100 * hi:.0f}]"
    if by_seed and len(by_seed) > 1:
        _, _, _, slo, shi = seed_interval(list(by_seed.values()))
        if slo is not None:  # an accuracy's interval, clipped to [0, 1]
            text += f" seeds [{100 * max(0.0, slo):.0f}, {100 * min(1.0, shi):.0f}]"
    return text, acc, (lo, hi)


def _beyond_by_seed(cells_of: list[dict], L: int) -> dict:
    """{seed: accuracy pooled over every n > L} of the cells that name a seed."""
    return seed_accuracies([dict(c, n=0) for c in cells_of if c["n"] > L], "n").get(0, {})


def task_table(rows: list[dict], task: str) -> Table:
    """Methods (with L_train when there are several) x test length n for one algorithmic task."""
    from posbench.report.grouping import short_commit

    ok = [r for r in _ok_rows(rows) if r["params"]["task"] == task]
    groups: dict[tuple[str, int], list] = {}
    for r in ok:
        groups.setdefault((r["method"], r["params"]["L_train"]), []).append(r)
    pooled = {key: _pooled(rs) for key, rs in groups.items()}
    lengths = sorted({n for p in pooled.values() for n in p})
    several = len({L for _, L in groups}) > 1
    hardware = next((r.get("hardware") for r in ok if r.get("hardware")), "")
    threshold = _threshold(ok[0]) if ok else 0.9
    out = Table(
        replace(TASK_ACCURACY, metric=f"acc {task}"),
        key=slug(f"lengthgen-{task}-accuracy-{hardware}"),
        title="",
        caption="",
        columns=lengths + [BEYOND, LEARNT],
        rows=[],
        hardware=hardware,
        commit=short_commit(r.get("git_commit") for r in ok),
        pooled=True,
    )  # counts of every run of a case pooled: no run supersedes another
    verdicts, seeds_learnt = {}, {}
    for (method, L), rs in groups.items():
        label = f"{method}, L_train={L}" if several else method
        out.rows.append(label)
        link = {"case_id": rs[0].get("case_id"), "run_id": rs[0].get("run_id")}
        counts = pooled[(method, L)]
        all_cells = [c for r in rs for c in cells(r)]
        per_seed = seed_accuracies(all_cells, "n")  # n -> {seed: accuracy}: several training seeds
        for n in lengths:
            k, total, fine = counts.get(n, (0, 0, False))
            if not (fine and total):
                out.cells[(label, n)] = Cell(text="-", status="missing", **link)
                continue
            text, acc, spread = _text(k, total, per_seed.get(n))
            out.cells[(label, n)] = Cell(text=text, value=acc, spread=spread, **link)
        at_L = counts.get(L)
        verdict = learned(at_L[0] / at_L[1], threshold) if at_L and at_L[2] and at_L[1] else None
        if len(per_seed.get(L, {})) > 1:  # learn first, per seed
            seed_verdicts = [learned(a, threshold) for a in per_seed[L].values()]
            verdict = learned_over_seeds(seed_verdicts)
            seeds_learnt[label] = (sum(v is True for v in seed_verdicts), len(seed_verdicts))
        verdicts[label] = verdict
        out.cells[(label, LEARNT)] = Cell(
            text={True: "yes", False: "no", None: "-"}[verdict], value=None if verdict is None else float(verdict), **link
        )
        k, total, usable = beyond(counts, L)
        if verdict is False:
            out.cells[(label, BEYOND)] = Cell(text=NOT_LEARNT, **link)
        elif usable:
            text, acc, spread = _text(k, total, _beyond_by_seed(all_cells, L))
            out.cells[(label, BEYOND)] = Cell(text=text, value=acc, spread=spread, **link)
        else:
            out.cells[(label, BEYOND)] = Cell(text="-", status="missing", **link)
    comp = comparability(verdicts, threshold, seeds_learnt)
    source = next(
        (
            r["series"].get("source")
            for r in ok
            if isinstance(r.get("series"), dict) and isinstance(r["series"].get("source"), str)
        ),
        "",
    )
    out.title = f"{task}: exact-match accuracy per length n (Wilson 95% interval){comp.title_suffix()}"
    out.caption = (
        f"{task} ({source}): fraction of answers whose every token greedy decoding writes right, at input "
        f"length n, counts pooled over seeds and runs, with its Wilson 95% interval; trained on n = 1.."
        f"L_train; '{BEYOND}' pools every tested n > L_train. "
        + (
            f"With several training seeds (each scores the same examples) the accuracy is the mean over "
            f"seeds and 'seeds [lo, hi]' its {SEED_INTERVAL}; a method counts as learnt only when every "
            "seed learnt. "
            if seeds_learnt
            else ""
        )
        + f"{comp.note()} {out.hardware} "
        f"(commit {out.commit})."
    )
    return out


def accuracy_tables(rows: list[dict]) -> list[Table]:
    """One ``task_table`` per algorithmic task the rows hold, in first-seen order."""
    from posbench.report.grouping import ordered

    ok = list(_ok_rows(rows))
    return [task_table(ok, task) for task in ordered(r["params"]["task"] for r in ok)]


# -- the frontier (posbench.report.frontier): per hardware, budget, algorithmic task and test
# length n, each (method, L_train)'s exact match (over seeds) against its training seconds per
# example and peak memory, the Pareto front, the verdict table and a chart; shown for runs with a
# compute budget (time_s, flops) or several seeds.


def frontier_tables(runs: Runs) -> list[Table]:
    """A verdict table per (suite, hardware, budget, task, n) of the runs that ask for a frontier."""
    from posbench.report.frontier import (
        ACCURACY,
        Quality,
        accuracy_cells,
        fraction,
        frontier_points,
        frontier_table,
        per_unit,
    )

    quality = Quality(
        "lengthgen", "exact match", "exact match", "n", False, fraction, "Exact-match accuracy", cost_unit="s / example"
    )
    points = frontier_points(
        runs,
        "lengthgen",
        accuracy_cells,
        lambda m: per_unit(m, "train_seconds", "train_examples"),
        of=lambda r: str(r.params.get("task", "")),
        bounds=ACCURACY,
    )
    return [frontier_table(quality, suite, hw, budget, n, pts, of) for (suite, hw, budget, of, n), pts in points.items()]


def frontier_sections(runs: Runs) -> list[Section]:
    """The report's lengthgen frontier: each verdict table with its chart (none when no run asks)."""
    from posbench.report.frontier import frontier_section

    return frontier_section("Frontier: exact match against cost", "lengthgen", frontier_tables(runs))
