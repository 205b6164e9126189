"""The run's exit status tells the truth (issue 42): a case that ended error/timeout/oom/diverged
gives exit 3 after every row and the tables are written; ``unavailable`` is no failure;
``--allow-failures`` gives 0. ``--dry-run`` and ``validate --data`` say a missing corpus up front."""

import json

import pytest

from posbench.cli import app as cli
from tests.helpers.suites import make_suite, write_suite


def _run(tmp_path, *more) -> int:
    return cli.main(
        [
            "--suite",
            str(tmp_path / "t.yaml"),
            "--device",
            "cpu",
            "--results",
            str(tmp_path / "res"),
            "--quiet",
            "--run-id",
            "r",
            *more,
        ]
    )


def _rows(tmp_path) -> dict:
    lines = (tmp_path / "res" / "t" / "r" / "cases.jsonl").read_text().splitlines()
    return {json.loads(line)["case_id"]: json.loads(line)["status"] for line in lines}


@pytest.mark.subprocess
def test_a_failing_case_exits_3_after_every_row_and_the_tables_are_written(tmp_path, capsys):
    make_suite(tmp_path, ["sinusoidal", "rotary"], grid="[1, 2]", by_method={"rotary/n=1": "raise", "rotary/n=2": "nan"})
    assert _run(tmp_path) == cli.EXIT_CASES_FAILED == 3
    assert _rows(tmp_path) == {"sinusoidal/n=1": "ok", "sinusoidal/n=2": "ok", "rotary/n=1": "error", "rotary/n=2": "diverged"}
    assert (tmp_path / "res" / "t" / "r" / "table.md").is_file()
    err = capsys.readouterr().err
    assert "2 case(s) failed (1 error, 1 diverged); exit status 3" in err and err.count("\n") == 1
    # the same folder, resumed: nothing runs, the failure still shows; --allow-failures gives 0
    assert _run(tmp_path) == 3
    assert _run(tmp_path, "--allow-failures") == 0
    assert "exit 0 (--allow-failures)" in capsys.readouterr().err


@pytest.mark.subprocess
def test_a_run_with_only_unavailable_cases_exits_0(tmp_path, never_here):
    make_suite(tmp_path, ["sinusoidal", never_here])
    assert _run(tmp_path) == 0
    assert _rows(tmp_path) == {"sinusoidal/n=1": "ok", "never_here/n=1": "unavailable"}


def test_failed_exit_counts_each_failing_status_and_nothing_else(capsys):
    rows = [{"status": s} for s in ("ok", "unavailable", "timeout", "oom", "error", "error")]
    assert cli.failed_exit(rows, allow_failures=False) == 3
    assert "4 case(s) failed (2 error, 1 timeout, 1 oom)" in capsys.readouterr().err
    assert cli.failed_exit(rows[:2], allow_failures=False) == 0
    assert capsys.readouterr().err == ""


def test_run_help_lists_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "3 a case ended error/timeout/oom/diverged" in out and "--allow-failures" in out


CORPUS_SUITE = """\
name: t
description: a corpus that is not there
version: 1
task: extrapolation
methods: [alibi]
grid:
  L_train: [64]
settings:
  model: tiny
  steps: 5
  warmup_steps: 0
  corpus: {corpus}
"""


@pytest.mark.subprocess  # the dry run's plan asks each method, in a child process, whether it runs here
@pytest.mark.parametrize(
    "corpus, expected",
    [
        (
            "{kind: wikitext-103}",
            "DataError: wikitext-103: no data folder given; pass path=DIR (--data DIR) or set POSBENCH_DATA_DIR, "
            "or run `python bench.py download wikitext-103 --data DIR`\n",
        ),
        ("{kind: text, path: /nonexistent/corpus.txt}", "DataError: text: file /nonexistent/corpus.txt not found\n"),
    ],
)
def test_dry_run_says_a_missing_corpus_in_one_line(tmp_path, monkeypatch, capsys, corpus, expected):
    monkeypatch.delenv("POSBENCH_DATA_DIR", raising=False)
    write_suite(tmp_path, CORPUS_SUITE.format(corpus=corpus))
    assert _run(tmp_path, "--dry-run") == cli.EXIT_USAGE
    assert capsys.readouterr().err == expected
    assert not (tmp_path / "res").exists()


@pytest.mark.subprocess  # bench.py run reads the method files in a child
def test_a_run_without_its_corpus_refuses_before_any_case(tmp_path, monkeypatch, capsys):
    """Issue 66: a gpu profile without WikiText started and every case ended ``error``; now the run
    itself (not only --dry-run) says it in one line naming `bench.py download`, nothing written."""
    monkeypatch.delenv("POSBENCH_DATA_DIR", raising=False)
    write_suite(tmp_path, CORPUS_SUITE.format(corpus="{kind: wikitext-103}"))
    assert _run(tmp_path) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "python bench.py download" in err
    assert not (tmp_path / "res").exists()


@pytest.mark.subprocess
def test_a_wikitext_2_folder_without_a_train_split_is_said_in_one_line(tmp_path, capsys):
    """Issue 66: ``--data`` on WikiText-2 as shipped trained on its test split with no line saying so."""
    folder = tmp_path / "data" / "wikitext-2"
    folder.mkdir(parents=True)
    for split in ("valid", "test"):  # as /work/shared/data/wikitext-2: no train.txt
        (folder / f"{split}.txt").write_text("a b c\n")
    write_suite(tmp_path, CORPUS_SUITE.format(corpus="{kind: synthetic}"))
    assert _run(tmp_path, "--dry-run", "--data", str(tmp_path / "data")) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert notes == [
        f"note: wikitext: {folder} has no training split, so the models train on its test split and are evaluated "
        "on valid; for a training split, run `python bench.py download wikitext-103 --data DIR`"
    ]
    # asked for in so many words (splits train: test): said too
    corpus = "{kind: wikitext, path: %s, splits: {train: test, valid: valid}}" % (tmp_path / "data")
    write_suite(tmp_path, CORPUS_SUITE.format(corpus=corpus))
    assert _run(tmp_path, "--dry-run") == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert notes == [f"note: wikitext: training on the test split of {folder} (splits train: test), not on a training split"]


@pytest.mark.subprocess
def test_dry_run_and_validate_accept_a_corpus_that_is_there(tmp_path, capsys):
    folder = tmp_path / "data" / "wikitext-2"
    folder.mkdir(parents=True)
    for split in ("train", "valid", "test"):
        (folder / f"{split}.txt").write_text("a b c\n")
    write_suite(tmp_path, CORPUS_SUITE.format(corpus="{kind: synthetic}"))
    assert _run(tmp_path, "--dry-run", "--data", str(tmp_path / "data")) == 0
    assert cli.main(["validate", str(tmp_path / "t.yaml"), "--data", str(tmp_path / "data")]) == 0
    capsys.readouterr()
    assert cli.main(["validate", str(tmp_path / "t.yaml"), "--data", str(tmp_path)]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("DataError: wikitext: no WikiText files") and err.count("\n") == 1
