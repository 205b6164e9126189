"""Suite YAML read as data: a safe loader (nothing in a file runs code), caps on what a small file
can cost (size, nodes after alias expansion, integer digits, depth), duplicate and non-scalar
keys refused. Problems are ``YamlProblem``; ``KeyLines`` finds a key's line for later messages;
``bad_number`` refuses non-finite floats and integers beyond 64 bits.
"""

from __future__ import annotations

import math
from typing import Any

import yaml

MAX_FILE_BYTES = 1 << 20  # 1 MiB; the shipped suites are a few KiB
MAX_NODES = 100_000  # YAML nodes after every alias is expanded
MAX_INT_DIGITS = 30  # a 64-bit integer has at most 20 digits; longer ones are refused unparsed
INT_LIMIT = 2**63  # integers must fit in a signed 64-bit int (seeds, sizes)
MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlProblem(Exception):
    """A problem found while reading YAML: (1-based line, key, problem, allowed)."""

    def __init__(self, line: int, key: str, problem: str, allowed: str):
        super().__init__(problem)
        self.line, self.key, self.problem, self.allowed = line, key, problem, allowed


# libyaml's parser when PyYAML was built with it (about 10x faster than the pure-Python one, so
# the size cap is reached in well under a second); the constructor, and so every rule here, is
# the same Python code either way.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SuiteLoader(_SafeLoader):
    """SafeLoader that rejects duplicate keys (PyYAML keeps the last silently), non-scalar keys
    and over-long integers. Merge keys (``<<: *base``, YAML 1.1) are supported: the merged keys
    come first and the mapping's own keys override them, as the YAML spec says."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == MERGE_TAG:
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                kind = "mapping" if isinstance(key_node, yaml.MappingNode) else "list"
                raise YamlProblem(line, "<yaml>", f"a {kind} used as a mapping key", "plain keys such as seq_len")
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise YamlProblem(line, str(key), f"duplicate key (first at line {seen[key]})", "each key once per mapping")
            seen[key] = line
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node):
        digits = node.value.replace("_", "").lstrip("+-")
        if len(digits) > MAX_INT_DIGITS:
            raise YamlProblem(
                node.start_mark.line + 1,
                "<yaml>",
                f"an integer of {len(digits)} digits",
                f"integers of at most {MAX_INT_DIGITS} digits",
            )
        return super().construct_yaml_int(node)


SuiteLoader.add_constructor("tag:yaml.org,2002:int", SuiteLoader.construct_yaml_int)


def _expanded_size(root) -> int:
    """Nodes of the tree with every alias expanded, counted without expanding (shared nodes are
    counted once per use from a memo); stops at ``MAX_NODES + 1``. A node that contains itself
    (``&a [*a]``) raises ``YamlProblem``."""
    memo: dict[int, int] = {}
    active: set[int] = set()

    def size(node) -> int:
        key = id(node)
        if key in memo:
            return memo[key]
        if key in active:
            raise YamlProblem(
                node.start_mark.line + 1,
                "<yaml>",
                "an alias refers to a node that contains it",
                "aliases of complete, non-recursive nodes",
            )
        active.add(key)
        total = 1
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = node.value
        else:
            children = []
        for child in children:
            total += size(child)
            if total > MAX_NODES:
                break
        active.discard(key)
        memo[key] = min(total, MAX_NODES + 1)
        return memo[key]

    return size(root)


class KeyLines:
    """The 1-based line of a key path (``("settings", "warmup_steps")``, ``("methods", 2)``), found
    by walking the node tree down that path when a message needs it: linear in the file, with
    nothing built up front. A path that does not exist gives the line of its longest prefix."""

    def __init__(self, root):
        self.root = root

    def line(self, path: tuple) -> int:
        node, line = self.root, self.root.start_mark.line + 1
        for part in path:
            found = None
            if isinstance(node, yaml.MappingNode):
                for key_node, value_node in node.value:  # merges are flattened in: the last one wins
                    if isinstance(key_node, yaml.ScalarNode) and key_node.value == str(part):
                        found = key_node.start_mark.line + 1, value_node
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
                item = node.value[part]
                found = item.start_mark.line + 1, item
            if found is None:
                break
            line, node = found
        return line


def load_yaml(text: str) -> tuple[Any, Any]:
    """(data, root node) of one YAML document; ``YamlProblem`` for anything wrong with it."""
    loader = None
    try:
        loader = SuiteLoader(text)  # the reader rejects unprintable characters already here
        node = loader.get_single_node()
        if node is None:
            return None, None
        if _expanded_size(node) > MAX_NODES:
            raise YamlProblem(
                node.start_mark.line + 1,
                "<yaml>",
                f"aliases expand to more than {MAX_NODES} nodes",
                "aliases that keep the expanded document small (an alias bomb is refused)",
            )
        return loader.construct_document(node), node
    except RecursionError:  # composing, counting or constructing a deeply nested document
        raise YamlProblem(1, "<yaml>", "nesting too deep", "a few levels of mappings and lists") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(str(exc.problem or exc.context or "invalid YAML").split())
        if "nesting depth" in problem:  # libyaml's own limit (PyYAML 6.0.4 on): the same refusal
            raise YamlProblem(
                mark.line + 1 if mark else 1, "<yaml>", "nesting too deep", "a few levels of mappings and lists"
            ) from None
        raise YamlProblem(mark.line + 1 if mark else 1, "<yaml>", f"invalid YAML: {problem}", "YAML 1.1 syntax") from None
    except yaml.YAMLError as exc:  # e.g. a character YAML does not allow; no mark to point at
        raise YamlProblem(1, "<yaml>", f"invalid YAML: {' '.join(str(exc).split())}", "YAML 1.1 syntax") from None
    finally:
        if loader is not None:
            loader.dispose()


def bad_number(value: Any, path: tuple = ()) -> tuple[tuple, str, str] | None:
    """The first (path, problem, allowed) of a non-finite float or an integer beyond 64 bits in
    ``value`` (settings, grid values): ``lr: .inf`` would pass a ``gt=0`` bound and fail only when
    the row is written, and a seed beyond 64 bits only when torch is seeded."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return path, f"non-finite number {value}", "finite numbers"
    if isinstance(value, int) and not -INT_LIMIT <= value < INT_LIMIT:
        return path, f"integer {value} does not fit in 64 bits", "-2**63 <= n < 2**63"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        bad = bad_number(item, path + (key,))
        if bad:
            return bad
    return None
