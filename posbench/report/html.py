"""The single-file HTML report: tables, embedded charts, environments and an appendix of rows.

One file, no external assets, so it survives being attached to an issue or downloaded from a CI
artifact. Each chart (``<figure class="chart" data-table="KEY">``) sits right below the table it
belongs to (``<table id="table-KEY">``), and the page never scrolls sideways: wide tables scroll
inside their own box. Each table cell links to its row in the appendix (anchor ``row-<run_id>-<case_id>``)
and names the case and run in its tooltip: every number can be traced to what produced it. The page
opens with a summary (``posbench.report.headline``); captions sit above their tables at a reading
measure of their own (``p.caption``), not squeezed into a narrow table's width.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pandas as pd

from posbench.core.files import atomic_write_text
from posbench.report.escape import html_text
from posbench.report.headline import Line, headline
from posbench.report.render import capped, caption_html, row_anchor, to_html
from posbench.report.rows import Runs

# Nothing may make the page wider than the window: images shrink to the column, wide tables
# scroll inside their own box, and long unbroken words (paths, case ids) wrap.
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; padding: 0 1em; color: #222;
       overflow-wrap: anywhere; }
.scroll { max-width: 100%; overflow-x: auto; margin: 1em 0 1.5em; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; overflow-wrap: normal; }
th:first-child { text-align: left; }
/* A caption reads at a measure of its own, whatever its table's width (a two-column table is narrow). */
p.caption { max-width: 72ch; margin: 1.6em 0 0.4em; line-height: 1.4; }
.summary { max-width: 90ch; }
.summary li { margin: 0.25em 0; line-height: 1.4; }
.summary li.alarm { color: #a40000; font-weight: 600; }
.summary a { color: inherit; }
td.bad { background: #fdecea; }
td a { color: inherit; text-decoration: none; }
tr:target { background: #fff6c2; }
figure.chart { margin: 0 0 2em; max-width: 100%; }
figure.chart img { max-width: 100%; height: auto; display: block; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; font-size: 0.8em; max-width: 100%; }
.appendix td { text-align: left; vertical-align: top; font-size: 0.85em; overflow-wrap: anywhere; min-width: 6em; }
"""


def _figure_html(title: str, png: Path, table_key: str) -> str:
    """An embedded chart that names the table it belongs to (``data-table``), right below it. No
    figcaption: the chart draws its title, and the alt text carries it for screen readers."""
    data = str(base64.b64encode(png.read_bytes()), "ascii")
    return (
        f'<figure class="chart" data-table="{html_text(table_key)}"><img alt="{html_text(title)}" '
        f'src="data:image/png;base64,{data}"></figure>'
    )


def _scroll(fragment: str) -> str:
    return f'<div class="scroll">{fragment}</div>'


def _table(table) -> str:
    """A table's caption at its reading measure, then the table in its scroll box."""
    return caption_html(table) + "\n" + _scroll(to_html(table))


def _summary(lines: list[Line]) -> str:
    """The headline lines (``posbench.report.headline``), each naming the table it reads as a link."""
    items = []
    for line in lines:
        text = html_text(line.text)
        if line.table:
            lead = line.lead if line.lead and line.text.startswith(line.lead) else line.text
            text = f'<a href="#table-{html_text(line.table)}">{html_text(lead)}</a>{html_text(line.text[len(lead) :])}'
        items.append(f'<li class="alarm">{text}</li>' if line.alarm else f"<li>{text}</li>")
    return '<section class="summary" id="summary"><h2>Summary</h2><ul>' + "".join(items) + "</ul></section>"


def _compact(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _appendix(rows: pd.DataFrame) -> str:
    """Every stored row, with an anchor; series are summarised (they can be long)."""
    head = [
        "run_id",
        "case_id",
        "task",
        "method",
        "params",
        "status",
        "message",
        "metrics",
        "series",
        "hardware",
        "device",
        "duration_s",
        "git_commit",
    ]
    out = ['<table class="appendix"><thead><tr>' + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"]
    for r in rows.itertuples(index=False):
        series = ", ".join(
            f"{k}[{len(v)}]" if isinstance(v, (list, dict)) else str(k)
            for k, v in (r.series if isinstance(r.series, dict) else {}).items()
        )
        values = [
            r.run_id,
            r.case_id,
            r.task,
            r.method,
            _compact(r.params),
            r.status,
            capped(r.message),
            _compact(r.metrics),
            series,
            r.hardware,
            r.device,
            r.duration_s,
            r.git_commit,
        ]
        cells = "".join(f"<td>{html_text(str(v))}</td>" for v in values)
        out.append(f'<tr id="{row_anchor(r.run_id, r.case_id)}">{cells}</tr>')
    out.append("</tbody></table>")
    return "\n".join(out)


def write_html(path: Path, title: str, sections: list, drawn: dict, runs: Runs, note: str = "", superseded: list = ()) -> Path:
    """Write ``report.html``: the summary (``headline``), each section's tables, every table
    followed by its charts (``drawn``: ``id(block)`` -> charts written, embedded as base64), then
    the run details, the environments and every stored row of ``runs``."""
    rows, envs = runs.rows, runs.envs
    esc = html_text
    body = [
        f"<h1>{esc(title)}</h1>",
        _summary(headline(sections, rows)),
        f"<p>{len(rows)} stored rows from {len(envs)} run folder(s)"
        + (f", {sum(s.count for s in superseded)} of them superseded (below)" if superseded else "")
        + ". Hover a cell for its case "
        "and run; click it to jump to the stored row in the appendix.</p>",
    ]
    if superseded:  # rows no table shows (a later run of the same case replaced them)
        body.append('<ul class="superseded">' + "".join(f"<li>{esc(s.line())}</li>" for s in superseded) + "</ul>")
    if note:
        body.append(f"<p>{esc(note)}</p>")
    for section in sections:
        if not section.blocks:
            continue
        body.append(f"<h2>{esc(section.heading)}</h2>")
        for block in section.blocks:
            if block.heading:
                body.append(f"<h3>{esc(block.heading)}</h3>")
            body.append(_table(block.table))
            body += [_figure_html(d.title, d.png, d.table_key) for d in drawn.get(id(block), [])]
    details = [t for s in sections for t in s.details]
    if details:
        body.append("<h2>Appendix: run details</h2>")
        body += [_table(t) for t in details]
    body.append("<h2>Environments</h2>")
    for source, env in envs.items():
        body.append(f"<h3>{esc(source)}</h3><pre>{esc(json.dumps(env, indent=2, sort_keys=True, default=str))}</pre>")
    body.append("<h2>Appendix: all stored rows</h2>")
    body.append(_scroll(_appendix(rows)))
    doc = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
    atomic_write_text(path, doc)  # a link there is replaced, never written through
    return path
