"""Two runs of the same cases: the report says which rows the later run superseded, in report.md
and report.html, instead of dropping them silently; runs of different cases or pooled counts say nothing."""

from __future__ import annotations

from posbench.report.build import build_report
from posbench.tasks import find as find_task
from tests.helpers.report_rows import efficiency_rows, lengthgen_rows, retrieval_rows, write_run

LINE = "run run-a's {n} rows superseded by run run-b (same case, newer)"


def _report(tmp_path, *runs):
    root = tmp_path / "runs"
    for rows in runs:
        write_run(root, rows, metrics=["train_wps"])
    build_report([root], tmp_path / "out", find_task=find_task)
    return (tmp_path / "out" / "report.md").read_text(), (tmp_path / "out" / "report.html").read_text()


def test_the_older_runs_rows_are_named_as_superseded(tmp_path):
    md, html = _report(tmp_path, efficiency_rows("run-a"), efficiency_rows("run-b", scale=0.9))
    line = LINE.format(n=len(efficiency_rows()))  # every case of run-a ran again in run-b
    assert f"## Superseded rows\n\n- {line}\n" in md
    escaped = line.replace("'", "&#x27;")
    assert f'<ul class="superseded"><li>{escaped}</li></ul>' in html
    assert f"{2 * len(efficiency_rows())} stored rows from 2 run folder(s), {len(efficiency_rows())} of them superseded" in html
    assert "run run-b's" not in md  # the newer run's rows are the ones shown


def test_a_partial_rerun_supersedes_only_its_cases(tmp_path):
    rerun = [r for r in efficiency_rows("run-b") if r["params"]["seq_len"] == 256]
    md, _ = _report(tmp_path, efficiency_rows("run-a"), rerun)
    assert f"- {LINE.format(n=len(rerun))}\n" in md


def test_runs_of_other_cases_and_pooled_counts_supersede_nothing(tmp_path):
    other = [
        dict(
            r,
            params={"seq_len": 2 * r["params"]["seq_len"]},
            case_id=r["case_id"].replace(f"seq_len={r['params']['seq_len']}", f"seq_len={2 * r['params']['seq_len']}"),
        )
        for r in efficiency_rows("run-b")
        if r["params"]["seq_len"] == 1024
    ]  # seq_len 2048: a new case
    md, html = _report(tmp_path, efficiency_rows("run-a"), other)
    assert "superseded" not in md and "superseded" not in html.split("</style>")[1]
    md, _ = _report(tmp_path / "pooled", retrieval_rows("run-a"), retrieval_rows("run-b"))
    assert "superseded" not in md  # retrieval pools both runs' counts
    md, _ = _report(tmp_path / "pooled-lengthgen", lengthgen_rows("run-a"), lengthgen_rows("run-b"))
    assert "superseded" not in md  # lengthgen's accuracy tables pool both runs' counts too
