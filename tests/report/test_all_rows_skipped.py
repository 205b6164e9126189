"""Hardening round 5 (issue 56): a report whose every row was skipped (odd grid values: "abc",
null, 1.5, true where the task's grid takes an integer) says so in one line with the count; it
never claims the runs hold no rows."""

from posbench.cli import app as cli
from tests.helpers.report_rows import efficiency_rows, write_run


def test_every_row_skipped_is_said_with_the_count(tmp_path, capsys):
    rows = efficiency_rows()
    for i, row in enumerate(rows):
        row["params"]["seq_len"] = ["abc", None, 1.5, True][i % 4]
    run_dir = write_run(tmp_path / "results", rows, meta=False)
    assert cli.main(["report", str(run_dir), "--out", str(tmp_path / "o")]) == cli.EXIT_USAGE
    err = capsys.readouterr().err.splitlines()
    assert len(err) == len(rows) + 1 and all("params.seq_len: expected a number" in line for line in err[:-1])
    assert err[-1].endswith(
        f"the runs hold no usable rows; all {len(rows)} of their rows were skipped (the warnings above say why)"
    )
