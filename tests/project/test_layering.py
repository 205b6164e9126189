"""The layering rule of docs/architecture.md, checked: four checks, each a function of a checkout's
root that returns one line per breach (``file:line ...``), so that planted trees can prove each one
fails.

- ``violations``: every import of a posbench package made by a module of posbench/, methods/,
  benchmarks/, bench.py or .github/scripts/ is one that the "may import" column of the Packages table
  allows, and (``test_the_diagram_matches_the_table``) the layering diagram's floors agree with it.
- ``task_links``: every task package is a leaf. A module of ``posbench/tasks/<a>/`` imports nothing
  else of ``posbench/tasks/``: no other task package, no loose module beside the packages (what tasks
  share lives in a layer beneath them), and not the front ``posbench/tasks/__init__.py`` either. The
  front looks tasks up by name, so a task asking it would reach another task through a door this
  check cannot see; and a task never needs it, since importing ``posbench.tasks.<a>`` has already
  run it. The front itself, and the loose modules beside the packages (shared ones, which belong
  in a layer beneath the tasks), are held to the table only.
- ``circles``: no circle among modules (files), inside a package or across packages. A file's edges
  go to the modules it names, not to the packages above them whose ``__init__`` the import also
  runs: else ``from . import x`` in a sibling would close a circle with every ``__init__`` that
  re-exports it. A module naming itself is no circle.
- ``dynamic_imports``: a module name known only when the code runs (``import_module(name)``,
  ``import_module(f"{x}.task")``, ``__import__(name)``) is allowed only in the places of
  ``DYNAMIC_IMPORTS``, which load what is found by name.

An import is an ``import x`` or ``from x import y`` anywhere in a file (module level, inside a
function, under ``TYPE_CHECKING``), relative ones resolved; ``from posbench import tasks`` imports
the package ``tasks``, ``from posbench.tasks import precision`` the module ``posbench.tasks.precision``.
``importlib.import_module("posbench.x")`` and ``__import__("posbench.x")`` with a literal name are
imports too. A package may always import itself, and any module may read ``posbench.__version__``
(the root package holds nothing else).
"""

from __future__ import annotations

import ast
import functools
import re
from collections import deque
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = Path("docs") / "architecture.md"  # under a checkout's root
# Where the checked modules live; each file must fall under a row of the table.
CHECKED = ("posbench", "methods", "benchmarks", "bench.py", ".github/scripts")
NOTHING = "nothing of posbench"
PACKAGE_ROW = re.compile(r"^posbench/(\w+)/$")  # `posbench/core/` names the package core
TASKS = "posbench/tasks/"
# The only places that may import a module whose name is known only when the code runs (a path, or
# the start of one: the registry module or package), and why.
DYNAMIC_IMPORTS = {
    "posbench/core/registry": "the registry loads method files and task packages found by name",
    "posbench/core/discovery.py": "discovery loads method files and task packages found by name",
    "posbench/run/isolated.py": "the child process calls the module:function its parent names",
    "posbench/engine/env.py": "the environment record reads third-party versions (torch, triton)",
}
LOADERS = ("import_module", "__import__")  # importlib.import_module, import_module, __import__


class Rule(NamedTuple):
    own: str | None  # the posbench package the row is (None for methods/, bench.py, ...)
    allowed: frozenset[str]
    said: str  # the cell as written, for the message


class Import(NamedTuple):
    line: int
    name: str | None  # the absolute module name; None when it is known only when the code runs
    how: str  # "" for an import statement, else the call as written: importlib.import_module('x')


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


def module_of(path: str) -> str:
    """The dotted name of a checked file: ``posbench/run/units.py`` -> ``posbench.run.units``,
    ``posbench/run/__init__.py`` -> ``posbench.run``."""
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def checked_files(root: Path) -> dict[str, Path]:
    """{module name: file} of every checked file, in path order."""
    files = []
    for place in CHECKED:
        files += [root / place] if place.endswith(".py") else sorted((root / place).rglob("*.py"))
    return {module_of(f.relative_to(root).as_posix()): f for f in files if f.is_file()}


