"""Hardening round 5 (issue 56): ``seeds=[-1]`` was accepted, then every case errored (numpy's
generators take 0..2^32-1); now it is one line before anything runs."""

import pytest

from posbench.cli import app as cli


@pytest.mark.subprocess  # the CLI reads the method files in a child process
@pytest.mark.parametrize("seeds", ["[-1]", "[0, 4294967296]"])
def test_seeds_outside_what_the_generators_take_are_refused_up_front(seeds, tmp_path, capsys):
    argv = ["--suite", "extrapolation", "--profile", "cpu", "--results", str(tmp_path), "--set", f"seeds={seeds}", "--dry-run"]
    assert cli.main(argv) == cli.EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "--set seeds: seeds[" in err
