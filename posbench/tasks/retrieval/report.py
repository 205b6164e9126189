"""The retrieval task's report, from result rows alone: per probe, accuracy per L_valid with its
Wilson interval (``accuracy``: recomputed from the rows' outcome counts, exact after merging runs),
its chart and the passkey heatmaps, learn first, then compare; the frontier of accuracy against
cost. Details: docs/tasks/retrieval.md.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from posbench.core.files import write_figure
from posbench.protocols.attention_diagnostics import attention_sections, attention_tables
from posbench.report.learn_first import NOT_LEARNT, comparability, length_text
from posbench.report.names import slug
from posbench.report.rows import Runs
from posbench.report.stats import SEED_INTERVAL
from posbench.report.table import Cell, Table, TableSpec
from posbench.tasks.retrieval.accuracy import (
    accuracy_table,
    heatmap_table,
    hops_table,
    learned_threshold,
    ok_rows,
    relative_threshold,
    scoring_rules,
    whole,
)

# matplotlib, numpy and the report's row grouping (pandas) are imported inside the functions that
# draw or build tables: validating or listing suites imports this module, and must not wait for them.
if TYPE_CHECKING:
    from posbench.report.frontier import Quality
    from posbench.report.sections import Block, Section

# A probe's accuracy tables, methods x L_valid: pooled over depths (``probe_table``) and by hops
# (``hops_probe_table``); each names its probe in the metric (``acc <probe>``, ``acc <probe> by hops``).
PROBE_ACCURACY = TableSpec(task="retrieval", metric="acc", unit="fraction", column_header="L_valid", higher_is_better=True)


def report_sections(runs: Runs, baseline: str | None = None) -> list[Section]:
    """Per probe, the accuracy per L_valid with Wilson intervals, its chart and the passkey
    heatmaps (``probe_blocks``); the summary metrics (accuracy at L_train and at the longest
    L_valid, effective length, learned) are columns of those tables, not one-cell tables of their
    own; then the frontier. The run details go to the appendix (``posbench.report.sections.collect_sections``)."""
    from posbench.report.sections import Section

    return (
        [Section("Retrieval accuracy (Wilson 95% intervals)", "retrieval", probe_blocks(runs))]
        + attention_sections(runs, "retrieval")
        + frontier_sections(runs)
    )


def summary_tables(runs: Runs) -> list[Table]:
    """The tables printed at the end of a run (its ``table.md``): per probe, accuracy per L_valid
    with its Wilson interval and the effective length (or "not learnt at L_train"); then the
    frontier's verdict tables."""
    return [b.table for b in probe_blocks(runs)] + attention_tables(runs, "retrieval") + frontier_tables(runs)


def _pyplot():
    """matplotlib.pyplot on the Agg backend, which ``posbench.report.charts`` chooses before pyplot loads."""
    import matplotlib.pyplot as plt

    import posbench.report.charts  # noqa: F401

    return plt


def _seeds_learnt(table: list[dict], several: bool) -> dict:
    """{row label: (seeds learnt, seeds)} of the entries trained with several seeds."""
    return {
        (f"{t['method']}, L_train={t['L_train']}" if several else t["method"]): t["seeds_learnt"]
        for t in table
        if t.get("seeds_learnt")
    }


def spread(t: dict) -> tuple[float, float]:
    """A cell's interval for error bars and verdicts: the Wilson interval over samples, widened to
    the seed interval (clipped to [0, 1]) when several seeds ran: a verdict must hold beyond the
    spread over training seeds as well as over test samples."""
    if t.get("seed_lo") is None:
        return (t["lo"], t["hi"])
    return (min(t["lo"], max(0.0, t["seed_lo"])), max(t["hi"], min(1.0, t["seed_hi"])))


def cell_text(t: dict) -> str:
    """``30% [11, 60]`` (Wilson 95% over samples), then `` seeds [25, 35]`` (95% t interval of the
    mean over seeds) when several seeds ran."""
    text = f"{100 * t['acc']:.0f}% [{100 * t['lo']:.0f}, {100 * t['hi']:.0f}]"
    if t.get("seed_lo") is not None:  # an accuracy's interval, clipped to [0, 1]
        text += f" seeds [{100 * max(0.0, t['seed_lo']):.0f}, {100 * min(1.0, t['seed_hi']):.0f}]"
    return text