def loader_name(call: ast.Call) -> str | None:
    """``import_module`` or ``__import__`` when the call is one (by any spelling), else None."""
    func = call.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    return name if name in LOADERS else None


def imports(source: str, path: str, modules: set[str]) -> list[Import]:
    """Every import of the file at ``path`` (relative to the root), names resolved against the
    checked ``modules``: ``from x import y`` is ``x.y`` when that is a module, else ``x``."""
    module = module_of(path)
    package = module.split(".") if path.endswith("__init__.py") else module.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [Import(node.lineno, alias.name, "") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # from . import x / from ..tasks import y, as seen from the file's package
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                below = f"{base}.{alias.name}"
                out.append(Import(node.lineno, below if below in modules else base, ""))
        elif isinstance(node, ast.Call) and loader_name(node):
            arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "name"), None)
            if arg is None:  # import_module(*names): not a call this reads
                continue
            name = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None
            if name and name.startswith("."):  # import_module(".x", __package__): from the file's package
                level = len(name) - len(name.lstrip("."))
                name = ".".join(package[: len(package) - level + 1] + [name.lstrip(".")]).rstrip(".")
            out.append(Import(node.lineno, name, ast.unparse(node)))
    # `from x import a, b` names x once; a name known only when run sorts as ""
    return sorted(set(out), key=lambda found: (found.line, found.name or "", found.how))


@functools.cache  # the four checks read a tree once; planted trees are new folders
def scan(root: Path) -> dict[str, list[Import]]:
    """{path relative to the root: its imports} for every checked file."""
    files = checked_files(root)
    modules = set(files)
    paths = {file.relative_to(root).as_posix(): file for file in files.values()}
    return {path: imports(file.read_text(encoding="utf-8"), path, modules) for path, file in paths.items()}


def is_posbench(name: str | None) -> bool:
    return name is not None and (name == "posbench" or name.startswith("posbench."))


def row_of(path: str, table: dict[str, Rule]) -> str | None:
    """The table's row for a file (``posbench/run/suite/loading.py`` -> ``posbench/run/``)."""
    keys = [k for k in table if path == k or (k.endswith("/") and path.startswith(k))]
    return max(keys, key=len) if keys else None


def violations(root: Path) -> list[str]:
    """One line per import the table of the root's docs/architecture.md does not allow:
    ``file:line imports name: rule``."""
    table = read_table((root / ARCHITECTURE).read_text(encoding="utf-8"))
    packages = {rule.own for rule in table.values() if rule.own}
    found = []
    for path, found_imports in scan(root).items():
        key = row_of(path, table)
        if key is None:
            found.append(f"{path}: no row of the Packages table holds it")
            continue
        rule = table[key]
        where = f"{rule.own}/" if rule.own else key
        for line, name, how in found_imports:
            target = name.split(".")[1] if is_posbench(name) and name != "posbench" else None
            if target is None or target == rule.own or target in rule.allowed:
                continue
            said = f"{name} by {how}" if how else name
            if target not in packages:
                found.append(f"{path}:{line} imports {said}: posbench has no package {target!r} in the table")
            else:
                found.append(f"{path}:{line} imports {said}: {where} may import {rule.said}")
    return found


def task_links(root: Path) -> list[str]:
    """One line per import by a module of a task package (``posbench/tasks/<a>/``) of anything else
    of posbench/tasks/: another task, a loose module beside the packages, the front."""
    found = []
    for path, found_imports in scan(root).items():
        rest = path.removeprefix(TASKS)
        if rest == path or "/" not in rest:  # not in tasks/; the front or a loose module
            continue
        own = rest.split("/")[0]
        for line, name, how in found_imports:
            if name is None or not (name == "posbench.tasks" or name.startswith("posbench.tasks.")):
                continue
            other = name.split(".")[2] if name != "posbench.tasks" else None
            if other == own:
                continue
            said = f"{name} by {how}" if how else name
            part = f"tasks/{other}" if other else "the front, posbench/tasks/__init__.py"
            found.append(f"{path}:{line} imports {said}: tasks/{own}/ is a leaf and may not import {part}")
    return found


