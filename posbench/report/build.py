"""``bench.py report``: regenerate every table and chart from stored rows, without re-running.

``build_report(run_dirs, out_dir)`` writes::

    out_dir/report.md            sections of tables, each followed by its charts; run details; failed cases
    out_dir/report.html          one self-contained file: the same, plus environments and every row
    out_dir/rows.csv             every stored row, metrics flattened (the raw numbers)
    out_dir/tables/<key>.{md,csv,tex}
    out_dir/charts/<key>.{png,svg}

Each task decides its own section through its metric declarations (``posbench.core.task.Metric``):
which metrics get a table (each followed by the charts that belong to it: its line chart, and the
``charts`` the declaration names), which are shown inside another table (``shown_in``), and which
are housekeeping, collected per task into one "Appendix: run details" table. Extrapolation keeps
the paper's layout (a perplexity table per mode, then Figure 1 and the loss by position of that
mode); retrieval adds per-probe accuracy tables with their charts.
"""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from posbench.report import charts
from posbench.report.render import to_csv, to_latex, to_markdown
from posbench.report.html import write_html
from posbench.tasks.extrapolation.ppl_tables import extrapolation_tables
from posbench.report.rows import Runs, RowsError, load_runs
from posbench.report.table import Table, decode_tables, details_tables, efficiency_tables, kernel_tables, metric_tables, ordered
from posbench.core.task import find_metric, metrics_of

__all__ = ["build_report", "load_runs", "collect_tables", "collect_sections", "rows_csv", "Block", "Section"]

_FIXED_TASKS = ("efficiency", "extrapolation", "kernels", "decode")

# A chart source: called once when the report is written, returns (file stem, title, Figure) pairs.
ChartSource = Callable[[], list]


@dataclass
class Block:
    """A table and the charts that belong to it; the report prints them together, in this order."""

    table: Table
    charts: list[ChartSource] = field(default_factory=list)
    heading: str = ""  # a sub-heading above the table (retrieval: the probe)


@dataclass
class Section:
    """One task's part of the report: its blocks, and its housekeeping for the appendix."""

    heading: str
    task: str
    blocks: list[Block] = field(default_factory=list)
    details: list[Table] = field(default_factory=list)


def collect_sections(runs: Runs, baseline: str | None = None) -> list[Section]:
    """A section per task present, fixed layouts first; empty sections are left out.

    ``baseline``: the method ratios divide by; None takes each run's own (run.json).
    """
    present = set(runs.rows["task"].dropna())
    sections = [
        Section("Efficiency", "efficiency", _blocks(runs, efficiency_tables(runs, baseline))),
        Section("Extrapolation", "extrapolation", [_ppl_block(runs, t) for t in extrapolation_tables(runs)]),
        Section("Kernels", "kernels", _blocks(runs, kernel_tables(runs, baseline))),
        Section("Decode", "decode", _blocks(runs, decode_tables(runs, baseline))),
    ]
    for task in sorted(present - set(_FIXED_TASKS)):
        sections.append(Section(task.capitalize(), task, _blocks(runs, metric_tables(runs, task, baseline, column=""))))
        if task == "retrieval":
            sections.append(Section("Retrieval accuracy (Wilson 95% intervals)", task, _retrieval_blocks(runs)))
    for section in sections:
        if section.task in present and not any(s.details for s in sections if s.task == section.task):
            section.details = details_tables(runs, section.task)
    return [s for s in sections if s.blocks or s.details]


def collect_tables(runs: Runs, baseline: str | None = None) -> list[tuple[str, list[Table]]]:
    """(section heading, tables) of every section with tables, in report order (no appendix)."""
    return [(s.heading, [b.table for b in s.blocks]) for s in collect_sections(runs, baseline) if s.blocks]


def _blocks(runs: Runs, tables: list[Table]) -> list[Block]:
    return [Block(t, _table_charts(runs, t)) for t in tables]


