"""``bench.py report``: regenerate every table and chart from stored rows, without re-running.

``build_report(run_dirs, out_dir)`` writes::

    out_dir/report.md            all tables (Markdown) + chart links + failed cases + machines
    out_dir/report.html          one self-contained file: tables, charts, environments, rows
    out_dir/rows.csv             every stored row, metrics flattened (the raw numbers)
    out_dir/tables/<key>.{md,csv,tex}
    out_dir/charts/<key>.{png,svg}
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from . import charts
from .render import to_csv, to_latex, to_markdown
from .report_html import write_html
from .report_ppl import extrapolation_tables
from .rows import Runs, RowsError, load_runs
from .table import Table, efficiency_tables, kernel_tables, metric_tables

__all__ = ["build_report", "load_runs", "collect_tables", "rows_csv"]

_FIXED_TASKS = ("efficiency", "extrapolation", "kernels")


def collect_tables(runs: Runs, baseline: str | None = None) -> list[tuple[str, list[Table]]]:
    """(section heading, tables) for every task present, fixed layouts first.

    ``baseline``: the method ratios divide by; None takes each run's own (run.json).
    """
    sections = [
        ("Efficiency", efficiency_tables(runs, baseline)),
        ("Extrapolation", extrapolation_tables(runs)),
        ("Kernels", kernel_tables(runs, baseline)),
    ]
    for task in sorted(set(runs.rows["task"].dropna()) - set(_FIXED_TASKS)):
        sections.append((task.capitalize(), metric_tables(runs, task, baseline, column="")))
    return [(heading, tables) for heading, tables in sections if tables]


def rows_csv(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per stored row with ``metrics.*`` as columns: the numbers behind every table."""
    flat = rows[["run_id", "case_id", "suite", "task", "method", "status", "message", "hardware",
                 "device", "profile", "git_commit", "started_at", "duration_s"]].copy()
    flat.insert(5, "params", [json.dumps(p, sort_keys=True) for p in rows["params"]])
    metrics = pd.DataFrame(list(rows["metrics"]), index=rows.index).add_prefix("metrics.")
    return pd.concat([flat, metrics], axis=1)


def _chart_for(table: Table):
    if not any(c.value is not None for c in table.cells.values()):
        return None  # every case failed: the table already says so, an empty plot adds nothing
    if table.task == "extrapolation":
        return charts.ppl_chart(table)
    if table.columns and all(isinstance(c, (int, float)) for c in table.columns):
        return charts.metric_chart(table)
    return None


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

    sections = collect_tables(runs, baseline)
    title = f"posbench report: {', '.join(sorted(set(rows['suite'].dropna())))}"
    md = [f"# {title}", ""]
    md += _machines_markdown(runs)
    chart_list: list[tuple[str, Path]] = []
    for heading, tables in sections:
        md += [f"## {heading}", ""]
        for table in tables:
            for ext, text in (("md", to_markdown(table)), ("csv", to_csv(table)), ("tex", to_latex(table))):
                path = out / "tables" / f"{table.key}.{ext}"
                path.write_text(text, encoding="utf-8")
                note(path)
            md.append(to_markdown(table))
            fig = _chart_for(table)
            if fig is not None:
                paths = charts.save_figure(fig, out / "charts", table.key)
                for p in paths.values():
                    note(p)
                chart_list.append((table.title, paths["png"]))
                md += [f"![{table.title}](charts/{table.key}.png)", ""]
    for stem, fig in charts.position_loss_charts(runs):
        paths = charts.save_figure(fig, out / "charts", stem)
        for p in paths.values():
            note(p)
        chart_list.append((stem, paths["png"]))
        md += [f"![{stem}](charts/{stem}.png)", ""]
    md += _failed_markdown(rows)

    path = out / "report.md"
    path.write_text("\n".join(md), encoding="utf-8")
    note(path)
    path = out / "rows.csv"
    rows_csv(rows).to_csv(path, index=False)
    note(path)
    note(write_html(out / "report.html", title, sections, chart_list, rows, envs))
    return written
