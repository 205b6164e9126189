"""Hardening round 5 (issue 56): a plugin that blocks at import holds ``run`` for the import limit
(``POSBENCH_IMPORT_TIMEOUT_S``, default 5 s), not the 120 s of the child process that asks each
method whether it runs here: its file is imported under that limit first, and its cases are an
error row naming the limit while the other methods run."""

import pytest

from posbench.cli.app import EXIT_CASES_FAILED
from posbench.core.registry import IMPORT_LIMIT_ENV
from tests.helpers.user_code import BLOCKS, bench, plugin, rows, suite


@pytest.mark.subprocess
def test_a_plugin_blocking_at_import_is_cut_at_the_import_limit(tmp_path):
    plugins = plugin(tmp_path / "plugins", "blocks.py", "blocks", **BLOCKS)
    argv = ["--suite", str(suite(tmp_path, "sinusoidal, blocks")), "--methods-dir", str(plugins), "--results", "results"]
    # the child's own limit stays at 120 s: only the import limit can end the question in time
    proc = bench(tmp_path, *argv, "--quiet", limit=120, timeout=110, env={IMPORT_LIMIT_ENV: "1"})
    assert proc.returncode == EXIT_CASES_FAILED, proc.stderr
    found = rows(tmp_path)
    assert found["sinusoidal"]["status"] == "ok"
    assert found["blocks"]["status"] == "error" and "its import did not finish within 1 s" in found["blocks"]["message"]