def _table_charts(runs: Runs, table: Table) -> list[ChartSource]:
    """The line chart of a table with numbers against a numeric axis, then the charts its metric's
    declaration names (``Metric.charts``), drawn from the rows behind the table."""
    out: list[ChartSource] = []
    has_values = any(c.value is not None for c in table.cells.values())
    if has_values and table.columns and all(isinstance(c, (int, float)) for c in table.columns):
        out.append(lambda: [(table.key, table.title, charts.metric_chart(table))])
    declared = find_metric(metrics_of(table.task), table.metric)
    for name in (declared.charts if declared else ()):
        out.append(_declared_chart(name, runs, table))
    return out


def _declared_chart(name: str, runs: Runs, table: Table) -> ChartSource:
    module, _, attr = name.partition(":")
    draw = getattr(importlib.import_module(module), attr)  # a typo fails here, while collecting

    def source():
        cases = {(c.run_id, c.case_id) for c in table.cells.values() if c.case_id}
        rows = [r for r in runs.rows.to_dict("records") if (r["run_id"], r["case_id"]) in cases]
        return draw(rows)

    return source


def _ppl_block(runs: Runs, table: Table) -> Block:
    """Figure 1 of this table, then the loss by position of the same mode and grid point."""
    sources: list[ChartSource] = []
    if any(c.value is not None for c in table.cells.values()):
        sources.append(lambda: [(table.key, table.title, charts.ppl_chart(table))])

    def position_loss():
        return [(stem, f"Loss by position: {table.title}", fig) for stem, fig in charts.position_loss_charts(runs, table)]

    sources.append(position_loss)
    return Block(table, sources)


def _retrieval_blocks(runs: Runs) -> list[Block]:
    """Per probe: methods x L_valid accuracy with Wilson intervals (counts pooled over rows, so
    merged runs pool their samples), its accuracy chart, and after passkey the heatmaps."""
    from posbench.tasks.retrieval import accuracy_charts as charts_retrieval

    records = runs.rows[runs.rows["task"] == "retrieval"].to_dict("records")
    ok = [r for r in records if r.get("status") == "ok"]
    blocks = []
    for probe in ordered(r["params"]["probe"] for r in ok):
        table = charts_retrieval.probe_table(ok, probe)

        def accuracy(probe=probe):
            return [(f"retrieval_{probe}_accuracy", f"{probe}: accuracy vs L_valid",
                     charts_retrieval.accuracy_chart(ok, probe))]

        sources = [accuracy]
        if probe == "passkey":
            def heatmaps():
                return [(f"retrieval_passkey_heatmap_{m}", f"passkey heatmap: {m}", charts_retrieval.heatmap_chart(ok, m))
                        for m in ordered(r["method"] for r in ok if r["params"]["probe"] == "passkey")]

            sources.append(heatmaps)
        blocks.append(Block(table, sources, heading=probe))
    return blocks


