"""Which stored rows no table shows because a later run of the same case replaced them.

A table cell holds one row per (method, grid point): when two runs hold the same case, the later
run folder's row wins. The report names each run so replaced (docs/reports.md#superseded-rows).
"""

from __future__ import annotations

from dataclasses import dataclass

from posbench.report.table import Table


@dataclass(frozen=True)
class Superseded:
    """``count`` rows of run ``old`` that no table shows, each replaced by run ``new``'s row of the same case."""

    old: str
    new: str
    count: int

    def line(self) -> str:
        return (
            f"run {self.old}'s {self.count} row{'s' if self.count != 1 else ''} superseded by run {self.new} (same case, newer)"
        )


def superseded(rows, tables: list[Table]) -> list[Superseded]:
    """The runs whose rows ``tables`` replaced (``rows``: the report's DataFrame). A row is replaced
    when no cell links it while a cell links another run's row of the same case; a table that
    pools its runs (``Table.pooled``: counts summed over runs) replaces none of its cases."""
    shown = {(c.run_id, c.case_id) for t in tables for c in t.cells.values() if c.case_id}
    pooled = {c.case_id for t in tables if t.pooled for c in t.cells.values() if c.case_id}
    by_case: dict[str, set] = {}
    for run_id, case_id in shown:
        by_case.setdefault(case_id, set()).add(run_id)
    counts: dict[tuple[str, str], int] = {}
    for r in rows.itertuples(index=False):
        if (r.run_id, r.case_id) in shown or r.case_id in pooled:
            continue
        winners = sorted(by_case.get(r.case_id, set()) - {r.run_id})
        if winners:
            key = (r.run_id, winners[-1])
            counts[key] = counts.get(key, 0) + 1
    return [Superseded(old, new, n) for (old, new), n in counts.items()]
