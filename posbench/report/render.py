"""Writing ``Table``s: Markdown, CSV, LaTeX, an HTML fragment, terminal text, and a run's own
``table.md`` / ``table.csv``; every form shows the same cell texts.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from posbench.core.files import atomic_write_text
from posbench.report.escape import html_text, md_text
from posbench.report.names import short_hash
from posbench.report.table import Table

# Spreadsheets run a cell that starts with one of these as a formula (OWASP, "CSV injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def csv_cell(value):
    """``value`` as a CSV cell that no spreadsheet runs: a string starting with ``=``, ``+``,
    ``-``, ``@``, a tab or a carriage return gets a leading single quote (OWASP's rule); numbers,
    and strings that are plain numbers (``-1.5``), stay as they are."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def csv_text(grid) -> str:
    """Rows of cells as CSV text, every cell through ``csv_cell``."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([csv_cell(c) for c in row] for row in grid)
    return buf.getvalue()


MESSAGE_CAP = 500  # characters of a row's message shown in a report; the row keeps it whole


def capped(message: str, cap: int = MESSAGE_CAP) -> str:
    """``message`` cut to ``cap`` characters, saying so: a 3 MB traceback must not fill a report."""
    message = str(message or "")
    if len(message) <= cap:
        return message
    return f"{message[:cap]}... [cut: {len(message):,} characters in all; the stored row keeps them]"


def row_anchor(run_id, case_id) -> str:
    """The HTML id of a row in the report's appendix; table cells link to it. Characters an id
    should not hold become ``_``, and then a hash of the raw text is appended, so two cases that
    differ only in punctuation never share an id."""
    raw = f"row-{run_id}-{case_id}"
    safe = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "-_.") else "_" for ch in raw)
    return safe if safe == raw else f"{safe[:120]}-{short_hash(raw)}"


def _grid(table: Table) -> list[list[str]]:
    """Header row then one row per method, all as text."""
    out = [[_first_header(table)] + [str(c) for c in table.columns]]
    for row in table.rows:
        out.append([row] + [table.cell(row, c).text for c in table.columns])
    return out


def _first_header(table: Table) -> str:
    return f"{table.row_header} \\ {table.column_header}"


def to_markdown(table: Table) -> str:
    """A GitHub-flavoured table with the title above and the caption below (in italics)."""
    grid = _grid(table)

    def line(cells):
        return "| " + " | ".join(md_text(c) for c in cells) + " |"

    lines = [f"**{md_text(table.title)}**", "", line(grid[0]), "|" + "|".join([" --- "] + [" ---: "] * len(table.columns)) + "|"]
    lines += [line(r) for r in grid[1:]]
    lines += ["", f"*{md_text(table.caption)}*", ""]
    return "\n".join(lines)


def to_csv(table: Table) -> str:
    """The table as displayed (the values with ratios and statuses); ``rows.csv`` has raw numbers.
    Cells that a spreadsheet would run as formulas are neutralised (``csv_cell``)."""
    return csv_text(_grid(table))


_LATEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\^{}",
    "—": "---",
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in str(text))


def to_latex(table: Table) -> str:
    """A booktabs ``table`` environment, ready for ``\\input`` (needs ``\\usepackage{booktabs}``)."""
    grid = _grid(table)
    header = [latex_escape(table.row_header)] + [latex_escape(c) for c in grid[0][1:]]
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        r"\begin{tabular}{l" + "r" * len(table.columns) + "}",
        r"\toprule",
        f"& \\multicolumn{{{max(len(table.columns), 1)}}}{{c}}{{{latex_escape(table.column_header)}}} \\\\",
        " & ".join(header) + r" \\",
        r"\midrule",
    ]
    lines += [" & ".join(latex_escape(c) for c in r) + r" \\" for r in grid[1:]]
    lines += [
        r"\bottomrule",
        r"\end{tabular}",
        f"\\caption{{{latex_escape(table.title)}. {latex_escape(table.caption)}}}",
        f"\\label{{tab:{table.key}}}",
        r"\end{table}",
        "",
    ]
    return "\n".join(lines)


def caption_html(table: Table) -> str:
    """The table's title and caption as a paragraph above it (``caption-KEY``): not a ``<caption>``,
    which a browser lays out in the table's width (a two-column table squeezed it to ~190 px);
    the page's style gives it a reading measure of its own."""
    esc = html_text
    return f'<p class="caption" id="caption-{esc(table.key)}"><b>{esc(table.title)}</b><br>{esc(table.caption)}</p>'


def to_html(table: Table) -> str:
    """An HTML table whose cells link to their row in the appendix and name it in ``title``; its
    caption is ``caption_html``, which it names (``aria-describedby``)."""
    esc = html_text
    parts = [
        f'<table class="results" id="table-{esc(table.key)}" aria-describedby="caption-{esc(table.key)}">',
        "<thead><tr><th>"
        + esc(_first_header(table))
        + "</th>"
        + "".join(f"<th>{esc(str(c))}</th>" for c in table.columns)
        + "</tr></thead><tbody>",
    ]
    for row in table.rows:
        tds = []
        for col in table.columns:
            cell = table.cell(row, col)
            if cell.case_id is None:
                tds.append(f"<td>{esc(cell.text)}</td>")
                continue
            tip = f"case_id={cell.case_id}; run_id={cell.run_id}; status={cell.status}"
            if cell.message:
                tip += f"; {capped(cell.message)}"
            cls = "ok" if cell.status == "ok" else "bad"
            tds.append(
                f'<td class="{cls}" title="{esc(tip)}"><a href="#{row_anchor(cell.run_id, cell.case_id)}">'
                f"{esc(cell.text)}</a></td>"
            )
        parts.append(f"<tr><th>{esc(row)}</th>{''.join(tds)}</tr>")
    parts.append("</tbody></table>")
    return "\n".join(parts)


def to_text(table: Table) -> str:
    """Aligned plain text for the terminal: the title, the grid in padded columns, its note and corpus."""
    grid = _grid(table)
    widths = [max(len(r[i]) for r in grid) for i in range(len(grid[0]))]
    lines = [table.title]
    for r in grid:
        lines.append("  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]))
    return "\n".join(lines + [line for line in (table.note, table.corpus) if line]) + "\n"


# Columns of a run's table.csv: one line per cell, so tables with different columns share a file.
CELL_COLUMNS = [
    "metric",
    "method",
    "column",
    "value",
    "ratio",
    "ratio_lo",
    "ratio_hi",
    "text",
    "status",
    "case_id",
    "run_id",
    "median",
]


def cells_csv(tables: list[Table]) -> str:
    """Every cell of ``tables``, one line each (``CELL_COLUMNS``): the value shown, ratio, its 95%
    interval, the text, and the row's own median (``median``: differs from ``value`` where a paired
    ratio set the value, ``posbench.report.cells``); ``column`` is ``<axis>=<value>``, other grid
    parameters follow the metric name."""
    lines = [CELL_COLUMNS]
    for t in tables:
        rest = " ".join(f"{k}={v}" for k, v in t.rest.items())
        for row in t.rows:
            for col in t.columns:
                c = t.cell(row, col)
                lines.append(
                    [
                        f"{t.metric} {rest}".strip(),
                        row,
                        f"{t.column_header}={col}",
                        "" if c.value is None else repr(c.value),
                        "" if c.ratio is None else f"{c.ratio:.6g}",
                        *(("", "") if c.ratio_interval is None else (f"{x:.6g}" for x in c.ratio_interval)),
                        c.text,
                        c.status,
                        c.case_id or "",
                        c.run_id or "",
                        "" if c.median is None else repr(c.median),
                    ]
                )
    return csv_text(lines)


def write_run_files(tables: list[Table], folder: Path, note: str = "") -> list[Path]:
    """A run's ``table.md`` (``note``, then every table) and ``table.csv`` (``cells_csv``), atomically."""
    md = (note + "\n\n" if note else "") + "\n".join(to_markdown(t) for t in tables)
    return [atomic_write_text(Path(folder) / "table.md", md), atomic_write_text(Path(folder) / "table.csv", cells_csv(tables))]
