"""Attention diagnostics, one feature shared by the extrapolation and retrieval tasks (their
``attention_diagnostics`` setting, with ``attention_sequences`` and ``attention_max_factor``): a
few sequences per L_valid go through one probed forward (``posbench.engine.attention_probe``), and
the rows keep, per L_valid, layer and head, the entropy, its ratio to log of the keys, the first
token's mass and the mass by distance (``series["attention"]``), with their means as metrics. Off by
default: a timed or trained forward is never probed. This module holds the run (``diagnostics``),
the metrics (``attention_metrics``, declared by ``attention_declarations``) and the report: from the
rows' ``series["attention"]``, the entropy ratio and the first token's mass against L_valid, one
line per method, and the mass by distance at the longest L_valid probed (``attention_tables``,
``attention_sections``). Guide: docs/long-context-measures.md.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from posbench.report.names import slug
from posbench.report.rows import Runs
from posbench.report.table import Cell, Table, TableSpec

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from posbench.report.sections import Section


def diagnostics(model, sequences: dict, L: int) -> list[dict]:
    """``series["attention"]`` of ``sequences`` {L_valid: (n, L_valid) int64 tensor}: per L_valid and
    layer, the statistics per head, distances bucketed as the loss by distance (1-8, ..., L_train, doublings)."""
    from posbench.engine.attention_probe import diagnose
    from posbench.protocols.distances import buckets

    return [dict(entry, L_valid=Lv) for Lv, x in sequences.items() for entry in diagnose(model, x, buckets(L, Lv))]


def attention_metrics(entries: list[dict]) -> dict:
    """``attn_entropy_ratio@<L_valid>`` and ``attn_first_mass@<L_valid>``: the diagnostics averaged
    over layers and heads (and the seeds' entries, when they are tagged)."""
    out, per = {}, {}
    for e in entries:
        one = per.setdefault(e["L_valid"], {"ratio": [], "first": []})
        one["ratio"] += e["entropy_ratio"]
        one["first"] += e["first_mass"]
    for Lv, one in per.items():
        out[f"attn_entropy_ratio@{Lv}"] = sum(one["ratio"]) / len(one["ratio"])
        out[f"attn_first_mass@{Lv}"] = sum(one["first"]) / len(one["first"])
    return out


def attention_declarations(Metric) -> dict:
    """The two metrics' declarations (``Metric``: posbench.core.task.Metric), the same in every task."""
    return {
        "attn_entropy_ratio@*": Metric(
            title="Attention entropy / log(keys)",
            unit="",
            doc="attn_entropy_ratio@<L_valid> (attention_diagnostics): mean attention entropy over the log of each "
            "query's key count (1: uniform attention), averaged over layers and heads; series.attention per head",
            higher_is_better=None,
        ),
        "attn_first_mass@*": Metric(
            title="Attention mass on the first token",
            unit="fraction",
            doc="attn_first_mass@<L_valid>: mean attention probability on position 0, over layers, heads and queries",
            higher_is_better=None,
            shown_in="attn_entropy_ratio@*",
        ),
    }


# -- the report: tables and charts from the rows' series["attention"] ------------------------------


def _length(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1 << 40


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


ATTENTION = {
    "attn_entropy_ratio": ("Attention entropy / log(number of keys)", "entropy / log n (1 = uniform)"),
    "attn_first_mass": ("Attention mass on the first token", "mass on position 0"),
}

# The diagnostics' tables: methods x L_valid per diagnostic of ``ATTENTION``, then methods x
# distance bucket. Both tasks show them: ``attention_tables`` fills in the task that does.
DIAGNOSTIC_TABLES = {key: TableSpec(task="", metric=key, column_header="L_valid") for key in ATTENTION}
MASS_BY_DISTANCE_TABLE = TableSpec(task="", metric="attn mass by distance", column_header="distance (tokens)")


def attention_entries(row) -> list[dict]:
    """The well-formed entries of a stored row's ``series["attention"]``; others are left out."""
    series = row.series if isinstance(getattr(row, "series", None), dict) else {}
    stored = series.get("attention")
    return [
        e
        for e in (stored if isinstance(stored, list) else [])
        if isinstance(e, dict)
        and _length(e.get("L_valid"))
        and isinstance(e.get("mass_by_distance"), dict)
        and all(isinstance(e.get(k), list) and all(_number(x) for x in e[k]) for k in ("entropy_ratio", "first_mass"))
        and all(isinstance(v, list) and all(_number(x) for x in v) for v in e["mass_by_distance"].values())
    ]


def _mean(values: list) -> float | None:
    return sum(values) / len(values) if values else None


def attention_tables(runs: Runs, task: str) -> list[Table]:
    """Per (suite, hardware, grid point) of ``task``'s rows with ``attention_diagnostics``: the entropy ratio and
    the first token's mass, methods x L_valid (means over layers, heads and seeds), then the mass by
    distance at the longest L_valid probed, methods x distance bucket."""
    from posbench.report.grouping import by_params, method_order, ordered, short_commit, task_groups

    tables = []
    for suite, hardware, group in task_groups(runs.rows, task):
        order = method_order(group["method"], runs.meta_of(ordered(group["source"])))
        for params, rows in by_params(group).items():
            rows = [r for r in sorted(rows, key=lambda r: order.index(r.method)) if r.status == "ok" and attention_entries(r)]
            if not rows:
                continue
            l_train = dict(params).get("L_train")
            others = "".join(f", {k} = {v}" for k, v in params if k != "L_train")
            lengths = sorted({e["L_valid"] for r in rows for e in attention_entries(r)})
            commit = short_commit(group["git_commit"])
            for key, (title, what) in ATTENTION.items():
                field = {"attn_entropy_ratio": "entropy_ratio", "attn_first_mass": "first_mass"}[key]
                table = Table(
                    replace(DIAGNOSTIC_TABLES[key], task=task),
                    key=slug(f"{suite}-{key}-L{l_train}-{hardware}{others}"),
                    title=f"{title}, L_train = {l_train}{others}",
                    caption=f"{what}: the mean over every layer, head and query of the probed sequences (and over "
                    f"seeds), per L_valid; series.attention holds each layer and head. "
                    f"{hardware}, commit {commit}.",
                    columns=lengths,
                    rows=[],
                    hardware=hardware,
                    commit=commit,
                    extra={"L_train": l_train, "methods": {}},
                )
                for r in rows:
                    table.rows.append(r.method)
                    table.extra["methods"][r.method] = r.method
                    for lv in lengths:
                        value = _mean([x for e in attention_entries(r) if e["L_valid"] == lv for x in e[field]])
                        text = "—" if value is None else f"{value:.3f}"
                        table.cells[(r.method, lv)] = Cell(text=text, value=value, case_id=r.case_id, run_id=r.run_id)
                tables.append(table)
            longest = lengths[-1]
            names = list(dict.fromkeys(n for r in rows for e in attention_entries(r) for n in e["mass_by_distance"]))
            table = Table(
                replace(MASS_BY_DISTANCE_TABLE, task=task),
                key=slug(f"{suite}-attn-mass-by-distance-L{l_train}-{longest}-{hardware}{others}"),
                title=f"Attention mass by distance, L_train = {l_train}{others}, L_valid = {longest}",
                caption="Mean attention probability on keys at each distance from the query (0: itself), over "
                f"layers, heads and queries. {hardware}, commit {commit}.",
                columns=names,
                rows=[],
                hardware=hardware,
                commit=commit,
            )
            for r in rows:
                table.rows.append(r.method)
                for n in names:
                    vals = [x for e in attention_entries(r) if e["L_valid"] == longest for x in e["mass_by_distance"].get(n, [])]
                    value = _mean(vals)
                    table.cells[(r.method, n)] = Cell(text="—" if value is None else f"{value:.3f}", value=value)
            tables.append(table)
    return tables


def attention_chart(table: Table) -> Figure:
    """A diagnostic against L_valid (log x), one line per method, a dashed line at L_train."""
    from posbench.report.charts import caption, fit, line_style, new_figure

    fig, ax = new_figure()
    for index, row in enumerate(table.rows):
        pts = [(c, table.cell(row, c).value) for c in table.columns if table.cell(row, c).value is not None]
        if pts:
            ax.plot(*zip(*pts), label=row, gid=f"method:{row}", **line_style(index))
    ax.axvline(table.extra["L_train"], color="0.4", linestyle="--", label=f"L_train = {table.extra['L_train']}").set_gid(
        "L_train"
    )
    ax.set_xscale("log", base=2)
    ax.set_xticks(table.columns, [str(c) for c in table.columns])
    ax.set_xlabel("L_valid, evaluation length (tokens)")
    ax.set_ylabel(ATTENTION[table.metric][1])
    ax.set_title(table.title, fontsize=9, wrap=True)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    caption(fig, table.hardware, table.commit)
    fit(fig)
    return fig


def attention_sections(runs: Runs, task: str) -> list[Section]:
    """The attention diagnostics: entropy ratio and first-token mass with their charts, then the
    mass by distance (none without ``attention_diagnostics``)."""
    from posbench.report.sections import Block, Section

    blocks = [
        Block(t, [lambda t=t: [(t.key, t.title, attention_chart(t))]] if t.metric in ATTENTION else [])
        for t in attention_tables(runs, task)
    ]
    return [Section("Attention diagnostics", task, blocks)] if blocks else []
