"""The summary at the top of a report: what the run's tables already say, in a few lines.

Nothing is computed anew: the cases' statuses, each table's ratios to its baseline (with the
interval the table holds) at its last column, or its values there, and the verdicts the tables carry (a method not
learnt at L_train, a broken profile, a table without ratios). HTML (``posbench.report.html``) and
the CI job summary (``posbench.report.job_summary``) render the same lines.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from posbench.report import numbers as fmt
from posbench.report.charts import bar_label
from posbench.report.escape import md_text
from posbench.report.frontier import NOT_SEPARABLE
from posbench.report.learn_first import BROKEN, NOT_LEARNT
from posbench.report.table import Table

FAILED = ("error", "timeout", "oom", "diverged")  # what makes bench.py exit 3 (cli.run_output.FAILED_STATUSES)


@dataclass(frozen=True)
class Line:
    """One sentence of the summary; ``table`` is the key of the table it reads (linked), ``alarm``
    marks what a reader must see first (failed cases, a broken profile)."""

    text: str
    table: str = ""
    alarm: bool = False
    lead: str = ""  # the start of ``text`` that names the table (the HTML links only that)


def case_counts(rows: pd.DataFrame) -> Line:
    """``15 cases: 11 ok, 3 unavailable here, 1 failed (1 oom).`` One row per case and machine:
    of a case run twice, the later run's (the one the tables show)."""
    cases = rows.drop_duplicates(["suite", "hardware", "case_id"], keep="last")
    statuses = list(cases["status"])
    failed = {s: statuses.count(s) for s in FAILED if s in statuses}
    parts = [f"{statuses.count('ok')} ok"]
    if "unavailable" in statuses:
        parts.append(f"{statuses.count('unavailable')} unavailable here")
    others = sorted({s for s in statuses if s not in FAILED and s not in ("ok", "unavailable")})
    parts += [f"{statuses.count(s)} {s}" for s in others]
    if failed:
        parts.append(f"{sum(failed.values())} failed ({', '.join(f'{n} {s}' for s, n in failed.items())})")
    return Line(f"{len(statuses)} case{'s' if len(statuses) != 1 else ''}: {', '.join(parts)}.", alarm=bool(failed))


def table_line(table: Table) -> Line | None:
    """A table's headline at one column: with a baseline, the ratios at the last column where a
    method has one (with the interval the bars show), else the cell texts at the last numeric
    column that holds a number; failed cells by status, and the best method where the table
    knows which way is better. None for a table with neither (counts per dtype, say)."""
    others = [r for r in table.rows if r != table.baseline]
    with_ratio = [c for c in table.columns if any(table.cell(r, c).ratio is not None for r in others)]
    numeric = [
        c
        for c in table.columns
        if isinstance(c, (int, float)) and not isinstance(c, bool) and any(table.cell(r, c).value is not None for r in table.rows)
    ]
    if with_ratio:
        col, rows = with_ratio[-1], others
    elif table.baseline and table.higher_is_better is not None:
        return _no_ratio_line(table)
    elif numeric:
        col, rows = numeric[-1], table.rows
    else:
        return None
    parts = []
    for row in rows:
        cell = table.cell(row, col)
        if cell.status == "missing":
            continue
        if _not_learnt(table, row):  # learn first: no number of it is read beyond L_train
            parts.append(f"{row} {NOT_LEARNT}")
        elif cell.status != "ok":
            parts.append(f"{row} {fmt.status(cell.status)}")
        else:
            parts.append(f"{row} {bar_label(cell) if with_ratio and cell.ratio is not None else cell.text}")
    best = " " + verdict(table, col, bool(with_ratio)) if table.higher_is_better is not None else ""
    what = f"ratio to {table.baseline}" if with_ratio else "values"
    said = {True: "higher is better", False: "lower is better"}.get(table.higher_is_better)
    resolved = f"differences under {table.resolution} not claimed" if table.resolution else ""  # memory
    notes = [n for n in (said, resolved) if n]
    better = f" ({'; '.join(notes)})" if notes else ""
    return Line(
        f"{table.title}, at {table.column_header} {col}, {what}{better}: {'; '.join(parts)}.{best}".rstrip(),
        table.key,
        lead=table.title,
    )


FLOOR = "floor"  # ``table.extra[FLOOR]``: the control method (no position work), never a contender


