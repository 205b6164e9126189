"""The extrapolation report's loss by dependency distance (the setting ``by_distance``,
``dependency``): perplexity per copy-distance bucket, methods x bucket (``distance_tables``), the
copy gains beyond and within L_train (``copy_gain_tables``) and their chart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from posbench.protocols.train_eval.evaluations import is_length
from posbench.report import numbers as fmt
from posbench.report.names import slug
from posbench.report.rows import Runs
from posbench.report.table import Cell, Table, TableSpec
from posbench.tasks.extrapolation.ppl_tables import BOUND_ROW, finite_number

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from posbench.report.sections import Section

# The report's modules that use pandas or matplotlib are imported inside the functions: the
# task's declaration imports this module, and `bench.py validate` must not wait for them.

# Methods (and the true source's row) x copy-distance bucket, one per grid point and L_valid.
DISTANCE_TABLE = TableSpec(
    task="extrapolation",
    metric="ppl by distance",
    unit="perplexity",
    fmt="ppl",
    column_header="copy distance (tokens)",
    higher_is_better=False,
)
# Methods x L_valid, the copy gain within L_train at L_train and beyond it past L_train.
COPY_GAIN_TABLE = TableSpec(
    task="extrapolation",
    metric="copy gain",
    unit="share of the source's gain",
    fmt="plain",
    column_header="L_valid",
    higher_is_better=True,
)


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
        and all(e.get(k) is None or finite_number(e.get(k)) for k in ("ppl", "bound_ppl", "lo", "hi"))
    ]


def distance_groups(runs: Runs):
    """(suite, hardware, commit, L_train, rows) per grid point of the finished extrapolation rows
    with ``by_distance``, rows in the run's method order (the loss-by-distance tables' groups)."""
    from posbench.report.grouping import by_params, method_order, ordered, short_commit, task_groups

    for suite, hardware, group in task_groups(runs.rows, "extrapolation"):
        order = method_order(group["method"], runs.meta_of(ordered(group["source"])))
        commit = short_commit(group["git_commit"])
        for params, rows in by_params(group).items():
            rows = [r for r in sorted(rows, key=lambda r: order.index(r.method)) if r.status == "ok" and distance_entries(r)]
            yield suite, hardware, commit, dict(params).get("L_train"), rows


def distance_tables(runs: Runs) -> list[Table]:
    """One table per (suite, hardware, grid point, L_valid) of rows with ``by_distance``: methods
    (and the true source's row) x copy-distance classes, each cell the perplexity of those tokens."""
    tables = []
    for suite, hardware, commit, l_train, rows in distance_groups(runs):
        for lv in sorted({e["L_valid"] for r in rows for e in distance_entries(r)}):
            per_row = {r.case_id: {e["bucket"]: e for e in distance_entries(r) if e["L_valid"] == lv} for r in rows}
            columns = list(dict.fromkeys(b for entries in per_row.values() for b in entries))
            table = Table(
                DISTANCE_TABLE,
                key=slug(f"{suite}-by-distance-L{l_train}-{lv}-{hardware}"),
                title=f"Perplexity by copy distance, L_train = {l_train}, L_valid = {lv}",
                caption="",
                columns=columns,
                rows=[],
                hardware=hardware,
                commit=commit,
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
    each cell the position-matched copy gain (``dependency.with_gains``; rows stored before it, the
    unmatched one) with the unmatched gain beside it, at L_train on the copies within L_train (the
    learn-first gate), beyond it on the copies from beyond L_train. A method below the gate is not
    compared beyond L_train."""
    from posbench.report.learn_first import NOT_LEARNT, comparability
    from posbench.tasks.extrapolation.dependency import BEYOND, LEARNT_GAIN, POSITION_BINS, WITHIN

    tables = []
    for suite, hardware, commit, l_train, rows in distance_groups(runs):
        if not rows or not is_length(l_train):
            continue
        read = {  # (method, L_valid) -> the entry the column reads
            (r.method, e["L_valid"]): e
            for r in rows
            for e in distance_entries(r)
            if e["bucket"] == (WITHIN if e["L_valid"] == l_train else BEYOND)
        }
        matched = any(e.get("gain_matched") is not None for e in read.values())
        gains = {key: _shown_gain(e) for key, e in read.items()}
        columns = sorted({lv for _, lv in gains if lv >= l_train})
        if l_train not in columns:
            continue
        verdicts = {
            r.method: None if gains.get((r.method, l_train)) is None else gains[(r.method, l_train)] >= LEARNT_GAIN for r in rows
        }
        said = comparability(verdicts, LEARNT_GAIN, measure="copy gain within L_train")
        table = Table(
            COPY_GAIN_TABLE,
            key=slug(f"{suite}-copy-gain-L{l_train}-{hardware}"),
            title=f"Copy gain, L_train = {l_train}" + said.title_suffix(),
            caption="",
            columns=columns,
            rows=[],
            hardware=hardware,
            commit=commit,
            extra={"L_train": l_train},
        )
        for r in rows:
            table.rows.append(r.method)
            for lv in columns:
                gain = gains.get((r.method, lv))
                if lv > l_train and verdicts[r.method] is False:
                    table.cells[(r.method, lv)] = Cell(text=NOT_LEARNT, value=None, case_id=r.case_id, run_id=r.run_id)
                else:
                    entry = read.get((r.method, lv))
                    spread = _seed_interval(r, entry, lv == l_train, lv)
                    text = _gain_text(entry, gain, spread)
                    table.cells[(r.method, lv)] = Cell(text=text, value=gain, case_id=r.case_id, run_id=r.run_id, spread=spread)
        reference = (
            "the model's own loss on the copies whose source lies before its window (it cannot use them), at the "
            f"same window positions as the copies scored (their mean over {POSITION_BINS} bins of position, "
            "weighted by the copies' bins; in round brackets the unmatched gain, against those copies wherever they sit: early in the "
            "window, so it reads low for a model whose loss rises with position)"
            if matched
            else "the model's own loss on the copies whose source lies before its window (it cannot use them)"
        )
        seeds = (
            " In square brackets: the shown gain's 95% t interval over the training seeds, which decides the"
            " summary's `Best:` and `Not separable`."
            if any(c.spread is not None for c in table.cells.values())
            else ""
        )
        table.caption = (
            f"Share of the true source's advantage that the model realises on copied tokens, (loss_out - loss) / "
            f"(loss_out - bound): loss_out is {reference}, bound the source's loss on the same tokens; 0: the copy "
            f"is ignored, 1: used as the source uses it. Column {l_train} (= L_train): the copies within L_train, the "
            f"learn-first gate (a method below {LEARNT_GAIN:.2f} has not learnt to copy at the length it was "
            f"trained at); longer columns: the copies from beyond L_train, inside the window.{seeds} {said.note()} "
            f"{hardware}, commit {table.commit}."
        )
        tables.append(table)
    return tables


def _shown_gain(entry: dict) -> float | None:
    """The gain a copy-gain cell reads: the position-matched one, or for entries stored before it
    (no ``matched_tokens``) the unmatched one."""
    return entry.get("gain_matched") if "matched_tokens" in entry else entry.get("gain")


def _seed_interval(row, entry: dict | None, within: bool, l_valid) -> tuple[float, float] | None:
    """The 95% t interval over seeds (``<metric>_seed_lo``/``_seed_hi``) of the gain a cell shows:
    ``copy_gain_within[_matched]`` at L_train, ``copy_gain_far[_matched]@<L_valid>`` beyond it;
    None for a one-seed row (a single measurement separates nothing)."""
    if entry is None:
        return None
    matched = "_matched" if "matched_tokens" in entry else ""
    name = f"copy_gain_within{matched}" if within else f"copy_gain_far{matched}@{l_valid}"
    metrics = row.metrics if isinstance(row.metrics, dict) else {}
    lo, hi = metrics.get(f"{name}_seed_lo"), metrics.get(f"{name}_seed_hi")
    return (lo, hi) if finite_number(lo) and finite_number(hi) else None


def _gain_text(entry: dict | None, gain: float | None, spread: tuple[float, float] | None = None) -> str:
    """``0.62 [0.55, 0.70] (0.31)``: the gain shown, its interval over seeds where the row has
    one, then the unmatched gain where the shown one is matched."""
    text = "—" if gain is None else f"{gain:.2f}"
    if gain is not None and spread is not None:
        text += f" [{spread[0]:.2f}, {spread[1]:.2f}]"
    if entry is not None and "matched_tokens" in entry and entry.get("gain") is not None:
        text += f" ({entry['gain']:.2f})"
    return text


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
