"""Method files are user code: importing one that blocks or calls sys.exit neither hangs nor
silently ends `run`, `list --methods-dir` or `check` (issue 26, hangs). The answer is a row (run)
or one line (list, check)."""

import subprocess
import time
from pathlib import Path

import pytest

from posbench.cli.app import EXIT_CASES_FAILED
from posbench.core.registry import IMPORT_LIMIT_ENV
from tests.helpers import user_code
from tests.helpers.user_code import BLOCKS, PLUGIN, rows, suite

EXITS = dict(module="sys", action="sys.exit(3)")


def bench(cwd: Path, *args: str, limit: float = 20.0, timeout: float = 240) -> subprocess.CompletedProcess:
    """The CLI with short time limits (the defaults are minutes): a hang shows as the subprocess
    running past its own timeout, which fails the test instead of hanging it."""
    return user_code.bench(cwd, *args, limit=limit, timeout=timeout)


def plugin(folder: Path, file: str, kind: dict, name: str) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / file).write_text(PLUGIN.format(name=name, **kind))
    return folder


@pytest.mark.subprocess
def test_run_a_plugin_that_exits_at_import_is_an_error_row_and_the_others_run(tmp_path):
    plugins = plugin(tmp_path / "plugins", "exits.py", EXITS, '"exits"')
    proc = bench(
        tmp_path,
        "--suite",
        str(suite(tmp_path, "sinusoidal, exits")),
        "--methods-dir",
        str(plugins),
        "--results",
        "results",
        "--quiet",
        limit=120,
    )
    assert proc.returncode == EXIT_CASES_FAILED, proc.stderr  # the run ended, an error row in it (issue 42)
    found = rows(tmp_path)
    assert found["sinusoidal"]["status"] == "ok"
    assert found["exits"]["status"] == "error"
    assert "cannot ask exits whether it runs here" in found["exits"]["message"]
    assert "exit code 3" in found["exits"]["message"]


@pytest.mark.subprocess
def test_run_a_plugin_that_blocks_at_import_is_a_row_after_the_time_limit(tmp_path):
    plugins = plugin(tmp_path / "plugins", "blocks.py", BLOCKS, '"blocks"')
    proc = bench(
        tmp_path,
        "--suite",
        str(suite(tmp_path, "blocks")),
        "--methods-dir",
        str(plugins),
        "--results",
        "results",
        "--quiet",
        limit=5,
    )
    assert proc.returncode == EXIT_CASES_FAILED, proc.stderr  # the run ended, an error row in it (issue 42)
    found = rows(tmp_path)["blocks"]
    assert found["status"] == "error" and "no answer after 5 s" in found["message"]


@pytest.mark.parametrize("kind, says", [(EXITS, "exit code 3"), (BLOCKS, "no answer after 5 s")], ids=["exits", "blocks"])
@pytest.mark.subprocess
def test_list_with_a_plugin_whose_name_needs_an_import_is_one_line(tmp_path, kind, says):
    # A computed name: listing must import the file to learn it.
    plugins = plugin(tmp_path / "plugins", "late.py", kind, '"la" + "te"')
    proc = bench(tmp_path, "list", "--methods-dir", str(plugins), limit=5)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and says in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("kind, says", [(EXITS, "exit code 3"), (BLOCKS, "no answer after 5 s")], ids=["exits", "blocks"])
@pytest.mark.subprocess
def test_check_with_a_plugin_that_exits_or_blocks_at_import_is_one_line(tmp_path, kind, says):
    plugins = plugin(tmp_path / "plugins", "bad.py", kind, '"bad"')
    proc = bench(tmp_path, "check", "bad", "--methods-dir", str(plugins), limit=5)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and says in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.subprocess
