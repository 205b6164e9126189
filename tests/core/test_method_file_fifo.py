"""Hardening round 5 (issue 56): a FIFO named ``*.py`` in a methods folder is skipped with one
warning naming it, never opened (``list`` waited 120 s for the child reading it)."""

import os

import pytest

from posbench.cli import app as cli


@pytest.mark.subprocess  # list reads the method files in a child process
def test_list_skips_a_fifo_named_py_with_one_warning(tmp_path, capsys):
    os.mkfifo(tmp_path / "pipe.py")
    assert cli.main(["list", "--methods-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert f"warning: method file {(tmp_path / 'pipe.py').resolve()} skipped: not a regular file" in err
    assert "alibi" in out
