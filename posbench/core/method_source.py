"""What a method file registers, read from its source without importing it (listing names needs no
torch): ``@register`` classes with a literal ``name``, literal ``register_variants`` tables (a
table named ``RECIPES`` holds recipes) and ``@register_modifier`` classes. None where the source does not say; the caller then imports the file.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path


def is_register(node: ast.AST, name: str = "register") -> bool:
    return (isinstance(node, ast.Name) and node.id == name) or (isinstance(node, ast.Attribute) and node.attr == name)


def class_name(node: ast.ClassDef) -> str | None:
    """The string literal assigned to ``name`` in the class body, if it is one."""
    for stmt in node.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "name" for t in targets):
            value = stmt.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value.isidentifier():
                return value.value
            return None
    return None


def _variant_names(tree: ast.Module) -> list[str] | None:
    """The keys of the tables passed to ``register_variants(TABLE, make)``, each a dict literal
    (inline, or assigned once at module level) with identifier keys; None when one is not."""
    literals: dict[str, ast.AST] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            literals[stmt.targets[0].id] = stmt.value if stmt.targets[0].id not in literals else None
    names: list[str] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and is_register(node.func, "register_variants")):
            continue
        table = node.args[0] if node.args else None
        if isinstance(table, ast.Name):
            table = literals.get(table.id)
        if not isinstance(table, ast.Dict):
            return None
        for key in table.keys:
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.isidentifier()):
                return None
            names.append(key.value)
    return names


def literal_names(path: Path) -> list[str] | None:
    """The names a method file registers, read from its source (``@register`` classes' literal
    ``name``, literal ``register_variants`` tables); None, so the caller imports it, otherwise."""
    try:
        stat = path.stat()
        return _parse_names(path, stat.st_mtime_ns, stat.st_size)
    except OSError:
        return None  # importing the file raises the error that names it


@functools.cache
def _parse_names(path: Path, mtime_ns: int, size: int) -> list[str] | None:
    """``literal_names`` of one version of the file (validating a suite lists methods per name)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None
    names: list[str] = []
    decorators: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for dec in filter(is_register, node.decorator_list):
                decorators.add(id(dec))
                name = class_name(node)
                if name is None:
                    return None
                names.append(name)
        elif (
            isinstance(node, ast.alias)
            and node.name in ("register", "register_variants")
            and node.asname not in (None, node.name)
        ):
            return None
    if any(is_register(node) and id(node) not in decorators for node in ast.walk(tree)):
        return None
    variants = _variant_names(tree)
    return None if variants is None else names + variants


def recipe_names(path: Path) -> list[str]:
    """The names of a method file's recipes: the keys of its ``register_variants`` table named
    ``RECIPES`` (methods/recipes.py), presets built from other methods."""
    stat = path.stat()
    return _parse_recipes(path, stat.st_mtime_ns, stat.st_size)


@functools.cache
def _parse_recipes(path: Path, mtime_ns: int, size: int) -> list[str]:
    """``recipe_names`` of one version of the file."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return []
    tables = [
        node.args[0].id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and is_register(node.func, "register_variants")
        and node.args
        and isinstance(node.args[0], ast.Name)
    ]
    if "RECIPES" not in tables:
        return []
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and [getattr(t, "id", None) for t in stmt.targets] == ["RECIPES"]:
            if isinstance(stmt.value, ast.Dict):
                return [k.value for k in stmt.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return []


def modifier_names(path: Path) -> list[str]:
    """The literal names of the ``@register_modifier`` classes of a method file."""
    return list(modifier_places(path, 0))


def modifier_places(path: Path, default: int) -> dict[str, int | None]:
    """name -> ``place`` of the ``@register_modifier`` classes of a method file, read without
    importing it: the literal integer, ``default`` with no ``place``, None where it is not a literal."""
    stat = path.stat()
    return _parse_modifiers(path, stat.st_mtime_ns, stat.st_size, default)


@functools.cache
def _parse_modifiers(path: Path, mtime_ns: int, size: int, default: int) -> dict[str, int | None]:
    """``modifier_places`` of one version of the file."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return {}
    return {
        name: _place(node, default)
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and any(is_register(d, "register_modifier") for d in node.decorator_list)
        and (name := class_name(node)) is not None
    }


def _place(node: ast.ClassDef, default: int) -> int | None:
    """The literal integer assigned to ``place`` in the class body, ``default`` when none is."""
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "place" for t in stmt.targets):
            value = stmt.value
            literal = isinstance(value, ast.Constant) and isinstance(value.value, int) and not isinstance(value.value, bool)
            return value.value if literal else None
    return default


def syntax_error(path: Path) -> str | None:
    """``SyntaxError: invalid syntax (line 3)`` when the file does not parse, else None."""
    try:
        ast.parse(path.read_bytes(), str(path))
    except SyntaxError as exc:
        return f"{type(exc).__name__}: {exc.msg} (line {exc.lineno})"
    except (OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