def module_graph(root: Path) -> dict[str, dict[str, int]]:
    """{file: {file it imports: the first line that does}}, files relative to the root. A name is
    the file of its longest dotted prefix that is a checked module (``posbench.run.units.plan`` ->
    posbench/run/units.py); a file's import of itself is left out."""
    path_of = {name: file.relative_to(root).as_posix() for name, file in checked_files(root).items()}
    graph: dict[str, dict[str, int]] = {path: {} for path in path_of.values()}
    for path, found_imports in scan(root).items():
        for line, name, _ in found_imports:
            parts = name.split(".") if name else []
            prefixes = (".".join(parts[:n]) for n in range(len(parts), 0, -1))
            target = next((path_of[p] for p in prefixes if p in path_of), None)
            if target is not None and target != path:
                graph[path].setdefault(target, line)
    return graph


def circles(root: Path) -> list[str]:
    """Each circle among the checked modules, the shortest one through each file that is on one,
    as ``a.py:line -> b.py:line -> a.py`` (the line of the import leading on), each once."""
    graph = module_graph(root)
    found = set()
    for start in sorted(graph):
        came_from = {start: start}  # breadth first, so the first way back is a shortest circle
        queue = deque([start])
        while queue:
            here = queue.popleft()
            if start in graph[here]:
                way = [here]
                while way[-1] != start:
                    way.append(came_from[way[-1]])
                way.reverse()  # start, ..., here
                first = way.index(min(way))  # the same circle found from another file reads the same
                found.add(tuple(way[first:] + way[:first]))
                break
            for step in sorted(graph[here]):
                if step not in came_from:
                    came_from[step] = here
                    queue.append(step)
    return [" -> ".join(f"{a}:{graph[a][b]}" for a, b in zip(way, way[1:] + way[:1])) + f" -> {way[0]}" for way in sorted(found)]


def dynamic_imports(root: Path) -> list[str]:
    """One line per import of a name known only when the code runs outside ``DYNAMIC_IMPORTS``."""
    return [
        f"{path}:{line} imports a module named only when it runs, {how}: only {', '.join(DYNAMIC_IMPORTS)} may (DYNAMIC_IMPORTS)"
        for path, found_imports in scan(root).items()
        if not path.startswith(tuple(DYNAMIC_IMPORTS))
        for line, name, how in found_imports
        if name is None
    ]


def test_every_import_follows_the_table():
    found = violations(ROOT)
    assert not found, "imports docs/architecture.md's Packages table does not allow:\n" + "\n".join(found)


def test_every_task_package_is_a_leaf():
    found = task_links(ROOT)
    assert not found, "task packages importing other parts of posbench/tasks/:\n" + "\n".join(found)


def test_no_circle_among_modules():
    found = circles(ROOT)
    assert not found, "circles among modules (file:line of each import):\n" + "\n".join(found)


def test_only_the_registries_import_names_known_when_run():
    found = dynamic_imports(ROOT)
    assert not found, "imports of a module named only when the code runs:\n" + "\n".join(found)


def test_the_diagram_matches_the_table():
    """Each posbench package sits on one floor of the layering diagram, and every import its row
    allows goes to a lower floor: arrows only go down, so no circle."""
    text = (ROOT / ARCHITECTURE).read_text(encoding="utf-8")
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


def plant(root: Path, files: dict[str, str]) -> Path:
    """A fake checkout at ``root``: DOC as its docs/architecture.md, and ``files`` ({path: source})."""
    for path, source in {str(ARCHITECTURE): DOC, **files}.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(source, encoding="utf-8")
    return root


