"""A docs/results page's charts (issue 69): the report's charts of a run, written as SVG that a
rebuild writes again byte for byte, with the numbers each is drawn from beside it; the page
folder owns its charts/ folder as it owns its pages."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import pytest

from posbench.report import page_charts, page_folder, results_page
from posbench.tasks import find as find_task
from tests.helpers.result_runs import CPU_ENV, WPS, write_run


def test_figure_data_holds_every_line_bar_and_label_a_reader_sees():
    fig, ax = plt.subplots()
    ax.plot([64, 128], [1.5, float("nan")], gid="method:alibi")
    ax.plot([64, 128], [9, 9])  # no gid: a guide line, not data
    ax.bar([1.0], [3.0], width=0.5, gid="method:rotary")
    ax.set_title("t")
    ax.set_xlabel("x")
    data = page_charts.figure_data(fig)
    plt.close(fig)
    (axes,) = data["axes"]
    assert axes["lines"] == [{"gid": "method:alibi", "x": [64.0, 128.0], "y": [1.5, None]}]
    assert axes["bars"] == [{"gid": "method:rotary", "x": 1.0, "height": 3.0}]
    assert (axes["title"], axes["xlabel"]) == ("t", "x")


def test_svg_is_the_same_bytes_on_every_rebuild_and_carries_no_date():
    def draw() -> bytes:
        fig, ax = plt.subplots()
        ax.plot([1, 2, 3], [3, 1, 2], gid="method:a")
        try:
            return page_charts.svg_bytes(fig)
        finally:
            plt.close(fig)

    first = draw()
    assert first == draw() and b"<dc:date>" not in first


def test_a_runs_charts_plot_the_numbers_of_its_rows(tmp_path):
    run = write_run(tmp_path, "cpu-cpu-1a2b3c4d", CPU_ENV)
    charts = page_charts.run_charts(run, run.name, find_task)
    by_title = {c.title.split(",")[0]: json.loads(c.data) for c in charts}
    assert {"Training speed (words/s)", "Evaluation speed (words/s)"} <= set(by_title)
    bars = by_title["Training speed (words/s)"]["axes"][0]["bars"]
    heights = {b["gid"]: [] for b in bars}
    for b in bars:
        heights[b["gid"]].append(b["height"])
    for method, wps in WPS.items():  # train_wps = wps * 64 / seq_len at 64 and 128
        assert sorted(heights[f"method:{method}"]) == pytest.approx(sorted([wps, wps / 2]))
    assert all(c.name.startswith("cpu-cpu-1a2b3c4d-") and c.svg.startswith(b"<?xml") for c in charts)


def test_pages_link_their_charts_and_the_folder_owns_only_what_it_wrote(tmp_path):
    run = write_run(tmp_path, "cpu-cpu-1a2b3c4d", CPU_ENV)
    out = tmp_path / "pages"
    (page,) = results_page.write_pages([run], out, find_task)
    text = page.read_text()
    assert text.index("Summary (") < text.index("### Charts") < text.index("### Tables") < text.index("Command to reproduce")
    for svg in sorted((out / "charts").glob("*.svg")):
        assert f"](charts/{svg.name})" in text and svg.with_suffix(".json").is_file()
    listed = (out / page_folder.MANIFEST).read_text()
    assert all(f"charts/{p.name}\n" in listed for p in (out / "charts").iterdir())
    # a file it did not write in charts/ refuses the next build in one line
    (out / "charts" / "mine.png").write_bytes(b"x")
    with pytest.raises(page_folder.PageError, match="charts/mine.png, which make docs-results did not write"):
        page_folder.owned_pages(out)
