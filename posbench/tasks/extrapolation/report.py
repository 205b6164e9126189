"""The extrapolation task's report: a perplexity table per (suite, hardware, L_train, evaluation
mode), methods x L_valid, ``OOM`` where an evaluation ran out of memory, each followed by the
paper's Figure 1 (perplexity against L_valid) and the loss by token position at the longest
L_valid; then the frontier of runs with a compute budget or several seeds: per hardware, budget
and target length L_valid, each (method, L_train)'s perplexity (non-overlapping, over seeds)
against its cost (training seconds per token; peak training memory and, when measured, the decode
cost at L_valid beside it), the Pareto front, the verdict table and a chart
(``posbench.report.frontier``). Also the end-of-run tables and the cells ``bench.py compare`` reads.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from posbench.protocols.attention_diagnostics import attention_sections, attention_tables
from posbench.protocols.decode_cost import TPOT, TPOT_MAX, TPOT_MIN
from posbench.protocols.train_eval.evaluations import curves, eval_mode_key, evals, is_length
from posbench.report import numbers as fmt
from posbench.report.names import slug
from posbench.report.rows import Runs
from posbench.report.stats import SEED_INTERVAL

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from posbench.report.frontier import Point, Quality
    from posbench.report.sections import Block, ChartSource, Section
    from posbench.report.table import Cell, Table

# The report's modules (pandas, matplotlib) are imported inside the functions: the task's
# declaration imports this module, and `bench.py validate` must not wait for them.

REPORT_ORDER = 20  # after efficiency, before kernels
DEFAULT_MODE = ("nonoverlapping", None, False)
BOUND_ROW = "bound (true source)"
DECODE_METRICS = (TPOT, TPOT_MIN, TPOT_MAX)  # + L_valid: the decode cost, its fastest and slowest repeat


def report_sections(runs: Runs, baseline=None) -> list[Section]:
    """The perplexity tables with their charts (no ratios: a perplexity is read against the bound),
    then the frontier of runs with a compute budget or several seeds."""
    return ppl_sections(runs) + distance_sections(runs) + attention_sections(runs, "extrapolation") + frontier_sections(runs)


def summary_tables(runs: Runs) -> list[Table]:
    """The perplexity tables, the loss by dependency distance, then the frontier's verdict tables,
    printed at the end of a run."""
    return (
        extrapolation_tables(runs)
        + distance_tables(runs)
        + copy_gain_tables(runs)
        + attention_tables(runs, "extrapolation")
        + frontier_tables(runs)
    )


# -- the perplexity tables ----------------------------------------------------------------------


def describe_mode(key: tuple) -> str:
    """Words for a caption: which evaluation produced these numbers."""
    mode, stride, interpolate = key
    if mode == "sliding":
        text = f"sliding-window evaluation, stride {stride}"
    elif mode == "nonoverlapping":
        text = "nonoverlapping evaluation (the paper's default)"
    else:
        text = f"{mode} evaluation" + (f", stride {stride}" if stride else "")
    if interpolate:
        text += ", positions interpolated to L_train"
    return text


def modeslug(key: tuple) -> str:
    mode, stride, interpolate = key
    return f"{mode}" + (f"-s{stride}" if stride else "") + ("-interp" if interpolate else "")


def _best_ppl(rows) -> float | None:
    for r in rows:
        value = r.metrics.get("best_ppl")
        if value is not None:
            return float(value)
    return None


def extrapolation_tables(runs: Runs) -> list[Table]:
    """Perplexity tables, one per (suite, hardware, L_train and other params, evaluation mode)."""
    from posbench.report.table import by_params, method_order, ordered, task_groups

    tables = []
    for suite, hardware, group in task_groups(runs.rows, "extrapolation"):
        order = method_order(group["method"], runs.meta_of(ordered(group["source"])))
        for params, rows in by_params(group).items():
            rows = sorted(rows, key=lambda r: order.index(r.method))  # the suite's method order
            modes = ordered(eval_mode_key(e) for r in rows for e in evals(r))
            for key in modes or [DEFAULT_MODE]:
                tables.append(_ppl_table(suite, hardware, dict(params), rows, key, group))
    return tables


def _ppl_table(suite, hardware, params, rows, key, group) -> Table:
    from posbench.report.table import SPREAD_STD, Cell, Table, ordered, short_commit

    l_train = params.get("L_train")
    entries = {r.case_id: {e.get("L_valid"): e for e in evals(r) if eval_mode_key(e) == key} for r in rows}
    columns = sorted({lv for per_case in entries.values() for lv in per_case if lv is not None})
    if not columns:  # nothing evaluated at all: fall back to the grid the suite asked for
        asked = next(
            (
                r.settings.get("L_valid")
                for r in rows
                if isinstance(r.settings, dict) and isinstance(r.settings.get("L_valid"), list)
            ),
            [],
        )
        columns = sorted({lv for lv in asked if is_length(lv)})
    others = ", ".join(f"{k}={v}" for k, v in params.items() if k != "L_train")
    best = _best_ppl(rows)
    table = Table(
        key=slug(f"{suite}-ppl-L{l_train}-{modeslug(key)}-{hardware}-{others}"),
        title=f"Perplexity, L_train = {l_train}, {describe_mode(key)}" + (f", {others}" if others else ""),
        caption="",
        task="extrapolation",
        metric="ppl",
        unit="perplexity",
        column_header="L_valid",
        columns=columns,
        rows=[],
        hardware=hardware,
        commit=short_commit(group["git_commit"]),
        extra={"L_train": l_train, "mode": key, "best_ppl": best, "params": params, "suite": suite},
    )
    for r in rows:
        # A failed case keeps its row: its label says why, its cells show what did finish.
        label = r.method if r.status == "ok" else f"{r.method} ({fmt.status(r.status)})"
        table.rows.append(label)
        for lv in columns:
            table.cells[(label, lv)] = _ppl_cell(r, entries[r.case_id].get(lv))
    table.extra["methods"] = {label: r.method for label, r in zip(table.rows, rows)}
    seeded = [e for per_case in entries.values() for e in per_case.values() if _number(e.get("ppl_seed_lo"))]
    if seeded:
        table.spread = SEED_INTERVAL
    elif any(c.spread is not None for c in table.cells.values()):
        table.spread = SPREAD_STD
    bounds = _bounds(entries, columns)
    if bounds:
        # The true source's perplexity on exactly the tokens each column scored (synthetic
        # sources): the floor every method's cell should be read against.
        table.rows.append(BOUND_ROW)
        table.extra["bound_row"] = BOUND_ROW
        for lv in columns:
            value = bounds.get(lv)
            table.cells[(BOUND_ROW, lv)] = Cell(
                text=fmt.ppl(value) if value is not None else "—", value=value, status="ok" if value is not None else "missing"
            )
    table.caption = (
        f"Perplexity (lower is better) of models trained on L_train = {l_train} tokens, "
        f"{describe_mode(key)}; columns are L_valid, the evaluation length. "
        f"{hardware}, commit {table.commit}. "
        + (
            f"Row '{BOUND_ROW}': the true source's perplexity on exactly the tokens of that column "
            "(best_ppl_eval), the best any model can score there. "
            if bounds
            else ""
        )
        + (f"Long-run entropy bound of the corpus: {best:.2f}. " if best is not None else "")
        + (
            f"Each cell is the mean over {max(int(e.get('n_seeds') or 0) for e in seeded)} training seeds with, "
            f"in brackets, its {SEED_INTERVAL} (mean ± t(n-1) · std / sqrt(n)); perplexity has no interval over "
            "evaluation tokens. "
            if seeded
            else ""
        )
        + "OOM: the evaluation ran out of memory."
        + "".join(f" {note}" for note in ordered(_bucket_notes(rows, l_train)))
    )
    return table


def _bucket_notes(rows, l_train) -> list[str]:
    """Per method that left distance buckets untrained at this L_train (T5's bias), one sentence."""
    from posbench.tasks.extrapolation.bucket_coverage import caption_note

    series = [(r.method, r.series if isinstance(getattr(r, "series", None), dict) else {}) for r in rows]
    return [n for n in (caption_note(m, l_train, s.get("untrained_buckets")) for m, s in series) if n]


def _bounds(entries: dict, columns: list) -> dict:
    """L_valid -> the source's perplexity on the evaluated tokens, from the first entry that has it."""
    out = {}
    for lv in columns:
        for per_case in entries.values():
            value = (per_case.get(lv) or {}).get("best_ppl_eval")
            if value is not None:
                out[lv] = float(value)
                break
    return out


def _ppl_cell(row, entry: dict | None) -> Cell:
    from posbench.report.table import Cell

    cell = Cell(text="", case_id=row.case_id, run_id=row.run_id, status=row.status, message=str(row.message or ""))
    if entry is None:
        cell.text = "—" if row.status == "ok" else fmt.status(row.status)
        cell.status = "missing" if row.status == "ok" else row.status
        return cell
    cell.status = entry.get("status", "ok")
    cell.message = str(entry.get("message") or cell.message)
    if cell.status != "ok":
        cell.text = fmt.status(cell.status)
    elif entry.get("ppl") is None:
        cell.text = fmt.MISSING
    else:
        cell.value = float(entry["ppl"])
        cell.text = fmt.ppl(cell.value)
        lo, hi, std = entry.get("ppl_seed_lo"), entry.get("ppl_seed_hi"), entry.get("ppl_std")
        if _number(lo) and _number(hi):  # seeds averaged: their 95% t interval is the error bar
            cell.spread = (float(lo), float(hi))
            cell.text = f"{fmt.ppl(cell.value)} [{fmt.ppl(float(lo))}, {fmt.ppl(float(hi))}]"
        elif isinstance(std, (int, float)):  # seeds averaged (older rows): their spread becomes the error bar
            cell.spread = (cell.value - float(std), cell.value + float(std))
    return cell


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# -- their charts: Figure 1 and the loss by position ----------------------------------------------


def ppl_sections(runs: Runs) -> list[Section]:
    """The task's report section: each perplexity table with its two charts."""
    from posbench.report.sections import Section

    return [Section("Extrapolation", "extrapolation", [ppl_block(runs, t) for t in extrapolation_tables(runs)])]


def ppl_block(runs: Runs, table: Table) -> Block:
    """Figure 1 of this table, then the loss by position of the same mode and grid point."""
    from posbench.report.sections import Block

    sources: list[ChartSource] = []
    if any(c.value is not None for c in table.cells.values()):
        sources.append(lambda: [(table.key, table.title, ppl_chart(table))])

    def position_loss():
        return [(stem, f"Loss by position: {table.title}", fig) for stem, fig in position_loss_charts(runs, table)]

    sources.append(position_loss)
    return Block(table, sources)


def ppl_chart(table: Table) -> Figure:
    """The paper's Figure 1: perplexity against L_valid (log x, log y), a dashed line at L_train."""
    from posbench.report.charts import bar_note, caption, fit, new_figure, numeric_columns, perplexity_axis, plot_rows

    fig, ax = new_figure()
    kind = plot_rows(ax, table, table.extra.get("methods"))
    ax.set_xscale("log", base=2)
    if numeric_columns(table):
        ax.set_xticks(table.columns, [str(c) for c in table.columns])
    l_train = table.extra.get("L_train")
    if l_train:
        vline = ax.axvline(l_train, color="0.3", linestyle="--", linewidth=1, label=f"L_train = {l_train}")
        vline.set_gid("L_train")
    best = table.extra.get("best_ppl")
    if best is not None and not table.extra.get("bound_row"):  # the per-column bound is drawn as a row
        ax.axhline(best, color="0.6", linestyle=":", linewidth=1, label=f"best achievable ({best:.2f})").set_gid("best_ppl")
    perplexity_axis(ax)
    ax.set_xlabel("L_valid, evaluation length (tokens)")
    ax.set_ylabel("Perplexity (lower is better, log scale)")
    ax.set_title(table.title, fontsize=9, wrap=True)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=8)
    caption(fig, table.hardware, table.commit, bar_note(kind, table))
    fit(fig)
    return fig


