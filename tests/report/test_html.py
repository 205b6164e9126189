"""Where things sit in the report: each task's tables with their own charts right below them, the
housekeeping values in one appendix, a page that does not scroll sideways at 1400 px, captions at a
reading measure of their own (not squeezed into a narrow table's width) and the summary first.

The order is checked on the HTML itself (always) and, when a Chromium is installed, on the page
Chromium lays out: it screenshots report.html at 1400 px and reports the page's width, where
each table and chart landed, each caption's width against its table's and the summary's place.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
from glob import glob
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from posbench.report.build import build_report, collect_sections, load_runs
from posbench.tasks import find as find_task
from tests.helpers.report_rows import (
    PRECISION_L_VALID,
    PRECISION_SUITE_METRICS,
    efficiency_rows,
    extrapolation_rows,
    precision_ppl,
    precision_rows,
    retrieval_rows,
    write_run,
)


@pytest.fixture
def runs(tmp_path):
    results = tmp_path / "results"
    write_run(results, efficiency_rows(), metrics=["train_wps", "eval_wps", "peak_mem_train_bytes"])
    write_run(results, extrapolation_rows())
    write_run(results, precision_rows(), metrics=PRECISION_SUITE_METRICS, baseline=None)
    write_run(results, retrieval_rows())
    return results


@pytest.fixture
def report(runs, tmp_path):
    return build_report([runs], tmp_path / "out", find_task=find_task)


# -- the precision section: its own tables, its staircases, its housekeeping in the appendix -----


def _section(sections, heading):
    (section,) = [s for s in sections if s.heading == heading]
    return section


@pytest.mark.parametrize("meta", [True, False], ids=["run.json", "no run.json"])
def test_precision_section_is_its_tables_not_one_table_per_value(tmp_path, meta):
    write_run(tmp_path, precision_rows(), metrics=PRECISION_SUITE_METRICS, baseline=None, meta=meta)
    section = _section(collect_sections(load_runs(tmp_path, find_task=find_task)), "Precision")
    distinct, ppl, diff = (b.table for b in section.blocks)
    assert [t.metric for t in (distinct, ppl, diff)] == ["last_window_distinct@*", "ppl@*", "ppl_diff@*"]
    # bias_counts: methods x dtype, in the order the study lists them
    assert distinct.columns == ["float32", "float16", "bfloat16"] and distinct.column_header == "dtype"
    assert [distinct.cell("alibi", d).text for d in distinct.columns] == ["256", "31", "4"]
    assert [distinct.cell("alibi_triton", d).text for d in distinct.columns] == ["unavailable"] * 3
    # bias_dtype_ppl: one row per bias dtype, L_valid as columns
    assert ppl.rows == ["alibi, float32_bias", "alibi, compute_bias", "alibi_triton"]
    assert ppl.columns == PRECISION_L_VALID
    for lv in PRECISION_L_VALID:
        assert ppl.cell("alibi, compute_bias", lv).value == precision_ppl("compute", lv)
        assert diff.cell("alibi", lv).value == pytest.approx(precision_ppl("compute", lv) - precision_ppl("float32", lv))
    # the housekeeping values: one table, one row per finished case that has them
    (details,) = section.details
    assert details.columns == [
        "best_ppl_eval",
        "final_train_loss",
        "train_steps",
        "train_tokens",
        "train_seconds",
        "reused_checkpoint",
        "n_params",
    ]
    assert details.rows == ["alibi study=bias_dtype_ppl L_train=64"] and details.row_header == "case"
    assert details.cell(details.rows[0], "train_steps").text == "200"
    assert details.cell(details.rows[0], "n_params").text == "120k"


def test_precision_staircases_follow_the_distinct_value_table(tmp_path):
    write_run(tmp_path, precision_rows(), metrics=PRECISION_SUITE_METRICS, baseline=None)
    section = _section(collect_sections(load_runs(tmp_path, find_task=find_task)), "Precision")
    distinct = section.blocks[0]
    drawn = [(stem, title) for source in distinct.charts for stem, title, _ in source()]
    plt.close("all")
    # redrawn from the stored settings (the worker's PNGs may be on another machine), once per head
    assert drawn == [
        ("precision-staircase-head0-8x256", "ALiBi bias staircase, head 0 of 8"),
        ("precision-staircase-head7-8x256", "ALiBi bias staircase, head 7 of 8"),
    ]
    for block in section.blocks[1:]:
        assert [stem for source in block.charts for stem, _, _ in source()] == [block.table.key]
    plt.close("all")


def test_housekeeping_values_go_to_the_appendix_not_to_tables(runs):
    sections = collect_sections(load_runs(runs, find_task=find_task))
    tabulated = {b.table.metric for s in sections for b in s.blocks}
    housekeeping = {"n_params", "batch_size", "train_steps", "train_tokens", "reused_checkpoint", "chance"}
    assert not tabulated & housekeeping
    details = {t.task: t for s in sections for t in s.details}
    assert set(details) == {"efficiency", "extrapolation", "precision", "retrieval"}
    assert details["efficiency"].columns == ["n_params", "batch_size"]  # spreads (train_wps_min) draw error bars
    assert details["retrieval"].columns == ["chance", "train_steps", "n_params"]  # acc@L are points of a curve
    assert len(details["efficiency"].rows) == 11  # finished cases only


def test_markdown_puts_each_chart_under_its_table_and_the_appendix_last(report):
    md = report["report.md"].read_text()
    headings = re.findall(r"^## (.+)$", md, flags=re.M)
    # retrieval: its per-probe accuracy tables only (the summary metrics are their columns)
    assert headings == [
        "Summary",
        "Runs",
        "Efficiency",
        "Extrapolation",
        "Precision",
        "Retrieval accuracy (Wilson 95% intervals)",
        "Appendix: run details",
        "Cases that did not finish",
    ]
    assert "Memory is in GiB" in md.split("## Runs")[0]
    sections = dict(re.findall(r"^## (.+?)\n(.*?)(?=^## |\Z)", md, flags=re.M | re.S))
    # the loss-by-position chart belongs to the nonoverlapping perplexity table, not to precision
    extrapolation = sections["Extrapolation"]
    assert "position-loss" in extrapolation and "position-loss" not in sections["Precision"]
    assert (
        extrapolation.index("nonoverlapping evaluation (the paper's default)**")
        < extrapolation.index("position-loss")
        < extrapolation.index("sliding-window evaluation, stride 32**")
    )
    precision = sections["Precision"]
    assert (
        precision.index("**Distinct bias values")
        < precision.index("precision-staircase-head0")
        < precision.index("precision-staircase-head7")
        < precision.index("**Perplexity by bias dtype")
    )
    assert "![" not in sections["Appendix: run details"]
    assert sections["Appendix: run details"].count("**Run details, ") == 4


# -- the HTML: DOM order always, layout in Chromium when there is one -----------------------------


class _Order(HTMLParser):
    """The report's results tables, charts and h2 headings in document order."""

    def __init__(self):
        super().__init__()
        self.events: list[tuple[str, str]] = []
        self._h2: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table" and "results" in (attrs.get("class") or ""):
            self.events.append(("table", attrs["id"].removeprefix("table-")))
        elif tag == "figure" and "chart" in (attrs.get("class") or ""):
            self.events.append(("chart", attrs["data-table"]))
        elif tag == "h2":
            self._h2 = []

    def handle_data(self, data):
        if self._h2 is not None:
            self._h2.append(data)

    def handle_endtag(self, tag):
        if tag == "h2" and self._h2 is not None:
            self.events.append(("h2", "".join(self._h2)))
            self._h2 = None