def _interval(table: Table, row: str, col, by_ratio: bool) -> tuple[float, float] | None:
    """The cell's 95% interval in the quantity the line reads: its ratio's (the baseline's own
    ratio is exactly 1), else the spread the row holds; None when it has none. A memory cell's
    resolution (``posbench.report.resolution.band``) widens it: a difference within the
    measurement's resolution is never a ranking, and a gap beyond it is one even without rounds."""
    cell = table.cell(row, col)
    if by_ratio:
        interval = (1.0, 1.0) if row == table.baseline else cell.ratio_interval
        band = None
        if cell.resolution is not None and cell.value and cell.ratio:
            scale = cell.ratio / cell.value  # value -> ratio: divide by the baseline's value
            band = (cell.resolution[0] * scale, cell.resolution[1] * scale)
    else:
        interval, band = cell.spread, cell.resolution
    if interval is None or band is None:
        return interval or band
    return min(interval[0], band[0]), max(interval[1], band[1])


def verdict(table: Table, col, by_ratio: bool) -> str:
    """``Best: alibi.`` only where the best cell's interval overlaps no other's (the frontier's
    rule); else ``Not separable: alibi, rotary.``, naming the best and every method whose interval
    overlaps it, or that has no interval to tell (a single measurement separates nothing; a
    memory cell's resolution band is its interval, ``_interval``). The
    floor (``table.extra["floor"]``, nope) is named as such, never as the best; a method the table
    marks not learnt at L_train is not ranked (learn first)."""
    floor = table.extra.get(FLOOR)
    values = {}
    for row in table.rows:
        cell = table.cell(row, col)
        number = (1.0 if row == table.baseline else cell.ratio) if by_ratio else cell.value
        if cell.status == "ok" and number is not None and row != floor and not _not_learnt(table, row):
            values[row] = number
    said = f" {floor} is the floor, not ranked." if floor in table.rows else ""
    if len(values) < 2:
        return said.strip()
    top = (max if table.higher_is_better else min)(values, key=values.get)
    mine = _interval(table, top, col, by_ratio)
    close = [top]
    for row in values:
        theirs = _interval(table, row, col, by_ratio)
        if row != top and (mine is None or theirs is None or (theirs[0] <= mine[1] and mine[0] <= theirs[1])):
            close.append(row)
    if len(close) == 1:
        return f"Best: {top}.{said}"
    return f"{NOT_SEPARABLE.capitalize()}: {', '.join(close)}.{said}"


def _not_learnt(table: Table, row: str) -> bool:
    """Whether the table says ``row`` did not learn the task at L_train: learn first, so it is
    never ranked beyond it, whatever its numbers there."""
    return any(table.cell(row, c).text == NOT_LEARNT for c in table.columns)


def _no_ratio_line(table: Table) -> Line | None:
    """Why a table that should have ratios has none (its caption says so too)."""
    if not any(c.value is not None for c in table.cells.values()):
        return None
    why = "was not run" if table.baseline not in table.rows else "has no finished case"
    return Line(f"{table.title}: no ratios, baseline {table.baseline} {why}.", table.key, lead=table.title)


def verdict_lines(table: Table) -> list[Line]:
    """The learn-first verdicts a table carries: a broken profile (in its title), and the methods
    not learnt at L_train (their cells), which are not compared beyond it."""
    out = []
    if BROKEN in table.title:
        out.append(Line(f"{table.title}: compares nothing; fix its training before reading it.", table.key, True, table.title))
    not_learnt = [r for r in table.rows if any(table.cell(r, c).text == NOT_LEARNT for c in table.columns)]
    if not_learnt and BROKEN not in table.title:
        out.append(
            Line(f"{table.title}: {NOT_LEARNT}, so not compared beyond it: {', '.join(not_learnt)}.", table.key, lead=table.title)
        )
    return out


def headline(sections: list, rows: pd.DataFrame) -> list[Line]:
    """The summary of a report: the cases' statuses, then per table (report order) its verdicts and
    its headline (``table_line``)."""
    out = [case_counts(rows)]
    for section in sections:
        for block in section.blocks:
            out += verdict_lines(block.table)
            line = table_line(block.table)
            if line is not None:
                out.append(line)
    return out


SUMMARY_HEADING = "## Summary"


def summary_markdown(lines: list[Line]) -> list[str]:
    """The summary lines as a Markdown section (``report.md``, the CI job summary), an alarm in bold."""
    out = [SUMMARY_HEADING, ""]
    out += [f"- **{md_text(line.text)}**" if line.alarm else f"- {md_text(line.text)}" for line in lines]
    return out + [""]