def summary_text(first: dict, name: str) -> str:
    """A RULER summary cell of one (method, L_train): ``45%`` for a weighted average, the length for
    ``effective_length_rel`` (or "not learnt at L_train"), then `` seeds [lo, hi]`` over seeds."""
    value = first.get(name)
    lo, hi = first.get(f"{name}_seeds") or (None, None)
    if name in ("effective_length_rel", "effective_length"):
        text = length_text(first["learned"], value)
        if not first["learned"] or lo is None:
            return text
        # a learnt model's effective length lies between L_train and the longest L_valid: the t
        # interval of a few seeds reaches past both, and is shown clipped to them
        return text + f" seeds [{max(lo, first['L_train']):.0f}, {min(hi, first['longest']):.0f}]"
    if value is None:
        return "-"
    return f"{100 * value:.0f}%" + (f" seeds [{100 * max(0.0, lo):.0f}, {100 * min(1.0, hi):.0f}]" if lo is not None else "")


SUMMARY_COLUMNS = {"effective length (rel)": "effective_length_rel", "wAvg long": "wavg_long", "wAvg short": "wavg_short"}


# What a cell's share counts under each scoring rule (posbench.protocols.probing.scoring)
RULE_TEXT = {
    "exact": "answers exactly right",
    "string_match_all": "reference items found, scored by RULER's string_match_all (each answer scores the "
    "share of its reference items it holds anywhere, order-free; counts pooled per item, which is RULER's "
    "mean over answers within a cell)",
    "string_match_part": "answers holding any of their reference items, scored by RULER's string_match_part",
}


def scoring_text(rows: list[dict]) -> str:
    """What the rows' accuracy counts, naming the scoring rule(s) they were scored with."""
    rules = scoring_rules(rows)
    if len(rules) == 1:
        return RULE_TEXT.get(rules[0], f"answers scored by {rules[0]}")
    return "answers scored by several rules, pooled (" + ", ".join(rules) + ")"


def _verdicts(table: list[dict], several: bool) -> dict:
    """{row label: learned} of one probe's table entries (label: method, with L_train if several)."""
    return {(f"{t['method']}, L_train={t['L_train']}" if several else t["method"]): t["learned"] for t in table}


def markdown_table(rows: list[dict], probe: str, threshold: float = 0.5) -> str:
    """Methods x L_valid accuracy (Wilson 95% interval) for one probe, plus effective length (or
    "not learnt at L_train"), then how many methods were comparable."""
    table = [t for t in accuracy_table(rows, threshold) if t["probe"] == probe]
    lengths = sorted({t["L_valid"] for t in table})
    methods = list(dict.fromkeys(t["method"] for t in table))
    lines = [
        "| method | L_train | "
        + " | ".join(f"L={Lv}" for Lv in lengths)
        + " | "
        + " | ".join(SUMMARY_COLUMNS)
        + " | effective length |",
        "|---|---|" + "---|" * (len(lengths) + 1 + len(SUMMARY_COLUMNS)),
    ]
    for m in methods:
        for L in sorted({t["L_train"] for t in table if t["method"] == m}):
            cells = {t["L_valid"]: t for t in table if t["method"] == m and t["L_train"] == L}
            text = []
            for Lv in lengths:
                t = cells.get(Lv)
                text.append("-" if t is None or t["acc"] is None else cell_text(t))
            first = dict(next(iter(cells.values())), longest=max(lengths))
            eff = summary_text(first, "effective_length")
            ruler = " | ".join(summary_text(first, name) for name in SUMMARY_COLUMNS.values())
            lines.append(f"| {m} | {L} | " + " | ".join(text) + f" | {ruler} | {eff} |")
    if table:  # how many methods were comparable, under the table
        lines += [
            "",
            comparability(_verdicts(table, True), learned_threshold(list(ok_rows(rows))), _seeds_learnt(table, True)).note(),
        ]
    return "\n".join(lines)