def _html_order(html: str) -> list[tuple[str, str]]:
    parser = _Order()
    parser.feed(html)
    return parser.events


def test_html_charts_follow_the_table_they_belong_to(runs, report):
    html = report["report.html"].read_text()
    events = _html_order(html)
    last_table = None
    charts_after = {}
    for kind, value in events:
        if kind == "table":
            last_table = value
        elif kind == "chart":
            assert value == last_table, f"chart of {value} sits after table {last_table}"
            charts_after.setdefault(value, 0)
            charts_after[value] += 1
        elif kind == "h2":
            last_table = None  # a chart never crosses into the next section
    sections = collect_sections(load_runs(runs, find_task=find_task))
    for section in sections:
        for block in section.blocks:
            drawn = [fig for source in block.charts for _, _, fig in source()]
            plt.close("all")
            assert charts_after.get(block.table.key, 0) == len(drawn), block.table.key
    headings = [value for kind, value in events if kind == "h2"]
    appendix = headings.index("Appendix: run details")
    assert all(i < events.index(("h2", "Appendix: run details")) for i, e in enumerate(events) if e[0] == "chart")
    assert headings[appendix + 1 :] == ["Environments", "Appendix: all stored rows"]
    assert html.count('<figure class="chart"') == sum(1 for k in report if k.endswith(".png"))