def test_the_checker_reports_an_upward_import(tmp_path):
    """A planted upward import (at module level, in a function, relative, through ``from posbench
    import``, through ``importlib.import_module``) is reported with its file, line and rule; imports
    the table allows, a package's own and ``__version__`` are not."""
    root = plant(
        tmp_path,
        {
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
        },
    )
    table = read_table(DOC)
    assert table["posbench/core/"] == Rule("core", frozenset(), "nothing of posbench")
    assert table["bench.py"] == Rule(None, frozenset({"run"}), "run")
    assert read_floors(DOC) == [{"core"}, {"report"}, {"tasks"}, {"run"}]
    assert violations(root) == [
        "posbench/core/case.py:6 imports posbench.run.units: core/ may import nothing of posbench",
        "posbench/extra/__init__.py: no row of the Packages table holds it",
        "posbench/report/table.py:2 imports posbench.tasks: report/ may import core",
        "posbench/run/__init__.py:3 imports posbench.cli: posbench has no package 'cli' in the table",
        "posbench/tasks/__init__.py:2 imports posbench.run by importlib.import_module('posbench.run'):"
        " tasks/ may import core, report",
        "bench.py:2 imports posbench.report.table: bench.py may import run",
    ]


def test_the_table_names_only_its_packages():
    with pytest.raises(ValueError) as refused:
        read_table(DOC.replace("| core, report |", "| core, reports |"))
    assert str(refused.value) == "the row posbench/tasks/ may import 'core, reports': not packages of the table: ['reports']"


def test_the_checker_reports_a_task_importing_another(tmp_path):
    """A task package importing another task (absolute, relative, inside a function, by
    ``import_module``), a loose module of tasks/ or the front is reported; its own modules are not."""
    root = plant(
        tmp_path,
        {
            "posbench/__init__.py": "",
            "posbench/tasks/__init__.py": "from posbench.tasks import alpha\n",
            "posbench/tasks/shared.py": "from posbench.tasks.alpha import task\n",  # not a task package
            "posbench/tasks/alpha/__init__.py": "from .task import TASK\n",
            "posbench/tasks/alpha/task.py": "from posbench.tasks.alpha import run\nfrom . import report\nTASK = None\n",
            "posbench/tasks/alpha/run.py": "import posbench.tasks.alpha.report\n\n\ndef go():\n"
            "    from posbench.tasks.beta import task\n",
            "posbench/tasks/alpha/report.py": "from ..beta.task import TASK\nfrom .. import shared\nfrom posbench import tasks\n",
            "posbench/tasks/beta/__init__.py": "",
            "posbench/tasks/beta/task.py": "import importlib\nimportlib.import_module('posbench.tasks.alpha.run')\n",
        },
    )
    assert task_links(root) == [
        "posbench/tasks/alpha/report.py:1 imports posbench.tasks.beta.task: tasks/alpha/ is a leaf and may not import tasks/beta",
        "posbench/tasks/alpha/report.py:2 imports posbench.tasks.shared: tasks/alpha/ is a leaf and may not import tasks/shared",
        "posbench/tasks/alpha/report.py:3 imports posbench.tasks: tasks/alpha/ is a leaf and may not import the front,"
        " posbench/tasks/__init__.py",
        "posbench/tasks/alpha/run.py:5 imports posbench.tasks.beta.task: tasks/alpha/ is a leaf and may not import tasks/beta",
        "posbench/tasks/beta/task.py:2 imports posbench.tasks.alpha.run by importlib.import_module('posbench.tasks.alpha.run'):"
        " tasks/beta/ is a leaf and may not import tasks/alpha",
    ]
    assert violations(root) == []  # all within tasks/: the table alone cannot see them


def test_the_checker_reports_a_circle_inside_a_package(tmp_path):
    """Two modules of one package importing each other (one relative, one through ``from package
    import module``) are one circle, named once with both lines."""
    root = plant(
        tmp_path,
        {
            "posbench/__init__.py": "",
            "posbench/core/__init__.py": "from . import probes\n",
            "posbench/core/probes.py": "import os\n\nfrom .ruler import measure\n",
            "posbench/core/ruler.py": "from posbench.core import probes\nimport posbench.core.ruler\n",
        },
    )
    assert circles(root) == ["posbench/core/probes.py:3 -> posbench/core/ruler.py:1 -> posbench/core/probes.py"]
    assert violations(root) == [] and task_links(root) == []


