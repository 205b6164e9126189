"""The options a method's constructor takes, for checking a suite's ``method_options``.

Read from the method's source file with ``ast`` when it says (validation imports no torch and
runs none of the method's code); only when the source does not say (a base class other than
``PositionMethod`` with no ``__init__`` of its own) is the class imported and its signature read.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path


def _options_from_source(path: Path, method: str) -> list[str] | None | bool:
    """The keyword options of ``method``'s constructor read from its file without running it
    (validation imports no torch): the ``@register`` class whose ``name`` is ``method``, its own
    ``__init__`` or, with none and ``PositionMethod`` as its only base, no options. None: it takes
    ``**kwargs``. False: the source does not say (the caller imports the class instead)."""
    from posbench.core.method_source import class_name

    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ClassDef) and class_name(node) == method):
            continue
        init = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
        if init is None:
            plain = [b for b in node.bases if not (isinstance(b, ast.Name) and b.id == "PositionMethod")]
            return False if plain else []
        if init.args.kwarg is not None:
            return None
        return [a.arg for a in init.args.args[2:]] + [a.arg for a in init.args.kwonlyargs]  # after self, cfg
    return False


def constructor_options(method: str) -> list[str] | None:
    """The options ``method_options`` may give ``method`` (its constructor's keyword parameters
    after ``cfg``), None when it takes any keyword."""
    from posbench.core import discovery

    found = _options_from_source(Path(discovery.require(method)), method)
    if found is not False:
        return found
    params = inspect.signature(discovery.get(method).__init__).parameters  # imports the method file
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return [
        p
        for p in params
        if p not in ("self", "cfg")
        and params[p].kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
