"""The layout of tests/: a folder per package, unique file names, no test file importing another,
and every test file that the code, the docs or the build names (``tests/.../test_x.py``) exists
(`make gpu-check` runs the kernel tests by path, and the README sends plugin authors to
tests/core/test_conformance.py; a test moved without them would break that silently)."""

import ast
import re
from pathlib import Path

import pytest

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


# -- filed by module (tests/README.md) ----------------------------------------------------------

README = TESTS / "README.md"
JOURNEYS = "End-to-end journeys"
PROJECT_CHECKS = "Project checks"
LISTED = re.compile(r"^- `(tests/[\w/]+\.py)`", re.M)  # a README list line: - `<test file path>`: what it covers


def readme_list(text: str, heading: str) -> list[str]:
    """The test files a README section lists, in order (``- `tests/...py`: ...`` lines)."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    if not match:
        raise ValueError(f"tests/README.md has no section '## {heading}'")
    return LISTED.findall(match.group(1))


def module_test_names(root: Path, folder: str) -> dict[str, str]:
    """{test file name: the module it tests} for tests/<folder>/: ``posbench/<folder>/a/b.py`` is tested by
    ``test_a_b.py``, a package ``posbench/<folder>/a/__init__.py`` by ``test_a.py`` (the package's own
    ``__init__.py`` by ``test_<folder>.py``); tests/methods/ by the top-level ``methods/<name>.py``."""
    base = root / "methods" if folder == "methods" else root / "posbench" / folder
    names = {}
    for path in sorted(base.rglob("*.py")):
        parts = path.relative_to(base).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1] or (folder,)  # the package's own front: tests/tasks/test_tasks.py
        if "__pycache__" not in parts:
            names["test_" + "_".join(parts) + ".py"] = str(path.relative_to(root))
    return names


def unfiled(root: Path) -> list[str]:
    """Each test file under ``root/tests`` that neither tests a module by its name nor is listed in
    tests/README.md (a journey, or a project check in tests/project/), and each listed file not there."""
    tests = root / "tests"
    text = (tests / "README.md").read_text(encoding="utf-8")
    journeys, checks = readme_list(text, JOURNEYS), readme_list(text, PROJECT_CHECKS)
    problems = [f"tests/README.md lists {name}, which is not there" for name in journeys + checks if not (root / name).is_file()]
    problems += [
        f"tests/README.md lists {name} under '{PROJECT_CHECKS}': not in tests/project/"
        for name in checks
        if not name.startswith("tests/project/")
    ]
    named: dict[str, dict[str, str]] = {}
    for path in sorted(tests.rglob("test_*.py")):
        rel = path.relative_to(root).as_posix()
        folder = path.relative_to(tests).parts[0]
        if rel in journeys or rel in checks:
            continue
        if folder == "project":
            problems.append(f"{rel}: a project check not listed under '{PROJECT_CHECKS}' in tests/README.md")
            continue
        if folder not in named:
            named[folder] = module_test_names(root, folder)
        if path.name not in named[folder]:
            where = "methods/" if folder == "methods" else f"posbench/{folder}/"
            problems.append(
                f"{rel}: names no module of {where} (test_<module path with / as _>.py) and is not a journey in tests/README.md"
            )
    return problems


def test_every_test_file_is_filed_by_its_module_or_listed():
    problems = unfiled(ROOT)
    assert not problems, "test files that say nothing of where their module is:\n" + "\n".join(problems)


def _plant(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


T = "tests"  # planted paths are written through T, so the named-file check above does not read them as real ones
PLANTED_README = f"# tests\n\n## End-to-end journeys\n\n- `{T}/cli/test_journey.py`: a journey\n\n## Project checks\n\n- `{T}/project/test_docs.py`: docs\n"


def test_the_filing_rule_accepts_module_names_journeys_and_project_checks(tmp_path):
    root = _plant(
        tmp_path,
        {
            "posbench/run/schedule.py": "",
            "posbench/run/suite/__init__.py": "",
            "posbench/run/suite/loading.py": "",
            "posbench/run/__init__.py": "",
            "methods/rotary.py": "",
            f"{T}/README.md": PLANTED_README,
            f"{T}/run/test_schedule.py": "",
            f"{T}/run/test_suite.py": "",
            f"{T}/run/test_suite_loading.py": "",
            f"{T}/run/test_run.py": "",
            f"{T}/methods/test_rotary.py": "",
            f"{T}/cli/test_journey.py": "",
            f"{T}/project/test_docs.py": "",
        },
    )
    assert unfiled(root) == []


def test_the_filing_rule_names_a_topic_file_an_unlisted_check_and_a_stale_listing(tmp_path):
    root = _plant(
        tmp_path,
        {
            "posbench/run/schedule.py": "",
            f"{T}/README.md": PLANTED_README,
            f"{T}/run/test_schedule_hardening.py": "",  # a topic beside the module's name
            f"{T}/run/test_schedule.py": "",
            f"{T}/project/test_makefile.py": "",  # not listed
            f"{T}/methods/test_nothing.py": "",  # no methods/nothing.py
        },
    )
    assert unfiled(root) == [
        f"tests/README.md lists {T}/cli/test_journey.py, which is not there",
        f"tests/README.md lists {T}/project/test_docs.py, which is not there",
        f"{T}/methods/test_nothing.py: names no module of methods/ (test_<module path with / as _>.py) and is not a journey in tests/README.md",
        f"{T}/project/test_makefile.py: a project check not listed under 'Project checks' in tests/README.md",
        f"{T}/run/test_schedule_hardening.py: names no module of posbench/run/ (test_<module path with / as _>.py) and is not a journey in tests/README.md",
    ]


def test_a_readme_without_its_sections_is_one_clear_error(tmp_path):
    root = _plant(tmp_path, {f"{T}/README.md": "# tests\n"})
    with pytest.raises(ValueError, match="no section '## End-to-end journeys'"):
        unfiled(root)
