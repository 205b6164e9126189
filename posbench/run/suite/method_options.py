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
        if isinstance(node, ast.ClassDef) and class_name(node) == method:
            init = _init_of(node)
            if init is None:
                plain = [b for b in node.bases if not (isinstance(b, ast.Name) and b.id == "PositionMethod")]
                return False if plain else []
            return _keywords(init)
    maker = _variant_maker(tree, method)
    if maker is not None:  # a variant: the class its maker function defines (methods/recipes.py)
        inits = [_init_of(c) for c in ast.walk(maker) if isinstance(c, ast.ClassDef)]
        if len(inits) == 1 and inits[0] is not None:
            return _keywords(inits[0])
    return False


def _init_of(node: ast.ClassDef) -> ast.FunctionDef | None:
    return next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)


def _keywords(init: ast.FunctionDef) -> list[str] | None:
    if init.args.kwarg is not None:
        return None
    return [a.arg for a in init.args.args[2:]] + [a.arg for a in init.args.kwonlyargs]  # after self, cfg


def _variant_maker(tree: ast.Module, method: str) -> ast.FunctionDef | None:
    """The module-level function ``register_variants(TABLE, make)`` builds ``method`` with, when
    TABLE is a dict literal (inline or assigned at module level) holding ``method`` as a key."""
    from posbench.core.method_source import is_register

    tables = {t.id: s.value for s in tree.body if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)}
    functions = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and is_register(node.func, "register_variants") and len(node.args) == 2):
            continue
        table, make = node.args
        table = tables.get(table.id) if isinstance(table, ast.Name) else table
        keys = [k.value for k in table.keys if isinstance(k, ast.Constant)] if isinstance(table, ast.Dict) else []
        if method in keys and isinstance(make, ast.Name):
            return functions.get(make.id)
    return None


def constructor_options(method: str) -> list[str] | None:
    """The options ``method_options`` may give ``method`` (its constructor's keyword parameters
    after ``cfg``), None when it takes any keyword."""
    from posbench.core import registry

    found = _options_from_source(Path(registry.require(method)), method)
    if found is not False:
        return found
    params = inspect.signature(registry.get(method).__init__).parameters  # imports the method file
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return [
        p
        for p in params
        if p not in ("self", "cfg")
        and params[p].kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
