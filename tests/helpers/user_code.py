"""A method plugin that misbehaves (blocks at import, or sleeps when built) and the CLI run in a
child with short time limits: what the wait tests of rounds 1 and 5 run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from posbench.core.registry import TASKS_ENV_PATH

REPO = Path(__file__).resolve().parents[2]
PLUGIN = """import {module}
{action}
from posbench.core.method import PositionMethod
from posbench.core.registry import register


@register
class Plugin(PositionMethod):
    name = {name}
"""
BLOCKS = dict(module="time", action="time.sleep(1000)")
SLEEPS_WHEN_BUILT = "\n    def __init__(self, cfg):\n        time.sleep(1000)\n"
# The CLI with the child processes' limits set to argv[1] seconds.
BENCH = """
import sys
from posbench.cli import app, method_cmds
from posbench.run import runner
method_cmds.LIST_TIMEOUT_S = method_cmds.IMPORT_TIMEOUT_S = float(sys.argv[1])
runner.UNAVAILABLE_TIMEOUT_S = float(sys.argv[1])
sys.exit(app.main(sys.argv[2:]))
"""


def bench(cwd: Path, *args: str, limit: float, timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    """``bench.py args`` in a child whose own child processes get ``limit`` seconds."""
    base = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", TASKS_ENV_PATH: os.environ[TASKS_ENV_PATH]}
    return subprocess.run(
        [sys.executable, "-c", BENCH, str(limit), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**base, **(env or {})},
    )


def plugin(folder: Path, file: str, name: str, module: str = "time", action: str = "", tail: str = "") -> Path:
    """``folder/file``: a method named ``name`` whose file runs ``action`` at import."""
    folder.mkdir(exist_ok=True)
    (folder / file).write_text(PLUGIN.format(name=json.dumps(name), module=module, action=action) + tail)
    return folder


def suite(tmp_path: Path, methods: str, settings: str = "") -> Path:
    """A ``_testing`` suite of ``methods`` at one grid point; ``settings``: its settings block's
    lines (YAML flow mapping), e.g. ``"{timeout_s: 30}"``."""
    path = tmp_path / "t.yaml"
    block = f"settings: {settings}\n" if settings else ""
    path.write_text(f"name: t\ndescription: d\nversion: 1\ntask: _testing\nmethods: [{methods}]\n{block}grid:\n  n: [1]\n")
    return path


def rows(tmp_path: Path) -> dict:
    (run_dir,) = (tmp_path / "results" / "t").iterdir()
    return {r["method"]: r for r in map(json.loads, (run_dir / "cases.jsonl").read_text().splitlines())}