def position_loss_charts(runs: Runs, table: Table | None = None) -> list[tuple[str, Figure]]:
    """Loss by token position, one figure per (suite, hardware, L_train, mode) at the longest L_valid.

    Shows *where* a method breaks down: a curve that climbs after the L_train line extrapolates
    badly. ``table``: only the figure that belongs to that extrapolation table (same suite,
    machine, grid point and evaluation mode); the report draws it right below the table.
    Returns ``(file stem, figure)`` pairs.
    """
    from posbench.report.table import by_params, task_groups

    out = []
    for suite, hardware, group in task_groups(runs.rows, "extrapolation"):
        if table is not None and (suite, hardware) != (table.extra.get("suite"), table.hardware):
            continue
        for params, members in by_params(group).items():
            if table is not None and dict(params) != table.extra.get("params"):
                continue
            out += _position_figures(suite, hardware, dict(params), members, table)
    return out


def _curve_key(key: str) -> tuple[str, int, bool] | None:
    """``nonoverlapping@512`` / ``sliding@512@interp`` -> (mode, L_valid, interpolated)."""
    mode, _, rest = key.partition("@")
    length, _, tail = rest.partition("@")
    return (mode, int(length), tail == "interp") if length.isascii() and length.isdigit() and len(length) < 13 else None


