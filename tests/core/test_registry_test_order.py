"""Issue 56: the registry tests pass in any order. At 0958d55 ``test_listing_agrees_with_importing_
for_the_builtin_methods`` failed after ``test_extra_folder_from_environment`` (the discovery cache
outlived the fixture that undid the environment). The whole file in order runs in every test run;
this guard runs it in reverse, in a fresh process (a cheap check: the registry tests only)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
REGISTRY_TESTS = "tests/core/test_registry.py"


@pytest.mark.subprocess
def test_the_registry_tests_pass_in_reverse_order():
    tree = ast.parse((REPO / REGISTRY_TESTS).read_text())
    ids = [
        f"{REGISTRY_TESTS}::{node.name}"
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    ]
    assert len(ids) > 10
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-n", "0", *reversed(ids)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout[-3000:]
    assert " passed" in ran.stdout and "failed" not in ran.stdout