def test_html_keeps_wide_content_inside_the_page():
    from posbench.report.html import _STYLE

    # images shrink to the column; tables (run details, all rows) scroll inside their own box
    assert re.search(r"figure\.chart img \{[^}]*max-width: 100%", _STYLE)
    assert re.search(r"\.scroll \{[^}]*overflow-x: auto", _STYLE)
    assert "overflow-wrap: anywhere" in _STYLE


def _chromium() -> str | None:
    """A Chromium or Chrome binary: $POSBENCH_CHROMIUM, one on PATH, or a Playwright download."""
    if os.environ.get("POSBENCH_CHROMIUM"):
        return os.environ["POSBENCH_CHROMIUM"]
    for name in (
        "chromium",
        "chromium-browser",
        "chromium-headless-shell",
        "google-chrome",
        "google-chrome-stable",
        "headless_shell",
    ):
        if shutil.which(name):
            return shutil.which(name)
    home = Path(os.environ.get("PLAYWRIGHT_BROWSERS_PATH", Path.home() / ".cache" / "ms-playwright"))
    found = sorted(
        glob(str(home / "chromium*" / "chrome-linux*" / "chrome"))
        + glob(str(home / "chromium_headless_shell*" / "chrome-linux*" / "headless_shell"))
    )
    return found[-1] if found else None


PROBE = """<script>
window.addEventListener('load', function () {
  var d = document.documentElement, out = {scrollWidth: d.scrollWidth, clientWidth: d.clientWidth, boxes: [],
                                            captions: [], summary: null};
  document.querySelectorAll('table.results, figure.chart').forEach(function (el) {
    var r = el.getBoundingClientRect();
    out.boxes.push([el.tagName.toLowerCase(), el.id.replace(/^table-/, '') || el.getAttribute('data-table'),
                    r.top + window.scrollY, r.bottom + window.scrollY, r.right]);
  });
  // each caption: its width, its text's length, its table's width and one "ch" of its font in px
  document.querySelectorAll('p.caption').forEach(function (el) {
    var ch = document.createElement('span');
    ch.style.cssText = 'display:inline-block;width:100ch;visibility:hidden';
    el.appendChild(ch);
    var chPx = ch.getBoundingClientRect().width / 100;
    el.removeChild(ch);
    var table = document.getElementById(el.id.replace(/^caption-/, 'table-'));
    out.captions.push([el.id, el.getBoundingClientRect().width, el.textContent.length,
                       table ? table.getBoundingClientRect().width : null, chPx,
                       el.parentElement.getBoundingClientRect().width]);
  });
  var s = document.getElementById('summary');
  if (s) {
    var r = s.getBoundingClientRect();
    out.summary = {top: r.top + window.scrollY, right: r.right, items: s.querySelectorAll('li').length};
  }
  var pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def _browse(binary: str, page: Path, *flags: str) -> str:
    cmd = [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        "--virtual-time-budget=10000",
        *flags,
        page.as_uri(),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _wide_report(tmp_path) -> dict:
    """An efficiency report with 20 lengths: a table far wider than the page."""
    wide = []
    for L in [2**k for k in range(6, 26)]:
        for r in efficiency_rows()[:3]:
            row = json.loads(json.dumps(r))
            row["params"] = {"seq_len": L}
            row["case_id"] = f"efficiency/{row['method']}/seq_len={L}"
            wide.append(row)
    return build_report([write_run(tmp_path / "wide-runs", wide)], tmp_path / "wide", find_task=find_task)


@pytest.mark.subprocess
def test_a_wide_table_sits_in_its_own_scroll_box(tmp_path):
    html = _wide_report(tmp_path)["report.html"].read_text()
    assert html.count('<div class="scroll"><table class="results"') == html.count('<table class="results"') > 0
    assert '<div class="scroll"><table class="appendix">' in html


def _layout(binary: str, html: str, tmp_path: Path, name: str) -> dict:
    """Chromium's layout of ``html`` at 1400 px: page widths and each table's and chart's box."""
    probe = tmp_path / f"{name}.html"
    probe.write_text(html.replace("</body>", PROBE + "</body>"))
    found = re.search(r'<pre id="probe">(.*?)</pre>', _browse(binary, probe, "--dump-dom"), flags=re.S)
    assert found, "the probe script did not run"
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


