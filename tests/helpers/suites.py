"""Small suite files of the test-only task ``_testing`` (its workers do not import torch).

``VALID`` is the valid suite the validation tests start from (and edit one key at a time);
``make_suite`` writes the runner's suite "t" with the given methods, grid and settings.
"""
from __future__ import annotations

import json
from pathlib import Path

VALID = """\
name: t
description: a test suite
version: 1
task: _testing
methods: [sinusoidal, alibi]
baseline: sinusoidal
metrics: [value]
grid:
  n: [1, 2]
settings:
  timeout_s: 30
profiles:
  cpu:
    settings:
      behaviour: sleep
    grid:
      n: [3]
"""

RUNNER_SUITE = """\
name: t
description: runner test
version: 1
task: _testing
methods: {methods}
baseline: sinusoidal
metrics: [value]
grid:
  n: {grid}
settings:
{settings}
"""


def make_suite(tmp_path: Path, methods: list[str], grid: str = "[1]", **settings) -> Path:
    """tmp_path/t.yaml: suite "t" of ``_testing`` over ``methods``, grid ``n: <grid>`` and
    ``settings`` (each written as JSON, which YAML reads back unchanged)."""
    body = "\n".join(f"  {k}: {json.dumps(v)}" for k, v in settings.items()) or "  {}"
    path = tmp_path / "t.yaml"
    path.write_text(RUNNER_SUITE.format(methods=json.dumps(methods), grid=grid, settings=body))
    return path
