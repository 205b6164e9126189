"""The docs stay true to the checkout: every relative link in ``README.md`` and ``docs/**/*.md``
reaches a file, every repository path a doc names in backticks exists, and the README stays a
front door (at most 250 lines). Anchors (``#section``) are not checked, only the files.

A path "looks like a repository path" when an inline code span is nothing but a path under one
of the top-level folders below, ending in a file type the docs name or in ``/`` (a folder).
Fenced code blocks are skipped (commands and sample output hold paths of runs, not of the repo).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_LINES = 250

PATH_ROOTS = ("posbench", "methods", "suites", "tests", "docs")
REPO_PATH = re.compile(rf"^(?:{'|'.join(PATH_ROOTS)})/[A-Za-z0-9_./-]*(?:\.py|\.yaml|\.md|\.png|/)$")
# Paths a doc names that exist only inside an installed wheel, never in the checkout.
WHEEL_ONLY = {"posbench/methods/", "posbench/suites/"}
FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")


def doc_files() -> list[Path]:
    return [README] + sorted((ROOT / "docs").rglob("*.md"))


def prose(path: Path) -> str:
    """The file's text without fenced code blocks."""
    return FENCE.sub("", path.read_text(encoding="utf-8"))


def relative_links(path: Path) -> list[str]:
    text = CODE_SPAN.sub("", prose(path))  # `[x](y)` inside a code span is not a link
    out = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # http:, https:, mailto:, or an anchor in the same page
        out.append(target)
    return out


def named_paths(path: Path) -> list[str]:
    return [span for span in CODE_SPAN.findall(prose(path)) if REPO_PATH.match(span)]


def test_docs_exist():
    assert README.is_file() and len(doc_files()) > 10, "README.md and the docs/ guides"


def test_readme_is_a_front_door():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; at most {MAX_README_LINES}"


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file(doc):
    broken = []
    for target in relative_links(doc):
        file = target.split("#", 1)[0]
        if file and not (doc.parent / file).exists():
            broken.append(target)
    assert not broken, f"{doc.relative_to(ROOT)}: links to missing files: {broken}"


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_named_repository_path_exists(doc):
    missing = [p for p in named_paths(doc) if p not in WHEEL_ONLY and not (ROOT / p).exists()]
    assert not missing, f"{doc.relative_to(ROOT)}: names paths that do not exist: {missing}"


def test_checkers_catch_what_they_should(tmp_path):
    """The link and path patterns find a broken link and a missing path, and skip code blocks."""
    page = tmp_path / "page.md"
    page.write_text(
        "See [the guide](docs/none.md#x), ![img](pic.png), [web](https://x.org) and [here](#top).\n"
        "`posbench/nowhere.py` `posbench/core/` `results/x/y.md` `python bench.py`\n"
        "```bash\n[not a link](gone.md) `posbench/fenced.py`\n```\n",
        encoding="utf-8",
    )
    assert relative_links(page) == ["docs/none.md#x", "pic.png"]
    assert named_paths(page) == ["posbench/nowhere.py", "posbench/core/"]


def test_readme_tells_the_ci_commands():
    """The README's set-up instructions stay true: CI runs the two commands it names."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    for command in ("make lint", "make test"):
        assert command in ci and command in readme, command
    assert "make bench" in readme and "make test-fast" in readme and "make docs-results" in readme


@pytest.mark.subprocess
@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_makefile_has_the_docs_results_target(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    out = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "docs-results", f"VENV={venv}", "RUNS=results/x/y"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "-m posbench.cli.docs_results --out docs/results results/x/y" in out
