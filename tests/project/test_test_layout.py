"""The layout of tests/: a folder per package, unique file names, no test file importing another,
and every test file that the code, the docs or the build names (``tests/.../test_x.py``) exists
(`make gpu-check` runs the kernel tests by path, and the README sends plugin authors to
tests/core/test_conformance.py; a test moved without them would break that silently)."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Where a test path named in text is followed: the docs, the package, the build and CI files.
NAMED_IN = ["README.md", "Makefile", "pyproject.toml", ".ci/run", "bench.py"]
NAMED_IN_FOLDERS = [
    ("docs", "*.md"),
    ("posbench", "*.py"),
    ("methods", "*.py"),
    (".github/workflows", "*.yml"),
    ("tests", "*.py"),
]
TEST_PATH = re.compile(r"\btests/[\w/]*?(?:test_\w+|conftest|\w+/__init__)\.py\b")


def _files() -> list[Path]:
    files = [ROOT / name for name in NAMED_IN if (ROOT / name).is_file()]
    for folder, pattern in NAMED_IN_FOLDERS:
        files += sorted((ROOT / folder).rglob(pattern))
    return files


def test_every_named_test_file_exists():
    missing = []
    for path in _files():
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            missing += [
                f"{path.relative_to(ROOT)}:{n}: {name}" for name in TEST_PATH.findall(line) if not (ROOT / name).is_file()
            ]
    assert not missing, "test files named but not there:\n" + "\n".join(missing)


TESTS = ROOT / "tests"
# tests/<folder> tests posbench/<folder>, except these: methods/ (the built-in methods, top level),
# project/ (Makefile, packaging, workflows, this layout) and helpers/ (shared code, no tests).
OTHER_FOLDERS = {"methods", "project", "helpers"}


def _test_files() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def test_each_folder_matches_a_package_and_file_names_are_unique():
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert {f for f in folders - OTHER_FOLDERS if not (ROOT / "posbench" / f / "__init__.py").is_file()} == set()
    assert [p.name for p in TESTS.glob("test_*.py")] == []  # every test file sits in its folder
    names = [p.name for p in _test_files()]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_no_test_file_imports_another():
    """What two test files share lives in tests/helpers/ (imported as tests.helpers.<module>) or in
    tests/conftest.py (fixtures)."""
    test_modules = {p.stem for p in _test_files()}
    found = []
    for path in _test_files() + sorted((TESTS / "helpers").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            found += [
                f"{path.relative_to(ROOT)}:{node.lineno}: {name}"
                for name in names
                if name.split(".")[-1] in test_modules or name in ("conftest", "tests.conftest")
            ]
    assert found == []
