"""Every test file that the code, the docs or the build names (``tests/.../test_x.py``) exists:
`make gpu-check` runs the kernel tests by path, and the README sends plugin authors to
tests/core/test_conformance.py; a test moved without them would break that silently."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Where a test path named in text is followed: the docs, the package, the build and CI files.
NAMED_IN = ["README.md", "Makefile", "pyproject.toml", ".ci/run", "bench.py"]
NAMED_IN_FOLDERS = [("docs", "*.md"), ("posbench", "*.py"), ("methods", "*.py"), (".github/workflows", "*.yml"),
                    ("tests", "*.py")]
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
            missing += [f"{path.relative_to(ROOT)}:{n}: {name}" for name in TEST_PATH.findall(line)
                        if not (ROOT / name).is_file()]
    assert not missing, "test files named but not there:\n" + "\n".join(missing)
