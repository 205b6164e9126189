"""Hardening rounds 5 and 6 (issues 56, 67), a regression of round 3: a cases.jsonl whose last row lost its
newline keeps that row everywhere: the resumed run counts it done, and its printed table and
table.md show it."""

import json

import pytest

from posbench.cli import app as cli
from tests.helpers.suites import make_suite


@pytest.mark.subprocess
def test_the_last_row_without_newline_stays_in_the_printed_table(tmp_path, capsys):
    make_suite(tmp_path, ["sinusoidal", "alibi"], grid="[1]")
    base = ["--suite", str(tmp_path / "t.yaml"), "--device", "cpu", "--results", str(tmp_path / "res"), "--run-id", "r"]
    assert cli.main(base) == 0
    rows = tmp_path / "res" / "t" / "r" / "cases.jsonl"
    rows.write_bytes(rows.read_bytes().rstrip(b"\n"))
    capsys.readouterr()
    assert cli.main(base) == 0
    out = capsys.readouterr().out
    assert "0 case(s) run, 2 already done" in out
    table = [line for line in out.splitlines() if line.startswith(("sinusoidal", "alibi", "| sinusoidal", "| alibi"))]
    assert len(table) == 2, out
    assert "alibi" in (tmp_path / "res" / "t" / "r" / "table.md").read_text()


@pytest.mark.subprocess
def test_the_last_row_without_newline_stays_in_the_table_of_a_run_that_adds_rows(tmp_path, capsys):
    # issue 67: three methods in rounds, the last row (the third method's last round) without its
    # newline; the next run appends a joining method's rows after it (the newline put back first)
    make_suite(tmp_path, ["sinusoidal", "alibi", "rotary"], grid="[1]", rounds=2)
    base = ["--suite", str(tmp_path / "t.yaml"), "--device", "cpu", "--results", str(tmp_path / "res"), "--run-id", "r"]
    assert cli.main(base) == 0
    rows = tmp_path / "res" / "t" / "r" / "cases.jsonl"
    rows.write_bytes(rows.read_bytes().rstrip(b"\n"))
    capsys.readouterr()
    assert cli.main([*base, "--methods", "sinusoidal,alibi,rotary,nope"]) == 0
    out = capsys.readouterr().out
    assert "case(s) run, 6 already done" in out
    table = [line.split()[0] for line in out.splitlines() if line.startswith(("sinusoidal ", "alibi ", "rotary ", "nope "))]
    assert sorted(table) == ["alibi", "nope", "rotary", "sinusoidal"], out
    assert all(json.loads(line)["case_id"] for line in rows.read_bytes().splitlines())  # a row a line