def probe_table(rows: list[dict], probe: str, threshold: float = 0.5) -> Table:
    """``markdown_table`` as a report ``Table``: methods (with L_train when there are several) x
    L_valid, each cell ``30% [11, 60]`` (Wilson 95%) linked to its case, then the effective length."""
    from posbench.report.grouping import short_commit

    table = [t for t in accuracy_table(rows, threshold) if t["probe"] == probe]
    lengths = sorted({t["L_valid"] for t in table})
    ok = [r for r in ok_rows(rows, probe)]
    several = len({t["L_train"] for t in table}) > 1
    hardware = next((r.get("hardware") for r in ok if r.get("hardware")), "")
    out = Table(
        replace(PROBE_ACCURACY, metric=f"acc {probe}"),
        key=slug(f"retrieval-{probe}-accuracy-{hardware}"),
        title=f"{probe}: accuracy (Wilson 95% interval)",
        caption="",
        columns=lengths + ["effective length", *SUMMARY_COLUMNS, "steps"],
        rows=[],
        hardware=hardware,
        commit=short_commit(r.get("git_commit") for r in ok),
    )
    case_of = {(r["method"], r["params"]["L_train"]): r for r in ok}
    for m in dict.fromkeys(t["method"] for t in table):
        for L in sorted({t["L_train"] for t in table if t["method"] == m}):
            label = f"{m}, L_train={L}" if several else m
            out.rows.append(label)
            row = case_of.get((m, L), {})
            link = {"case_id": row.get("case_id"), "run_id": row.get("run_id")}
            cells = {t["L_valid"]: t for t in table if t["method"] == m and t["L_train"] == L}
            for Lv in lengths:
                t = cells.get(Lv)
                if t is None or t["acc"] is None:
                    out.cells[(label, Lv)] = Cell(text="-", status="missing", **link)
                    continue
                out.cells[(label, Lv)] = Cell(text=cell_text(t), value=t["acc"], spread=spread(t), **link)
            first = dict(next(iter(cells.values())), longest=max(lengths))
            eff = first["effective_length"] if first["learned"] else None
            out.cells[(label, "effective length")] = Cell(
                text=summary_text(first, "effective_length"), value=None if eff is None else float(eff), **link
            )
            for column, name in SUMMARY_COLUMNS.items():
                value = first.get(name) if name != "effective_length_rel" or first["learned"] else None
                out.cells[(label, column)] = Cell(
                    text=summary_text(first, name), value=None if value is None else float(value), **link
                )
            out.cells[(label, "steps")] = Cell(text=steps_text(row.get("metrics", {}), row.get("series")), **link)
    verdicts = comparability(_verdicts(table, several), learned_threshold(ok), _seeds_learnt(table, several))
    out.title += verdicts.title_suffix()
    out.extra["learnt"], out.extra["not_learnt"] = verdicts.learnt, verdicts.not_learnt
    out.pooled = True  # counts of every run of a case pooled: no run supersedes another
    out.caption = (
        f"Fraction of {probe} {scoring_text(ok)}, counts pooled over depths, seeds and runs, with "
        f"its Wilson 95% interval; effective length: the longest L_valid with accuracy >= {threshold:g} "
        f"there and at every shorter L_valid, given only for a model that learnt the task at L_train "
        f"(accuracy >= {verdicts.threshold:.0%}; otherwise '{NOT_LEARNT}'); effective length (rel): the "
        f"longest L_valid keeping >= {relative_threshold(ok):g} x the model's own accuracy at L_train there and "
        f"at every shorter L_valid (learnt models only); wAvg long / short: RULER's averages over L_valid weighted "
        f"1..n towards the longest / the shortest; steps: optimizer steps "
        f"trained (per seed), 'stopped' where training stopped on reaching stop_at_acc (train to criterion). "
        + (
            f"With several training seeds, the accuracy is the mean over seeds (each scores the same "
            f"samples) and 'seeds [lo, hi]' its {SEED_INTERVAL}; a method counts as learnt only when "
            "every seed learnt. "
            if any(t["n_seeds"] for t in table)
            else ""
        )
        + f"{verdicts.note()} "
        f"{out.hardware} (commit {out.commit})."
    )
    return out


def hops_probe_table(rows: list[dict], probe: str) -> Table | None:
    """Accuracy per chain length (vartrack's hops axis): rows ``method, hops=k`` (with L_train when
    there are several), columns L_valid, each cell ``30% [11, 60]`` (Wilson 95%); None when the
    probe's cells carry no hops."""
    from posbench.report.grouping import short_commit

    table = hops_table(rows, probe)
    if not table:
        return None
    ok = list(ok_rows(rows, probe))
    several = len({t["L_train"] for t in table}) > 1
    hardware = next((r.get("hardware") for r in ok if r.get("hardware")), "")
    lengths = sorted({t["L_valid"] for t in table})
    out = Table(
        replace(PROBE_ACCURACY, metric=f"acc {probe} by hops"),
        key=slug(f"retrieval-{probe}-by-hops-{hardware}"),
        title=f"{probe}: accuracy by hops (Wilson 95% interval)",
        caption=f"Fraction of {probe} {scoring_text(ok)} per chain length (hops: statements to follow "
        f"from the asked variable to its value), counts pooled over seeds and runs, with its Wilson 95% "
        f"interval; the accuracy table above pools the hops. {hardware} (commit {short_commit(r.get('git_commit') for r in ok)}).",
        columns=lengths,
        rows=[],
        hardware=hardware,
        commit=short_commit(r.get("git_commit") for r in ok),
    )
    out.pooled = True
    for t in table:
        label = f"{t['method']}" + (f", L_train={t['L_train']}" if several else "") + f", hops={t['hops']}"
        if label not in out.rows:
            out.rows.append(label)
        text = "-" if t["acc"] is None else cell_text(t)
        out.cells[(label, t["L_valid"])] = Cell(
            text=text, value=t["acc"], spread=None if t["acc"] is None else (t["lo"], t["hi"])
        )
    return out