def rows_csv(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per stored row with ``metrics.*`` as columns: the numbers behind every table."""
    flat = rows[["run_id", "case_id", "suite", "task", "method", "status", "message", "hardware",
                 "device", "profile", "git_commit", "started_at", "duration_s"]].copy()
    flat.insert(5, "params", [json.dumps(p, sort_keys=True) for p in rows["params"]])
    metrics = pd.DataFrame(list(rows["metrics"]), index=rows.index).add_prefix("metrics.")
    return pd.concat([flat, metrics], axis=1)


def _failed_markdown(rows: pd.DataFrame) -> list[str]:
    bad = rows[rows["status"] != "ok"]
    if bad.empty:
        return []
    lines = ["## Cases that did not finish", "", "| run_id | case_id | status | message |",
             "| --- | --- | --- | --- |"]
    for r in bad.itertuples(index=False):
        message = str(r.message or "").replace("|", "\\|").replace("\n", " ")[:200]
        lines.append(f"| {r.run_id} | {r.case_id} | {r.status} | {message} |")
    return lines + [""]


def _machines_markdown(runs: Runs) -> list[str]:
    lines = ["## Runs", ""]
    for source, env in runs.envs.items():
        run_rows = runs.rows[runs.rows["source"] == source]
        hardware = ", ".join(sorted(set(run_rows["hardware"].dropna())))
        meta = runs.metas.get(source)
        suite = (f"suite {meta.suite} v{meta.version}, baseline {meta.baseline or 'none'}, " if meta
                 else "no run.json (baseline sinusoidal assumed), ")
        lines.append(
            f"- `{source}`: {len(run_rows)} rows on {hardware or 'unknown hardware'}, {suite}commit "
            f"`{str(env.get('git_commit', 'unknown'))[:10]}`, posbench {env.get('posbench_version', '?')}, "
            f"torch {env.get('torch', '?')}, CUDA {env.get('cuda', 'none')}"
        )
    return lines + [""]


UNITS_NOTE = ("Memory is in GiB (2^30 bytes) everywhere. In charts each method keeps one colour, marker and "
              "line style; error bars show the spread the rows hold (named under each chart); perplexity "
              "axes are logarithmic, memory axes start at zero.")


@dataclass
class Drawn:
    """A chart written to disk: what the Markdown and HTML reports embed after its table."""

    stem: str
    title: str
    png: Path
    table_key: str


def build_report(run_dirs, out_dir, baseline: str | None = None) -> dict[str, Path]:
    """Write every table and chart for the runs in ``run_dirs`` under ``out_dir``.

    ``run_dirs`` may be run folders or folders above them; several are merged (shards, one run
    per machine). Returns ``{path relative to out_dir: absolute path}`` of everything written.
    """
    runs = load_runs(run_dirs)
    rows, envs = runs.rows, runs.envs
    if rows.empty:
        raise RowsError(f"{', '.join(map(str, run_dirs))}: the runs hold no rows")
    out = Path(out_dir)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}

    def note(path: Path) -> None:
        written[path.relative_to(out).as_posix()] = path

    def write_table(table: Table) -> None:
        for ext, text in (("md", to_markdown(table)), ("csv", to_csv(table)), ("tex", to_latex(table))):
            path = out / "tables" / f"{table.key}.{ext}"
            path.write_text(text, encoding="utf-8")
            note(path)

    sections = collect_sections(runs, baseline)
    title = f"posbench report: {', '.join(sorted(set(rows['suite'].dropna())))}"
    md = [f"# {title}", "", UNITS_NOTE, ""]
    md += _machines_markdown(runs)
    drawn: dict[int, list[Drawn]] = {}  # id(block) -> its charts, for the HTML report
    for section in sections:
        if not section.blocks:
            continue
        md += [f"## {section.heading}", ""]
        for block in section.blocks:
            write_table(block.table)
            if block.heading:
                md += [f"### {block.heading}", ""]
            md.append(to_markdown(block.table))
            drawn[id(block)] = _draw(block, out / "charts", note)
            md += [f"![{d.title}](charts/{d.png.name})\n" for d in drawn[id(block)]]
    details = [t for s in sections for t in s.details]
    if details:
        md += ["## Appendix: run details", ""]
        for table in details:
            write_table(table)
            md.append(to_markdown(table))
    md += _failed_markdown(rows)

    path = out / "report.md"
    path.write_text("\n".join(md), encoding="utf-8")
    note(path)
    path = out / "rows.csv"
    rows_csv(rows).to_csv(path, index=False)
    note(path)
    note(write_html(out / "report.html", title, sections, drawn, rows, envs, note=UNITS_NOTE))
    return written


def _draw(block: Block, folder: Path, note) -> list[Drawn]:
    """Draw, write and close the block's charts one at a time (figures hold a lot of memory)."""
    out = []
    for source in block.charts:
        for stem, title, fig in source():
            paths = charts.save_figure(fig, folder, stem)
            for p in paths.values():
                note(p)
            out.append(Drawn(stem, title, paths["png"], block.table.key))
    return out

