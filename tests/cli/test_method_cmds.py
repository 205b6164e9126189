"""Hardening round 5 (issue 56): ``check`` of a method that sleeps ends in seconds with one line:
without ``--timeout`` each check gets ``CHECK_STEP_S`` (5 s on a CPU, where the built-in methods
take under 0.3 s), not only the 600 s of all the checks."""

import pytest

from posbench.cli.method_cmds import CHECK_STEP_S
from tests.helpers.user_code import SLEEPS_WHEN_BUILT, bench, plugin


@pytest.mark.subprocess
def test_check_of_a_method_that_sleeps_is_one_line_after_the_step_limit(tmp_path):
    plugins = plugin(tmp_path / "plugins", "slow.py", "slow", tail=SLEEPS_WHEN_BUILT)
    # all the checks' limit stays at 600 s: only the per-check limit can end it in time
    proc = bench(tmp_path, "check", "slow", "--methods-dir", str(plugins), limit=120, timeout=100)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"the checks of slow: a check gave no answer within {CHECK_STEP_S['cpu']:g} s" in proc.stderr
    assert proc.stderr.count("\n") == 1
