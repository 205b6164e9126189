"""The extrapolation report's perplexity tables: one per (suite, hardware, L_train, evaluation
mode), methods x L_valid, with the true source's bound as a row of its own and ``OOM`` where an
evaluation ran out of memory (``extrapolation_tables``).
"""

from __future__ import annotations

import math

from posbench.protocols.train_eval.evaluations import eval_mode_key, evals, is_length
from posbench.report import numbers as fmt
from posbench.report.learn_first import NOT_LEARNT, PPL_RULE, comparability, ppl_verdicts
from posbench.report.names import slug
from posbench.report.rows import Runs
from posbench.report.stats import SEED_INTERVAL
from posbench.report.table import SPREAD_STD, Cell, Table, TableSpec

# The report's modules that use pandas or matplotlib are imported inside the functions: the
# task's declaration imports this module, and `bench.py validate` must not wait for them.

DEFAULT_MODE = ("nonoverlapping", None, False)
BOUND_ROW = "bound (true source)"

# Every perplexity table: methods x L_valid, one per grid point and evaluation mode.
PPL_TABLE = TableSpec(task="extrapolation", metric="ppl", unit="perplexity", column_header="L_valid")


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
    from posbench.report.grouping import by_params, method_order, ordered, task_groups

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
    from posbench.report.grouping import ordered, short_commit

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
        PPL_TABLE,
        key=slug(f"{suite}-ppl-L{l_train}-{modeslug(key)}-{hardware}-{others}"),
        title=f"Perplexity, L_train = {l_train}, {describe_mode(key)}" + (f", {others}" if others else ""),
        caption="",
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
    learn_first = mark_not_learnt(table, rows, l_train)
    seeded = [e for per_case in entries.values() for e in per_case.values() if finite_number(e.get("ppl_seed_lo"))]
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
        + (f" Learn first: {learn_first.note()}" if learn_first.not_learnt else "")
        + "".join(f" {note}" for note in ordered(_bucket_notes(rows, l_train)))
    )
    return table


def mark_not_learnt(table: Table, rows, l_train):
    """Learn first (``posbench.report.learn_first.ppl_verdicts``): a finished row whose perplexity
    at L_train is far from its peers' or the bound did not learn, so its cells beyond L_train say
    ``NOT_LEARNT`` (their value stays for the chart and the CSV) and no summary ranks it there; a
    table where fewer than two learnt says ``BROKEN PROFILE`` in its title. Rows with no
    perplexity at L_train are unknown and mark nothing. The verdicts, as a ``Comparability``."""
    finished = {label: r for label, r in zip(table.rows, rows) if r.status == "ok"}
    metrics = {label: {**r.metrics, "ppl_at_train_len": at_train_len(r, l_train)} for label, r in finished.items()}
    verdicts = comparability(ppl_verdicts(metrics), 0.0, measure="perplexity", rule=PPL_RULE)
    table.extra["learnt"], table.extra["not_learnt"] = verdicts.learnt, verdicts.not_learnt
    if not verdicts.not_learnt:
        return verdicts
    for label in verdicts.not_learnt:
        for lv in table.columns:
            cell = table.cells[(label, lv)]
            if is_length(lv) and is_length(l_train) and lv > l_train and cell.status == "ok":
                cell.text = NOT_LEARNT
    table.title += verdicts.title_suffix()
    return verdicts


def at_train_len(row, l_train) -> float | None:
    """A row's non-overlapping perplexity at L_valid = L_train: its ``ppl_at_train_len``, else
    (rows written before it) the evaluation it was taken from."""
    value = row.metrics.get("ppl_at_train_len")
    if value is not None:
        return value
    for e in evals(row):
        if eval_mode_key(e) == DEFAULT_MODE and e.get("L_valid") == l_train and e.get("status", "ok") == "ok":
            return e.get("ppl")
    return None


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
        if finite_number(lo) and finite_number(hi):  # seeds averaged: their 95% t interval is the error bar
            cell.spread = (float(lo), float(hi))
            cell.text = f"{fmt.ppl(cell.value)} [{fmt.ppl(float(lo))}, {fmt.ppl(float(hi))}]"
        elif isinstance(std, (int, float)):  # seeds averaged (older rows): their spread becomes the error bar
            cell.spread = (cell.value - float(std), cell.value + float(std))
    return cell


def finite_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
