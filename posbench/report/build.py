"""``bench.py report``: regenerate every table and chart from stored rows, without re-running.

``build_report(run_dirs, out_dir)`` writes ``report.md``, ``report.html`` (self-contained),
``rows.csv``, ``tables/<key>.{md,csv,tex}`` and ``charts/<key>.{png,svg}``; each task's section
comes from ``posbench.report.sections``. docs/reports.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from posbench.core.files import atomic_write_text
from posbench.report import charts
from posbench.report.escape import md_code, md_text
from posbench.report.headline import headline, summary_markdown
from posbench.report.html import write_html
from posbench.report.names import Stems, unique_keys
from posbench.report.render import capped, csv_cell, to_csv, to_latex, to_markdown
from posbench.report.rows import Runs, load_runs
from posbench.report.sections import Block, Section, collect_sections, collect_tables
from posbench.report.superseded import superseded
from posbench.report.table import Table
from posbench.store.bounds import RowsError

__all__ = ["build_report", "load_runs", "collect_tables", "collect_sections", "rows_csv", "Block", "Section"]


def rows_csv(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per stored row with ``metrics.*`` as columns: the numbers behind every table."""
    flat = rows[
        [
            "run_id",
            "case_id",
            "suite",
            "task",
            "method",
            "status",
            "message",
            "hardware",
            "device",
            "profile",
            "git_commit",
            "started_at",
            "duration_s",
        ]
    ].copy()
    flat.insert(5, "params", [json.dumps(p, sort_keys=True) for p in rows["params"]])
    metrics = pd.DataFrame(list(rows["metrics"]), index=rows.index).add_prefix("metrics.")
    out = pd.concat([flat, metrics], axis=1)
    # no cell a spreadsheet would run as a formula (csv_cell); numbers stay numbers
    out.columns = [csv_cell(str(c)) for c in out.columns]
    for column in out.columns:
        if not pd.api.types.is_numeric_dtype(out[column]):  # text (object or pandas' string dtype)
            out[column] = out[column].map(csv_cell)
    return out


def _failed_markdown(rows: pd.DataFrame) -> list[str]:
    bad = rows[rows["status"] != "ok"]
    if bad.empty:
        return []
    lines = ["## Cases that did not finish", "", "| run_id | case_id | status | message |", "| --- | --- | --- | --- |"]
    for r in bad.itertuples(index=False):
        cells = (r.run_id, r.case_id, r.status, capped(str(r.message or ""), 200))
        lines.append("| " + " | ".join(md_text(c) for c in cells) + " |")
    return lines + [""]


def _machines_markdown(runs: Runs) -> list[str]:
    lines = ["## Runs", ""]
    for source, env in runs.envs.items():
        run_rows = runs.rows[runs.rows["source"] == source]
        hardware = ", ".join(sorted(set(run_rows["hardware"].dropna())))
        meta = runs.metas.get(source)
        suite = (
            f"suite {meta.suite} v{meta.version}, baseline {meta.baseline or 'none'}, "
            if meta
            else "no run.json (baseline sinusoidal assumed), "
        )
        lines.append(
            f"- {md_code(source)}: {len(run_rows)} rows on {md_text(hardware or 'unknown hardware')}, "
            f"{md_text(suite)}commit {md_code(str(env.get('git_commit', 'unknown'))[:10])}, posbench "
            f"{md_text(env.get('posbench_version', '?'))}, torch {md_text(env.get('torch', '?'))}, "
            f"CUDA {md_text(env.get('cuda', 'none'))}"
        )
    return lines + [""]


UNITS_NOTE = (
    "Memory is in GiB (2^30 bytes) everywhere. In charts each method keeps one colour, marker and "
    "line style; error bars show the spread the rows hold (named under each chart); perplexity "
    "axes are logarithmic, memory axes start at zero."
)


@dataclass
class Drawn:
    """A chart written to disk: what the Markdown and HTML reports embed after its table."""

    stem: str
    title: str
    png: Path
    table_key: str


def build_report(run_dirs, out_dir, baseline: str | None = None, find_task=None) -> dict[str, Path]:
    """Write every table and chart for the runs in ``run_dirs`` (merged) under ``out_dir``; returns
    ``{path relative to out_dir: absolute path}`` of everything written. ``find_task``: a task name
    -> its task (the CLI's registry lookup), as in ``load_runs``."""
    runs = load_runs(run_dirs, find_task=find_task)
    rows = runs.rows
    if rows.empty:  # every line skipped is not "no rows": say how many were and why (warned above)
        skipped = f"; all {len(runs.problems)} of their rows were skipped (the warnings above say why)" if runs.problems else ""
        raise RowsError(f"{', '.join(map(str, run_dirs))}: the runs hold no usable rows{skipped}")
    out = Path(out_dir)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}

    def note(path: Path) -> None:
        written[path.relative_to(out).as_posix()] = path

    def write_table(table: Table) -> None:
        for ext, text in (("md", to_markdown(table)), ("csv", to_csv(table)), ("tex", to_latex(table))):
            path = out / "tables" / f"{table.key}.{ext}"
            atomic_write_text(path, text)  # a link there is replaced, never written through
            note(path)

    sections = collect_sections(runs, baseline)
    # one file and one HTML id per table: keys that collide (machine names that differ only in
    # punctuation) each get a hash of what the table shows
    unique_keys([b.table for s in sections for b in s.blocks] + [t for s in sections for t in s.details])
    stems = Stems()
    title = f"posbench report: {', '.join(sorted(set(rows['suite'].dropna())))}"
    md = [f"# {md_text(title)}", "", *summary_markdown(headline(sections, rows)), UNITS_NOTE, ""]
    md += _machines_markdown(runs)
    replaced = superseded(rows, [b.table for s in sections for b in s.blocks])
    if replaced:  # rows no table shows: said, never silently dropped
        md += ["## Superseded rows", ""] + [f"- {md_text(s.line())}" for s in replaced] + [""]
    drawn: dict[int, list[Drawn]] = {}  # id(block) -> its charts, for the HTML report
    for section in sections:
        if not section.blocks:
            continue
        md += [f"## {md_text(section.heading)}", ""]
        for block in section.blocks:
            write_table(block.table)
            if block.heading:
                md += [f"### {md_text(block.heading)}", ""]
            md.append(to_markdown(block.table))
            drawn[id(block)] = _draw(block, out / "charts", note, stems)
            md += [f"![{md_text(d.title)}](charts/{d.png.name})\n" for d in drawn[id(block)]]
    details = [t for s in sections for t in s.details]
    if details:
        md += ["## Appendix: run details", ""]
        for table in details:
            write_table(table)
            md.append(to_markdown(table))
    md += _failed_markdown(rows)

    path = out / "report.md"
    atomic_write_text(path, "\n".join(md))
    note(path)
    path = out / "rows.csv"
    atomic_write_text(path, rows_csv(rows).to_csv(index=False))
    note(path)
    note(write_html(out / "report.html", title, sections, drawn, runs, note=UNITS_NOTE, superseded=replaced))
    return written


def _draw(block: Block, folder: Path, note, stems: Stems) -> list[Drawn]:
    """Draw, write and close the block's charts one at a time (figures hold a lot of memory).
    File stems go through ``stems``: safe and unique whatever text a task built them from."""
    out = []
    for source in block.charts:
        for stem, title, fig in source():
            stem = stems.take(stem, title)
            paths = charts.save_figure(fig, folder, stem)
            for p in paths.values():
                note(p)
            out.append(Drawn(stem, title, paths["png"], block.table.key))
    return out
