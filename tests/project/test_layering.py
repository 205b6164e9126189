"""The layering rule of docs/architecture.md, checked: every import of a posbench package made by a
module of posbench/, methods/, benchmarks/, bench.py or .github/scripts/ is one that the "may import"
column of the Packages table allows, and the layering diagram's floors agree with the table.

An import is an ``import x`` or ``from x import y`` anywhere in a file (module level, inside a
function, under ``TYPE_CHECKING``), relative ones resolved; ``from posbench import tasks`` imports
the package ``tasks``. ``importlib.import_module("...")`` is not an import: the registries load
methods and tasks by name on purpose. A package may always import itself, and any module may read
``posbench.__version__`` (the root package holds nothing else).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
# Where the checked modules live; each file must fall under a row of the table.
CHECKED = ("posbench", "methods", "benchmarks", "bench.py", ".github/scripts")
NOTHING = "nothing of posbench"
PACKAGE_ROW = re.compile(r"^posbench/(\w+)/$")  # `posbench/core/` names the package core


class Rule(NamedTuple):
    own: str | None  # the posbench package the row is (None for methods/, bench.py, ...)
    allowed: frozenset[str]
    said: str  # the cell as written, for the message


def section(text: str, heading: str) -> str:
    """The lines under ``heading`` up to the next heading."""
    match = re.search(rf"^#+ {re.escape(heading)}\n(.*?)(?=^#+ )", text + "\n# end", re.S | re.M)
    if not match:
        raise ValueError(f"no section {heading!r}")
    return match.group(1)


def read_table(text: str) -> dict[str, Rule]:
    """{row key (``posbench/core/``, ``methods/``, ``bench.py``): Rule} from the Packages table."""
    rows = {}
    for line in section(text, "Packages").splitlines():
        cells = line.strip().strip("|").split("|")
        key = re.match(r"\s*`([^`]+)`", cells[0]) if line.startswith("|") else None
        if key and len(cells) >= 3:  # the header and the |---| line have no code span first
            own = PACKAGE_ROW.match(key.group(1))
            rows[key.group(1)] = (own.group(1) if own else None, cells[-1].strip())
    packages = {own for own, _ in rows.values() if own}
    table = {}
    for key, (own, said) in rows.items():
        names = [] if said == NOTHING else [n.strip().strip("`") for n in said.split(",")]
        unknown = [n for n in names if n not in packages]
        if unknown or not said:
            raise ValueError(f"the row {key} may import {said!r}: not packages of the table: {unknown}")
        table[key] = Rule(own, frozenset(names), said)
    return table


def read_floors(text: str) -> list[set[str]]:
    """The layering diagram's floors, bottom first: ``core ◄── attention / data ◄── report``."""
    blocks = re.findall(r"^```text\n(.*?)^```", section(text, "The layering rule"), re.S | re.M)
    line = next(b for b in blocks if "◄" in b)
    return [set(re.findall(r"\w+", floor)) for floor in re.split(r"◄─*", line)]


def imported(source: str, module: str, packages: set[str]) -> list[tuple[int, str]]:
    """(line, absolute module name) of every posbench import of the module named ``module``."""
    out = []
    parent = module.split(".")[:-1]  # the file's package: posbench.run for run/units.py and run/__init__.py
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # from . import x / from ..tasks import y, as seen from the file's package
                base = ".".join(parent[: len(parent) - node.level + 1] + ([base] if base else []))
            if base == "posbench":  # from posbench import tasks: the package; __version__: the root
                out += [(node.lineno, f"posbench.{a.name}" if a.name in packages else "posbench") for a in node.names]
            else:
                out.append((node.lineno, base))
    return [(line, name) for line, name in out if name == "posbench" or name.startswith("posbench.")]


def row_of(path: str, table: dict[str, Rule]) -> str | None:
    """The table's row for a file (``posbench/run/suite/loading.py`` -> ``posbench/run/``)."""
    keys = [k for k in table if path == k or (k.endswith("/") and path.startswith(k))]
    return max(keys, key=len) if keys else None