def test_the_checker_reports_a_circle_through_a_function(tmp_path):
    """Three modules in a circle closed by an import inside a function, across packages, are
    reported once (from its first file), with the line of each import."""
    root = plant(
        tmp_path,
        {
            "posbench/__init__.py": "",
            "posbench/core/__init__.py": "",
            "posbench/core/a.py": "from posbench.report.b import f\n",
            "posbench/report/__init__.py": "",
            "posbench/report/b.py": "import os\nfrom .c import g\n",
            "posbench/report/c.py": "def g():\n    from posbench.core import a\n    return a\n",
            "posbench/report/d.py": "from . import b, c\n",  # into the circle, not on it
        },
    )
    assert circles(root) == ["posbench/core/a.py:1 -> posbench/report/b.py:2 -> posbench/report/c.py:2 -> posbench/core/a.py"]
    assert violations(root) == ["posbench/core/a.py:1 imports posbench.report.b: core/ may import nothing of posbench"]


def test_the_checker_reports_import_module_of_a_forbidden_package(tmp_path):
    """``importlib.import_module`` and ``import_module`` with a literal posbench name obey the
    table like an import; relative names resolve from the file's package."""
    root = plant(
        tmp_path,
        {
            "posbench/__init__.py": "",
            "posbench/core/__init__.py": "",
            "posbench/core/load.py": "import importlib\nfrom importlib import import_module\n\n\ndef f():\n"
            "    importlib.import_module('posbench.run.units')\n    import_module(name='posbench.core.load')\n",
            "posbench/report/__init__.py": "",
            "posbench/report/page.py": "from importlib import import_module\nimport_module('..run', __package__)\n"
            "import_module('.page', __package__)\nimport_module('json')\n",
            "posbench/run/__init__.py": "",
            "posbench/run/units.py": "",
        },
    )
    assert violations(root) == [
        "posbench/core/load.py:6 imports posbench.run.units by importlib.import_module('posbench.run.units'):"
        " core/ may import nothing of posbench",
        "posbench/report/page.py:2 imports posbench.run by import_module('..run', __package__): report/ may import core",
    ]
    assert dynamic_imports(root) == []


def test_the_checker_reports_an_import_by_a_literal_dunder_import(tmp_path):
    """``__import__("posbench.x")`` obeys the table like an import, as does ``builtins.__import__``."""
    root = plant(
        tmp_path,
        {
            "posbench/__init__.py": "",
            "posbench/report/__init__.py": "",
            "posbench/report/table.py": "import builtins\n\n\ndef f():\n    return __import__('posbench.run')\n"
            "\n\nbuiltins.__import__('posbench.tasks.alpha', fromlist=['TASK'])\n__import__('numpy')\n",
            "posbench/run/__init__.py": "",
        },
    )
    assert violations(root) == [
        "posbench/report/table.py:5 imports posbench.run by __import__('posbench.run'): report/ may import core",
        "posbench/report/table.py:8 imports posbench.tasks.alpha by builtins.__import__('posbench.tasks.alpha',"
        " fromlist=['TASK']): report/ may import core",
    ]


def test_the_checker_reports_a_name_known_only_when_run(tmp_path):
    """A module name built or passed when the code runs is allowed in the registry's places only."""
    loads = "import importlib\n\n\ndef load(name):\n    return importlib.import_module(f'posbench.{name}')\n"
    root = plant(
        tmp_path,
        {
            "posbench/__init__.py": "",
            "posbench/core/__init__.py": "",
            "posbench/core/registry/__init__.py": loads,
            "posbench/core/registry/finding.py": "def find(module):\n    return __import__(module)\n",
            "posbench/core/discovery.py": loads,
            "posbench/report/__init__.py": "",
            "posbench/report/hooks.py": loads + "\n\nmodule = 'posbench.run'\n__import__(module)\n",
        },
    )
    assert dynamic_imports(root) == [
        f"posbench/report/hooks.py:{line} imports a module named only when it runs, {how}: "
        f"only {', '.join(DYNAMIC_IMPORTS)} may (DYNAMIC_IMPORTS)"
        for line, how in ((5, "importlib.import_module(f'posbench.{name}')"), (9, "__import__(module)"))
    ]
    assert violations(root) == []