@pytest.mark.subprocess
@pytest.mark.skipif(
    _chromium() is None,
    reason="no Chromium/Chrome found (PATH, $POSBENCH_CHROMIUM, Playwright); "
    "install one (Debian: apt-get install chromium-headless-shell) to screenshot report.html",
)
def test_report_in_chromium_at_1400px_does_not_scroll_sideways(report, tmp_path):
    binary = _chromium()
    html = report["report.html"].read_text()
    shot = tmp_path / "report.png"
    _browse(binary, report["report.html"], f"--screenshot={shot}")
    width, height = struct.unpack(">II", shot.read_bytes()[16:24])  # the PNG's IHDR
    assert (width, height) == (1400, 1000)

    layout = _layout(binary, html, tmp_path, "probe")
    assert layout["scrollWidth"] <= layout["clientWidth"] <= 1400  # no sideways scrolling
    boxes = layout["boxes"]
    assert all(right <= layout["clientWidth"] for *_, right in boxes)
    bottom_of = {}
    for kind, key, top, bottom, _right in boxes:
        if kind == "table":
            bottom_of[key] = bottom
        else:  # laid out below its own table
            assert key in bottom_of and top >= bottom_of[key], key
    assert sum(1 for b in boxes if b[0] == "figure") == html.count('<figure class="chart"')

    # a table far wider than the page scrolls inside its box; the page itself still fits
    wide = _layout(binary, _wide_report(tmp_path)["report.html"].read_text(), tmp_path, "wide")
    assert max(right for kind, *_, right in wide["boxes"] if kind == "table") > 1400  # it is that wide
    assert wide["scrollWidth"] <= wide["clientWidth"]


def _narrow_report(tmp_path) -> dict:
    """An efficiency report at one length: two-column tables under long captions."""
    rows = [r for r in efficiency_rows() if r["params"]["seq_len"] == 256]
    return build_report([write_run(tmp_path / "narrow-runs", rows)], tmp_path / "narrow", find_task=find_task)


@pytest.mark.subprocess
@pytest.mark.skipif(
    _chromium() is None,
    reason="no Chromium/Chrome found (PATH, $POSBENCH_CHROMIUM, Playwright); "
    "install one (Debian: apt-get install chromium-headless-shell) to lay out report.html",
)
def test_in_chromium_captions_read_at_their_own_measure_and_the_summary_comes_first(report, tmp_path):
    binary = _chromium()
    for name, written in (("full", report), ("narrow", _narrow_report(tmp_path))):
        layout = _layout(binary, written["report.html"].read_text(), tmp_path, name)
        captions = layout["captions"]
        assert len(captions) == written["report.html"].read_text().count('<p class="caption"') > 0
        narrow = 0
        for key, width, length, table_width, ch, column in captions:
            assert width <= 72 * ch + 1, key  # never wider than a reading measure
            if length > 120:  # a long caption fills its measure (or the column), whatever its table's width
                assert width >= min(72 * ch, column) - 1, (key, width, table_width)
            if table_width is not None and table_width < 400:  # a two-column table: ~270-310 px
                narrow += 1
                assert width > 1.5 * table_width, (key, width, table_width)  # not squeezed to the table
        if name == "narrow":
            assert narrow >= 4  # the two-column tables (words/s and memory) are there to check
        # the summary: before every table, on the first screen, inside the page
        summary, first_table = layout["summary"], min(top for kind, _, top, *_ in layout["boxes"] if kind == "table")
        assert summary is not None and summary["items"] >= 2
        assert summary["top"] < min(first_table, 1000) and summary["right"] <= layout["clientWidth"]


def test_a_family_members_spread_over_seeds_is_its_error_bar_not_a_column(tmp_path):
    rows = precision_rows()
    for row in rows:
        for key in [k for k in row["metrics"] if k.startswith("ppl@")]:
            row["metrics"][f"{key}_std"] = 0.5
    write_run(tmp_path, rows, metrics=PRECISION_SUITE_METRICS, baseline=None)
    section = _section(collect_sections(load_runs(tmp_path, find_task=find_task)), "Precision")
    ppl = section.blocks[1].table
    assert ppl.metric == "ppl@*" and ppl.columns == PRECISION_L_VALID
    value = ppl.cell("alibi, compute_bias", 2048).value
    assert ppl.cell("alibi, compute_bias", 2048).spread == (value - 0.5, value + 0.5)
    assert ppl.spread == "± std over seeds"
