"""Small suite files of the test-only task ``_testing`` (its workers do not import torch).

``VALID`` is the valid suite the validation tests start from (and edit one key at a time);
``make_suite`` writes the runner's suite "t" with the given methods, grid and settings;
``efficiency_suite`` is a small suite of the efficiency task and ``write_suite`` writes any text.
"""

from __future__ import annotations

import json
import textwrap
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


def write_suite(tmp_path: Path, text: str, name: str = "t.yaml") -> Path:
    """tmp_path/<name> holding ``text`` dedented."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def efficiency_suite(extra: str = "", grid: str = "[64]") -> str:
    """Suite "e" of the efficiency task (sinusoidal, alibi; tiny model) with ``extra`` settings lines
    (two-space indented) and ``grid`` as its seq_len values."""
    return (
        textwrap.dedent(f"""\
        name: e
        description: efficiency test
        version: 1
        task: efficiency
        methods: [sinusoidal, alibi]
        grid:
          seq_len: {grid}
        settings:
          model: tiny
          tokens_per_step: 128
        """)
        + extra
    )


# The smallest suite of the test task: two methods, two grid points (no torch in the worker).
TWO_METHODS = "name: t\ndescription: d\nversion: 1\ntask: _testing\nmethods: [sinusoidal, alibi]\ngrid:\n  n: [1, 2]\n"