def steps_text(metrics, series=None) -> str:
    """``1700 (stopped)`` when training stopped at its criterion, ``3000`` when it ran the whole
    budget, one per seed (``700 (stopped), 2000``) for a row of several seeds (``series``'s
    ``train_steps_by_seed``), ``-`` when the row does not say."""
    by_seed = series.get("train_steps_by_seed") if isinstance(series, dict) else None
    if isinstance(by_seed, list) and by_seed:
        stopped = series.get("stopped_at_step_by_seed")
        stopped = stopped if isinstance(stopped, list) and len(stopped) == len(by_seed) else [None] * len(by_seed)
        steps = [int(v) if isinstance(v, float) and v.is_integer() else v for v in by_seed]
        return ", ".join(steps_text({"train_steps": v, "stopped_at_step": st}) for v, st in zip(steps, stopped))
    if not isinstance(metrics, dict):
        return "-"
    steps = metrics.get("train_steps")
    if not whole(steps, 1):
        return "-"
    return f"{steps} (stopped)" if metrics.get("stopped_at_step") is not None else f"{steps}"


def heatmap_chart(rows: list[dict], method: str, L_train: int | None = None):
    """Needle-in-a-haystack heatmap of one method: passkey accuracy, depth (rows, 0 = needle at
    the start) x L_valid (columns). Returns the Figure; the image's array is the table's."""
    import numpy as np

    plt = _pyplot()
    depths, lengths, acc = heatmap_table(rows, method, L_train)
    if not lengths:
        raise ValueError(f"heatmap: no passkey results for method {method!r}")
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(lengths), 1.2 + 0.5 * len(depths)))
    im = ax.imshow(acc, vmin=0.0, vmax=1.0, cmap="RdYlGn", aspect="auto")
    ax.set_xticks(range(len(lengths)), [str(Lv) for Lv in lengths])
    ax.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths])
    for i in range(len(depths)):
        for j in range(len(lengths)):
            if not np.isnan(acc[i, j]):
                ax.text(j, i, f"{100 * acc[i, j]:.0f}", ha="center", va="center", fontsize=8)
    ax.set_xlabel("L_valid (tokens)")
    ax.set_ylabel("needle depth")
    title = f"passkey: {method}" + (f" (L_train {L_train})" if L_train else "")
    verdicts = {
        t["learned"]
        for t in accuracy_table(rows)
        if t["method"] == method and t["probe"] == "passkey" and (L_train is None or t["L_train"] == L_train)
    }
    if False in verdicts:
        title += f", {NOT_LEARNT}"
    ax.set_title(title, fontsize=10)
    fig.colorbar(im, ax=ax, label="accuracy")
    fig.tight_layout()
    return fig