def _position_figures(suite, hardware, params, members, table: Table | None = None):
    from posbench.report.charts import caption, fit, line_style, new_figure, staggered
    from posbench.report.table import short_commit

    longest: dict[tuple[str, bool], int] = {}
    for r in members:
        for key in curves(r):
            parsed = _curve_key(key)
            if parsed is not None:
                mode, length, interp = parsed
                longest[(mode, interp)] = max(longest.get((mode, interp), 0), length)
    if table is not None:
        mode, _stride, interp = table.extra.get("mode", ("nonoverlapping", None, False))
        longest = {k: v for k, v in longest.items() if k == (mode, bool(interp))}
    commit = short_commit(r.git_commit for r in members)
    l_train = params.get("L_train")
    order = list(dict.fromkeys(r.method for r in members))
    figures = []
    for (mode, interp), length in longest.items():
        key = f"{mode}@{length}" + ("@interp" if interp else "")
        fig, ax = new_figure()
        for r in members:
            losses = curves(r).get(key)
            if losses:
                index = order.index(r.method)
                (line,) = ax.plot(
                    range(1, len(losses) + 1),
                    losses,
                    linewidth=1.2,
                    markersize=6,
                    markerfacecolor="none",
                    markevery=staggered(index, len(order), len(losses)),
                    label=r.method,
                    **line_style(index),
                )
                line.set_gid(f"method:{r.method}")
        if l_train:
            ax.axvline(l_train, color="0.3", linestyle="--", linewidth=1, label=f"L_train = {l_train}").set_gid("L_train")
        ax.set_xlabel("Token position in the evaluation window")
        ax.set_ylabel("Loss (nats per token)")
        what = f"{mode}" + (", interpolated" if interp else "")
        ax.set_title(f"Loss by position, L_train = {l_train}, {what} @ L_valid = {length}", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        caption(fig, hardware, commit)
        fit(fig)
        stem = f"{suite}-position-loss-L{l_train}-{mode}" + ("-interp" if interp else "") + f"-{length}-{hardware}"
        figures.append((slug(stem), fig))
    return figures


# -- loss by dependency distance (``by_distance``, posbench/tasks/extrapolation/dependency.py) ------------


def distance_entries(row) -> list[dict]:
    """The well-formed entries of a stored row's ``series["by_distance"]``; others are left out."""
    series = row.series if isinstance(getattr(row, "series", None), dict) else {}
    stored = series.get("by_distance")
    return [
        e
        for e in (stored if isinstance(stored, list) else [])
        if isinstance(e, dict)
        and is_length(e.get("L_valid"))
        and isinstance(e.get("bucket"), str)
        and isinstance(e.get("tokens"), int)
        and all(e.get(k) is None or _number(e.get(k)) for k in ("ppl", "bound_ppl", "lo", "hi"))
    ]


def distance_groups(runs: Runs):
    """(suite, hardware, commit, L_train, rows) per grid point of the finished extrapolation rows
    with ``by_distance``, rows in the run's method order (the loss-by-distance tables' groups)."""
    from posbench.report.table import by_params, method_order, ordered, short_commit, task_groups

    for suite, hardware, group in task_groups(runs.rows, "extrapolation"):
        order = method_order(group["method"], runs.meta_of(ordered(group["source"])))
        commit = short_commit(group["git_commit"])
        for params, rows in by_params(group).items():
            rows = [r for r in sorted(rows, key=lambda r: order.index(r.method)) if r.status == "ok" and distance_entries(r)]
            yield suite, hardware, commit, dict(params).get("L_train"), rows


def distance_tables(runs: Runs) -> list[Table]:
    """One table per (suite, hardware, grid point, L_valid) of rows with ``by_distance``: methods
    (and the true source's row) x copy-distance classes, each cell the perplexity of those tokens."""
    from posbench.report.table import Cell, Table

    tables = []
    for suite, hardware, commit, l_train, rows in distance_groups(runs):
        for lv in sorted({e["L_valid"] for r in rows for e in distance_entries(r)}):
            per_row = {r.case_id: {e["bucket"]: e for e in distance_entries(r) if e["L_valid"] == lv} for r in rows}
            columns = list(dict.fromkeys(b for entries in per_row.values() for b in entries))
            table = Table(
                key=slug(f"{suite}-by-distance-L{l_train}-{lv}-{hardware}"),
                title=f"Perplexity by copy distance, L_train = {l_train}, L_valid = {lv}",
                caption="",
                task="extrapolation",
                metric="ppl by distance",
                unit="perplexity",
                column_header="copy distance (tokens)",
                columns=columns,
                rows=[],
                hardware=hardware,
                commit=commit,
                fmt="ppl",
                higher_is_better=False,
                extra={"L_train": l_train, "L_valid": lv, "methods": {}},
            )
            for r in rows:
                table.rows.append(r.method)
                table.extra["methods"][r.method] = r.method
                for b in columns:
                    e = per_row[r.case_id].get(b)
                    ppl = None if e is None else e.get("ppl")
                    text = "—" if ppl is None else f"{fmt.ppl(ppl)} ({e['tokens']})"
                    table.cells[(r.method, b)] = Cell(text=text, value=ppl, case_id=r.case_id, run_id=r.run_id)
            table.rows.append(BOUND_ROW)
            table.extra["bound_row"] = BOUND_ROW
            for b in columns:
                e = next((per_row[r.case_id][b] for r in rows if b in per_row[r.case_id]), None)
                value = None if e is None else e.get("bound_ppl")
                table.cells[(BOUND_ROW, b)] = Cell(text="—" if value is None else fmt.ppl(value), value=value)
            table.caption = (
                f"Perplexity of the tokens that copy from d tokens back, per bucket of d (in brackets: tokens "
                f"scored), of the copies from beyond L_train = {l_train} pooled, of the tokens that copy nothing, "
                f"and of copies whose source lies before the window (out of any model's reach), on "
                f"non-overlapping windows of {lv} tokens. Row '{BOUND_ROW}': the source's perplexity on the "
                "same tokens given the whole stream. A method that uses a far copy comes down towards the bound "
                "in that bucket; one that does not stays at or above its 'no copy' level. "
                f"{hardware}, commit {table.commit}."
            )
            tables.append(table)
    return tables


def copy_gain_tables(runs: Runs) -> list[Table]:
    """One table per (suite, hardware, grid point) of rows with ``by_distance``: methods x L_valid,
    each cell the copy gain (``dependency.with_gains``), at L_train on the copies within L_train
    (the learn-first gate), beyond it on the copies from beyond L_train. A method below the gate is
    not compared beyond L_train."""
    from posbench.report.learn_first import NOT_LEARNT, comparability
    from posbench.report.table import Cell, Table
    from posbench.tasks.extrapolation.dependency import BEYOND, LEARNT_GAIN, WITHIN

    tables = []
    for suite, hardware, commit, l_train, rows in distance_groups(runs):
        if not rows or not is_length(l_train):
            continue
        gains = {  # (method, L_valid) -> the gain the column reads
            (r.method, e["L_valid"]): e.get("gain")
            for r in rows
            for e in distance_entries(r)
            if e["bucket"] == (WITHIN if e["L_valid"] == l_train else BEYOND)
        }
        columns = sorted({lv for _, lv in gains if lv >= l_train})
        if l_train not in columns:
            continue
        verdicts = {
            r.method: None if gains.get((r.method, l_train)) is None else gains[(r.method, l_train)] >= LEARNT_GAIN for r in rows
        }
        said = comparability(verdicts, LEARNT_GAIN, measure="copy gain within L_train")
        table = Table(
            key=slug(f"{suite}-copy-gain-L{l_train}-{hardware}"),
            title=f"Copy gain, L_train = {l_train}" + said.title_suffix(),
            caption="",
            task="extrapolation",
            metric="copy gain",
            unit="share of the source's gain",
            column_header="L_valid",
            columns=columns,
            rows=[],
            hardware=hardware,
            commit=commit,
            fmt="plain",
            higher_is_better=True,
            extra={"L_train": l_train},
        )
        for r in rows:
            table.rows.append(r.method)
            for lv in columns:
                gain = gains.get((r.method, lv))
                if lv > l_train and verdicts[r.method] is False:
                    table.cells[(r.method, lv)] = Cell(text=NOT_LEARNT, value=None, case_id=r.case_id, run_id=r.run_id)
                else:
                    text = "—" if gain is None else f"{gain:.2f}"
                    table.cells[(r.method, lv)] = Cell(text=text, value=gain, case_id=r.case_id, run_id=r.run_id)
        table.caption = (
            f"Share of the true source's advantage that the model realises on copied tokens, (loss_out - loss) / "
            f"(loss_out - bound): loss_out is the model's own loss on the copies whose source lies before its "
            f"window (it cannot use them), bound the source's loss on the same tokens; 0: the copy is ignored, "
            f"1: used as the source uses it. Column {l_train} (= L_train): the copies within L_train, the "
            f"learn-first gate (a method below {LEARNT_GAIN:.2f} has not learnt to copy at the length it was "
            f"trained at); longer columns: the copies from beyond L_train, inside the window. {said.note()} "
            f"{hardware}, commit {table.commit}."
        )
        tables.append(table)
    return tables


def distance_chart(table: Table) -> Figure:
    """Perplexity against copy distance (the buckets' upper ends, log x), one line per method and
    the source's bound dashed, a dotted line at L_train."""
    from posbench.report.charts import caption, fit, line_style, new_figure, perplexity_axis

    buckets = [c for c in table.columns if c.split("-")[0].isdigit()]
    x = [int(c.split("-")[1]) for c in buckets]
    fig, ax = new_figure()
    for index, row in enumerate(table.rows):
        y = [table.cell(row, c).value for c in buckets]
        pts = [(a, b) for a, b in zip(x, y) if b is not None]
        if not pts:
            continue
        style = {"color": "black", "linestyle": "--", "marker": "x"} if row == BOUND_ROW else line_style(index)
        ax.plot(*zip(*pts), label=row, gid=f"method:{row}", **style)
    ax.axvline(table.extra["L_train"], color="0.4", linestyle=":", label=f"L_train = {table.extra['L_train']}").set_gid("L_train")
    ax.set_xscale("log", base=2)
    perplexity_axis(ax)
    ax.set_xlabel("copy distance d, bucket's upper end (tokens, log scale)")
    ax.set_ylabel("Perplexity of the copied tokens (log scale)")
    ax.set_title(table.title, fontsize=9, wrap=True)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=8)
    caption(fig, table.hardware, table.commit)
    fit(fig)
    return fig