def test_check_runs_the_checks_under_a_time_limit(tmp_path):
    slow = PLUGIN.format(module="time", action="", name='"slow"') + ("\n    def __init__(self, cfg):\n        time.sleep(1000)\n")
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "slow.py").write_text(slow)
    # (the checks never end: the test waits out the whole limit, so it is short)
    proc = bench(tmp_path, "check", "slow", "--methods-dir", str(tmp_path / "plugins"), "--timeout", "10", limit=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "the checks of slow: no answer after 10 s" in proc.stderr and proc.stderr.count("\n") == 1


FORKS = """import os
import sys
import time
from pathlib import Path
if os.fork() == 0:  # a child that would outlive the worker
    Path({pids!r}, str(os.getpid())).touch()
    time.sleep(120)
    os._exit(0)
from posbench.core.method import PositionMethod
from posbench.core.registry import register


@register
class Forks(PositionMethod):
    name = "forks"
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has ended; only its parent's wait is missing


@pytest.mark.subprocess
def test_a_plugin_that_forks_leaves_no_process_behind(tmp_path):
    """Issue 44: a method file that forks at import (in the worker, and in the process that asks
    whether it runs here) must not leave its child running after bench.py exits."""
    pids = tmp_path / "pids"
    pids.mkdir()
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "forks.py").write_text(FORKS.format(pids=str(pids)))
    proc = bench(
        tmp_path,
        "--suite",
        str(suite(tmp_path, "forks")),
        "--methods-dir",
        str(tmp_path / "plugins"),
        "--results",
        str(tmp_path / "results"),
    )
    assert proc.returncode == 0, proc.stderr
    assert rows(tmp_path)["forks"]["status"] == "ok"
    forked = [int(p.name) for p in pids.iterdir()]
    assert forked, "the plugin's child never started"
    deadline = time.monotonic() + 10
    while any(map(_alive, forked)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in forked if _alive(pid)], "a forked child outlived bench.py"


# Hardening round 5 (issue 56): a plugin that blocks at import holds ``run`` for the import limit
# (``POSBENCH_IMPORT_TIMEOUT_S``, default 5 s), not the 120 s of the child process that asks each
# method whether it runs here: its file is imported under that limit first, and its cases are an
# error row naming the limit while the other methods run.


@pytest.mark.subprocess
def test_a_plugin_blocking_at_import_is_cut_at_the_import_limit(tmp_path):
    plugins = user_code.plugin(tmp_path / "plugins", "blocks.py", "blocks", **BLOCKS)
    argv = ["--suite", str(suite(tmp_path, "sinusoidal, blocks")), "--methods-dir", str(plugins), "--results", "results"]
    # the child's own limit stays at 120 s: only the import limit can end the question in time
    proc = user_code.bench(tmp_path, *argv, "--quiet", limit=120, timeout=110, env={IMPORT_LIMIT_ENV: "1"})
    assert proc.returncode == EXIT_CASES_FAILED, proc.stderr
    found = rows(tmp_path)
    assert found["sinusoidal"]["status"] == "ok"
    assert found["blocks"]["status"] == "error" and "its import did not finish within 1 s" in found["blocks"]["message"]


# Hardening round 6 (issue 67, left from round 3): the import limit holds in the worker too. A
# file that imports at once when the runner asks whether it runs here, and blocks in the worker
# (a lock, a network share), used to hold the worker until the case's timeout: with ``pairing:
# windows`` one process holds every method of a grid point, so the other method's case became a
# ``timeout`` row. The worker imports the user method file its case needs under the limit first.

BLOCKS_THE_SECOND_TIME = dict(
    module="pathlib, time",
    action="if pathlib.Path(__file__ + '.seen').exists():\n    time.sleep(1000)\npathlib.Path(__file__ + '.seen').touch()",
)


@pytest.mark.parametrize("pairing", ["rounds", "windows"])
@pytest.mark.subprocess
def test_a_plugin_blocking_in_the_worker_costs_only_its_own_case(tmp_path, pairing):
    plugins = user_code.plugin(tmp_path / "plugins", "blocks.py", "blocks", **BLOCKS_THE_SECOND_TIME)
    settings = f"{{timeout_s: 40, behaviour: load, pairing: {pairing}}}"
    argv = [
        "--suite",
        str(suite(tmp_path, "sinusoidal, blocks", settings)),
        "--methods-dir",
        str(plugins),
        "--results",
        "results",
    ]
    proc = user_code.bench(tmp_path, *argv, "--quiet", limit=120, timeout=200, env={IMPORT_LIMIT_ENV: "1"})
    assert proc.returncode == EXIT_CASES_FAILED, proc.stderr
    found = rows(tmp_path)
    assert found["sinusoidal"]["status"] == "ok", found["sinusoidal"]["message"]
    assert found["blocks"]["status"] == "error", found["blocks"]["message"]
    assert "its import did not finish within 1 s" in found["blocks"]["message"]  # not the case's 40 s timeout