def accuracy_chart(rows: list[dict], probe: str, L_train: int | None = None):
    """Accuracy vs L_valid per method for one probe: log-2 x axis, Wilson 95% error bars, and a
    dashed vertical line at L_train (gid ``L_train``). A method that did not learn the task at
    L_train is drawn grey and dotted, "(not learnt at L_train)" in its legend entry."""
    import numpy as np

    from posbench.report.charts import line_style, marker_size

    plt = _pyplot()
    table = [
        t
        for t in accuracy_table(rows)
        if t["probe"] == probe and t["acc"] is not None and (L_train is None or t["L_train"] == L_train)
    ]
    if not table:
        raise ValueError(f"accuracy chart: no results for probe {probe!r}")
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for index, method in enumerate(dict.fromkeys(t["method"] for t in table)):
        pts = sorted((t["L_valid"], t["acc"], t["lo"], t["hi"]) for t in table if t["method"] == method)
        x, y, lo, hi = (np.array(v, dtype=float) for v in zip(*pts))
        style = line_style(index)  # methods that coincide (all at 100%) stay apart by marker and dash
        label = method
        if any(t["learned"] is False for t in table if t["method"] == method):
            style = {**style, "color": "0.6", "linestyle": ":"}
            label = f"{method} ({NOT_LEARNT})"
        ax.plot(
            x,
            y,
            markersize=marker_size(index),
            markerfacecolor="none",
            markeredgewidth=1.3,
            label=label,
            gid=f"method:{method}",
            **style,
        )
        ax.errorbar(x, y, yerr=[y - lo, hi - y], fmt="none", ecolor=style["color"], alpha=0.5, capsize=3)
    for L in sorted({t["L_train"] for t in table}):
        ax.axvline(L, linestyle="--", color="0.4", gid="L_train")
    ax.set_xscale("log", base=2)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("L_valid (tokens, log scale)")
    ax.set_ylabel("accuracy")
    ax.set_title(f"{probe}: accuracy vs evaluation length (dashed: L_train)", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def probe_blocks(runs: Runs) -> list[Block]:
    """Per probe: methods x L_valid accuracy with Wilson intervals (counts pooled over rows, so
    merged runs pool their samples), its accuracy chart, and after passkey the heatmaps."""
    from posbench.report.grouping import ordered
    from posbench.report.names import file_stem
    from posbench.report.sections import Block

    records = runs.rows[runs.rows["task"] == "retrieval"].to_dict("records")
    ok = [r for r in records if r.get("status") == "ok"]
    blocks = []
    for probe in ordered(r["params"]["probe"] for r in ok):
        table = probe_table(ok, probe)

        def accuracy(probe=probe):
            if not any(t["probe"] == probe and t["acc"] is not None for t in accuracy_table(ok)):
                return []  # every cell failed: the table says so, there is nothing to draw
            return [(f"retrieval_{file_stem(probe)}_accuracy", f"{probe}: accuracy vs L_valid", accuracy_chart(ok, probe))]

        sources = [accuracy]
        if probe == "passkey":

            def heatmaps():
                return [
                    (f"retrieval_passkey_heatmap_{file_stem(m)}", f"passkey heatmap: {m}", heatmap_chart(ok, m))
                    for m in ordered(r["method"] for r in ok if r["params"]["probe"] == "passkey")
                    if heatmap_table(ok, m)[1]
                ]

            sources.append(heatmaps)
        blocks.append(Block(table, sources, heading=probe))
        by_hops = hops_probe_table(ok, probe)
        if by_hops is not None:
            blocks.append(Block(by_hops, [], heading=f"{probe} by hops"))
    return blocks


def write_charts(rows: list[dict], folder) -> list[Path]:
    """Every retrieval chart of ``rows`` as PNG in ``folder``: one accuracy chart per probe and
    one passkey heatmap per method. Returns the paths written."""
    from posbench.report.names import file_stem

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    ok = list(ok_rows(rows))
    written = []
    for probe in dict.fromkeys(r["params"]["probe"] for r in ok):
        written.append(_save(accuracy_chart(ok, probe), folder / f"retrieval_{file_stem(probe)}_accuracy.png"))
    for method in dict.fromkeys(r["method"] for r in ok if r["params"]["probe"] == "passkey"):
        written.append(_save(heatmap_chart(ok, method), folder / f"retrieval_passkey_heatmap_{file_stem(method)}.png"))
    return written


def _save(fig, path: Path) -> Path:
    write_figure(fig, path, dpi=120)  # never written through a link
    _pyplot().close(fig)
    return path


# -- the frontier (posbench.report.frontier): per hardware, budget, probe and target length L_valid,
# each (method, L_train)'s accuracy (over seeds) against its training seconds per token and peak
# memory, the Pareto front, the verdict table and a chart; shown for runs with a compute budget
# (time_s, flops) or several seeds.


def frontier_quality() -> Quality:
    """What the retrieval frontier compares: accuracy at L_valid, higher is better."""
    from posbench.report.frontier import Quality, fraction

    return Quality(
        "retrieval",
        "accuracy",
        "acc",
        "L_valid",
        False,
        fraction,
        "Retrieval accuracy (exact answers; RULER's probes by their scoring rule)",
    )


def frontier_tables(runs: Runs) -> list[Table]:
    """A verdict table per (suite, hardware, budget, probe, L_valid) of the runs that ask for a frontier."""
    from posbench.report.frontier import ACCURACY, accuracy_cells, frontier_points, frontier_table, per_unit

    points = frontier_points(
        runs,
        "retrieval",
        accuracy_cells,
        lambda m: per_unit(m, "train_seconds", "train_tokens"),
        of=lambda r: str(r.params.get("probe", "")),
        bounds=ACCURACY,
    )
    quality = frontier_quality()
    return [frontier_table(quality, suite, hw, budget, n, pts, of) for (suite, hw, budget, of, n), pts in points.items()]


def frontier_sections(runs: Runs) -> list[Section]:
    """The report's retrieval frontier: each verdict table with its chart (none when no run asks)."""
    from posbench.report.frontier import frontier_section

    return frontier_section("Frontier: retrieval accuracy against cost", "retrieval", frontier_tables(runs))