def violations(root: Path, table: dict[str, Rule]) -> list[str]:
    """One line per import the table does not allow: ``file:line imports name: rule``."""
    packages = {rule.own for rule in table.values() if rule.own}
    files = []
    for place in CHECKED:
        files += [root / place] if place.endswith(".py") else sorted((root / place).rglob("*.py"))
    found = []
    for file in files:
        if not file.is_file():
            continue
        path = file.relative_to(root).as_posix()
        key = row_of(path, table)
        if key is None:
            found.append(f"{path}: no row of the Packages table holds it")
            continue
        rule = table[key]
        where = f"{rule.own}/" if rule.own else key
        module = path.removesuffix(".py").replace("/", ".")
        for line, name in imported(file.read_text(encoding="utf-8"), module, packages):
            target = name.split(".")[1] if name != "posbench" else None
            if target is None or target == rule.own or target in rule.allowed:
                continue
            if target not in packages:
                found.append(f"{path}:{line} imports {name}: posbench has no package {target!r} in the table")
            else:
                found.append(f"{path}:{line} imports {name}: {where} may import {rule.said}")
    return found


def test_every_import_follows_the_table():
    found = violations(ROOT, read_table(ARCHITECTURE.read_text(encoding="utf-8")))
    assert not found, "imports docs/architecture.md's Packages table does not allow:\n" + "\n".join(found)


def test_the_diagram_matches_the_table():
    """Each posbench package sits on one floor of the layering diagram, and every import its row
    allows goes to a lower floor: arrows only go down, so no circle."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    table, floors = read_table(text), read_floors(text)
    floor = {name: n for n, names in enumerate(floors) for name in names}
    packages = sorted(rule.own for rule in table.values() if rule.own)
    assert sorted(floor) == packages and sum(map(len, floors)) == len(packages), (floors, packages)
    upward = [
        f"{rule.own} -> {name}"
        for rule in table.values()
        if rule.own
        for name in sorted(rule.allowed)
        if floor[name] >= floor[rule.own]
    ]
    assert not upward, f"the table allows imports that do not go down the diagram: {upward}"
    assert {p.name for p in (ROOT / "posbench").iterdir() if (p / "__init__.py").is_file()} == set(packages)


DOC = """# Architecture

## Packages

| package | holds | may import |
|---|---|---|
| `posbench/__init__.py` | the version | nothing of posbench |
| `posbench/core/` | contracts | nothing of posbench |
| `posbench/report/` | tables | core |
| `posbench/tasks/` | tasks | core, report |
| `posbench/run/` | the runner | core, tasks |
| `bench.py` | the entry point | run |

### The layering rule

```text
core  ◄──  report  ◄──  tasks  ◄──  run
```
"""


def test_the_checker_reports_an_upward_import(tmp_path):
    """A planted upward import (at module level, in a function, relative, through ``from posbench
    import``) is reported with its file, line and rule; imports the table allows, a package's own,
    ``__version__`` and ``importlib.import_module`` are not."""
    files = {
        "posbench/__init__.py": '__version__ = "0"\n',
        "posbench/core/__init__.py": "",
        "posbench/core/case.py": "import os\nfrom posbench import __version__\n\n\ndef f():\n"
        "    from posbench.run import units\n    import posbench.core.case\n",
        "posbench/report/__init__.py": "",
        "posbench/report/table.py": "from posbench.core import case\nfrom ..tasks import efficiency\n",
        "posbench/tasks/__init__.py": "import importlib\nimportlib.import_module('posbench.run')\n",
        "posbench/run/__init__.py": "from posbench import tasks, core\nfrom . import units\nimport posbench.cli\n",
        "posbench/run/units.py": "",
        "posbench/extra/__init__.py": "",
        "bench.py": "from posbench.run import units\nfrom posbench.report import table\n",
    }
    for path, source in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(source, encoding="utf-8")
    table = read_table(DOC)
    assert table["posbench/core/"] == Rule("core", frozenset(), "nothing of posbench")
    assert table["bench.py"] == Rule(None, frozenset({"run"}), "run")
    assert read_floors(DOC) == [{"core"}, {"report"}, {"tasks"}, {"run"}]
    assert violations(tmp_path, table) == [
        "posbench/core/case.py:6 imports posbench.run: core/ may import nothing of posbench",
        "posbench/extra/__init__.py: no row of the Packages table holds it",
        "posbench/report/table.py:2 imports posbench.tasks: report/ may import core",
        "posbench/run/__init__.py:3 imports posbench.cli: posbench has no package 'cli' in the table",
        "bench.py:2 imports posbench.report: bench.py may import run",
    ]


def test_the_table_names_only_its_packages():
    with pytest.raises(ValueError) as refused:
        read_table(DOC.replace("| core, report |", "| core, reports |"))
    assert str(refused.value) == "the row posbench/tasks/ may import 'core, reports': not packages of the table: ['reports']"