def distance_sections(runs: Runs) -> list[Section]:
    """The loss by dependency distance: each table with its chart (none without ``by_distance``)."""
    from posbench.report.sections import Block, Section

    blocks = [Block(t, [lambda t=t: [(t.key, t.title, distance_chart(t))]]) for t in distance_tables(runs)]
    blocks += [Block(t) for t in copy_gain_tables(runs)]
    return [Section("Loss by dependency distance", "extrapolation", blocks)] if blocks else []


# -- the frontier -----------------------------------------------------------------------------------


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
    a frontier: non-overlapping perplexity per seed at each L_valid, cost from the row's means."""
    from posbench.report.frontier import frontier_points as points_of

    return {
        (suite, hw, budget, lv): pts for (suite, hw, budget, _, lv), pts in points_of(runs, "extrapolation", cells, cost).items()
    }


def verdict_table(key: tuple, points: list[Point]) -> Table:
    """One budget and target length ``(suite, hardware, budget, L_valid)``: a row per (method, L_train), best first."""
    from posbench.report.frontier import frontier_table

    suite, hardware, budget, lv = key
    return frontier_table(frontier_quality(), suite, hardware, budget, lv, points)


def frontier_tables(runs: Runs) -> list[Table]:
    """A verdict table per (suite, hardware, budget, L_valid) of the runs that ask for a frontier."""
    return [verdict_table(key, points) for key, points in frontier_points(runs).items()]


def frontier_sections(runs: Runs) -> list[Section]:
    """The report's frontier section: each verdict table with its chart (none when no run asks)."""
    from posbench.report.frontier import frontier_section

    return frontier_section("Frontier: perplexity against cost", "extrapolation", frontier_tables(runs))
