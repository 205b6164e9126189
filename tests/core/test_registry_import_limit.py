"""A method file that blocks at import costs seconds, not minutes: listing names (``list``,
``validate``, ``run``) and ``check`` cut its import after ``POSBENCH_IMPORT_TIMEOUT_S`` with one
line naming the file (posbench/core/registry/_imports.py; issue 44, left from round 3)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from posbench.core import registry
from posbench.core.registry import RegistryError

ROOT = Path(__file__).resolve().parents[2]
# The name is not a literal, so listing must import the file to learn it; the plugin even
# swallows Exception while it blocks.
BLOCKING = """
import time
from posbench.core.method import PositionMethod
from posbench.core.registry import register

while True:
    try:
        time.sleep(1000)
    except Exception:
        pass


@register
class Slow(PositionMethod):
    name = "sl" + "ow"
"""


@pytest.fixture
def blocking(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "slow.py").write_text(BLOCKING)
    yield folder
    registry.reset_search()


def test_a_blocking_import_is_cut_after_the_limit(blocking):
    import posbench.core.method  # noqa: F401  (torch, imported outside the timed stretch)

    started = time.monotonic()
    with pytest.raises(RegistryError, match=r"slow.py: TimeoutError: its import did not finish within 0.5 s"):
        registry.import_method_file(blocking / "slow.py", 0.5)
    assert time.monotonic() - started < 5


def test_listing_skips_a_blocking_file_in_seconds_naming_it(blocking, monkeypatch, capsys):
    monkeypatch.setenv(registry.IMPORT_LIMIT_ENV, "0.5")
    import posbench.core.method  # noqa: F401

    registry.add_methods_dir(blocking)
    started = time.monotonic()
    names = registry.listing()
    assert "alibi" in names and "slow" not in names
    assert registry.listing() == names  # not waited for a second time
    assert time.monotonic() - started < 5
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"warning: method file {(blocking / 'slow.py').resolve()} skipped: " in err
    assert "did not finish within 0.5 s (does it block at import?)" in err


@pytest.mark.subprocess
@pytest.mark.parametrize("command", [["list"], ["check", "slow"]])
def test_list_and_check_answer_within_seconds(blocking, command):
    env = {**os.environ, registry.IMPORT_LIMIT_ENV: "1", "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench.py"), *command, "--methods-dir", str(blocking)],
        capture_output=True,
        text=True,
        env=env,
        timeout=100,
    )
    assert time.monotonic() - started < 60  # it was 120 s
    assert (
        "skipped: TimeoutError: its import did not finish within 1 s" in out.stderr
        or "slow.py (its import did not finish within 1 s)" in out.stderr
    ), out.stderr
    assert "no answer after" not in out.stderr
