"""Hardening round 5 (issue 56): every file a run or a report writes goes through one no-follow
helper (``posbench.core.files``): a planted link at a lock file, a table or a chart is refused or
replaced, and its target outside the run folder is never created nor written."""

import argparse
import os
import types

import pytest

from posbench.core.files import UnsafeFile, atomic_write_text, open_lock, write_figure
from tests.helpers.result_runs import write_run


@pytest.fixture
def outside(tmp_path):
    """A file outside the run folder that links point at; its text must never change."""
    target = tmp_path / "outside.txt"
    target.write_text("precious\n")
    return target


def test_a_planted_lock_link_creates_nothing_outside(tmp_path):
    from posbench.tasks.extension import finetune

    ckpt = tmp_path / "run" / "checkpoints" / "extension__alibi__L_train=64.pt"
    ckpt.parent.mkdir(parents=True)
    target = tmp_path / "created-outside"
    os.symlink(target, ckpt.with_name(f".{ckpt.name}.lock"))
    with pytest.raises(UnsafeFile, match="is a symbolic link"):
        with finetune.exclusive(ckpt):
            pass
    assert not target.exists()
    with pytest.raises(UnsafeFile):
        open_lock(ckpt.with_name(f".{ckpt.name}.lock"))


def test_precision_tables_and_charts_replace_a_planted_link(tmp_path, outside):
    from posbench.tasks.precision import run as precision_run

    out = tmp_path / "run" / "precision"
    out.mkdir(parents=True)
    for name in ("tables.md", "alibi_staircase_head0.png", "alibi_staircase_head0.svg"):
        os.symlink(outside, out / name)
    s = types.SimpleNamespace(
        analysis_heads=2,
        analysis_length=40,
        analysis_window=16,
        analysis_chart_heads=[0],
        analysis_factor=0.25,
        analysis_dtypes=["float32", "bfloat16"],
    )
    precision_run._bias_counts(types.SimpleNamespace(out_dir=str(tmp_path / "run")), s)
    assert outside.read_text() == "precious\n"
    for name in ("tables.md", "alibi_staircase_head0.png", "alibi_staircase_head0.svg"):
        assert not (out / name).is_symlink() and (out / name).stat().st_size > 0


def test_report_files_replace_a_planted_link(tmp_path, outside):
    from posbench.cli.report_cmds import add_report_parser

    run_dir = write_run(tmp_path / "runs", "r1", {"device": "cpu"})
    out = tmp_path / "o"
    (out / "tables").mkdir(parents=True)
    for name in ("report.md", "rows.csv", "report.html"):
        os.symlink(outside, out / name)
    parser = argparse.ArgumentParser()
    add_report_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["report", str(run_dir), "--out", str(out)])
    assert args.func(args) == 0
    assert outside.read_text() == "precious\n"
    assert not any(p.is_symlink() for p in out.rglob("*"))


def test_the_helpers_replace_links(tmp_path, outside):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.symlink(outside, tmp_path / "t.md")
    os.symlink(outside, tmp_path / "c.svg")
    atomic_write_text(tmp_path / "t.md", "mine\n")
    fig = plt.figure()
    write_figure(fig, tmp_path / "c.svg")
    plt.close(fig)
    assert outside.read_text() == "precious\n"
    assert (tmp_path / "t.md").read_text() == "mine\n" and b"<svg" in (tmp_path / "c.svg").read_bytes()
