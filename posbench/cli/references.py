"""The published numbers posbench reproduces (``posbench/references.yaml``), and checking each.

Plain data through one bounded reader (``read_file``: the suite files' safe YAML loader and its
caps, sizes within ``LIMITS``); the format and the four checks (``CHECKS``: ``alibi_slopes``,
``rope``, ``value``, ``ordering``) are described in docs/reports.md, "The references file".
A check answers (status, detail) with status ``pass``, ``fail`` or ``skipped``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posbench.core.outcome import PosbenchError

FORMAT = 1
DEFAULT_FILE = Path(__file__).resolve().parents[1] / "references.yaml"
MAX_BYTES = 1 << 20  # a references file is a page of numbers, not a data set
# Sizes a check allocates for, bounded before anything is built (a head_dim of 1e9 asked for 4 GB).
LIMITS = {"heads": (1, 4096), "head_dim": (2, 1 << 16), "length": (1, 1 << 24)}


class ReferencesError(PosbenchError, ValueError):
    """A references file that cannot be used; the message is one line naming file and entry."""


@dataclass
class Result:
    id: str
    status: str  # pass | fail | skipped
    detail: str


# check -> (required keys, optional keys) beyond id, source, check
KEYS = {
    "alibi_slopes": ({"heads", "slopes"}, set()),
    "rope": ({"method", "head_dim", "length", "inv_freq", "attention_factor"}, {"options", "rel"}),
    "value": ({"suite", "metric"}, {"params", "settings", "equals", "min", "max"}),
    "ordering": ({"suite", "metric", "better", "worse"}, {"params", "rule", "note"}),
}
COMMON = {"id", "source", "check"}
RULES = ("every", "mean")


def load(path: str | Path | None = None) -> tuple[int, list[dict]]:
    """(version, entries) of a references file, every entry checked for shape; one line if not."""
    path = Path(path) if path is not None else DEFAULT_FILE
    data = read_file(path)
    if not isinstance(data, dict) or set(data) != {"format", "version", "references"}:
        got = sorted(map(str, data)) if isinstance(data, dict) else type(data).__name__
        raise ReferencesError(f"{path}: the root must be a mapping with exactly format, version, references; got {got}")
    if not _is_int(data["format"]) or data["format"] != FORMAT:
        raise ReferencesError(f"{path}: format {_show(data['format'])} is not one this posbench reads; allowed: {FORMAT}")
    if not _is_int(data["version"]) or data["version"] < 1:
        raise ReferencesError(f"{path}: version must be a positive integer, got {_show(data['version'])}")
    entries = data["references"]
    if not isinstance(entries, list) or not entries:
        raise ReferencesError(f"{path}: references must be a non-empty list of entries")
    seen: set[str] = set()
    for n, entry in enumerate(entries, 1):
        _check_entry(path, n, entry, seen)
    return data["version"], entries


def read_file(path: Path) -> Any:
    """The parsed YAML of ``path``: a regular file (a FIFO or device never blocks) of at most
    ``MAX_BYTES``, read with the suite files' loader (``posbench.run.suite.yaml_reader``)."""
    from posbench.run.suite.yaml_reader import YamlProblem, load_yaml
    from posbench.store.bounds import RowsError, open_regular

    try:
        fh = open_regular(path)
        if fh is None:
            raise ReferencesError(f"{path}: no such file (a references file is YAML: format, version, references)")
        with fh:
            raw = fh.read(MAX_BYTES + 1)
    except (OSError, RowsError) as exc:
        raise ReferencesError(str(exc) if isinstance(exc, RowsError) else f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise ReferencesError(f"{path}: larger than {MAX_BYTES} bytes; allowed: a page of numbers up to that size")
    try:
        return load_yaml(str(raw, "utf-8"))[0]
    except UnicodeDecodeError as exc:
        raise ReferencesError(f"{path}: not UTF-8 (byte {exc.start}); allowed: a UTF-8 YAML file") from None
    except YamlProblem as p:
        key = "" if p.key == "<yaml>" else f"{p.key}: "
        raise ReferencesError(
            f"{path}: not a readable YAML file (line {p.line}): {key}{p.problem}; allowed: {p.allowed}"
        ) from None


def _show(value: Any) -> str:
    """``repr(value)`` cut to 60 characters: a message names a value, never prints a big one."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check_entry(path: Path, n: int, entry: Any, seen: set[str]) -> None:
    where = f"{path}: entry {n}"
    if not isinstance(entry, dict):
        raise ReferencesError(f"{where}: must be a mapping with id, source, check; got {type(entry).__name__}")
    if not isinstance(entry.get("id"), str) or not entry["id"]:
        raise ReferencesError(f"{where}: id must be a non-empty string")
    where = f"{path}: entry {n} ({entry['id']})"
    if entry["id"] in seen:
        raise ReferencesError(f"{where}: duplicate id; each entry needs its own")
    seen.add(entry["id"])
    if not isinstance(entry.get("check"), str) or entry["check"] not in KEYS:
        raise ReferencesError(f"{where}: check {_show(entry.get('check'))} is not one of {', '.join(KEYS)}")
    required, optional = KEYS[entry["check"]]
    missing = sorted((required | {"source"}) - set(entry))
    unknown = sorted(map(str, set(entry) - required - optional - COMMON))
    if missing or unknown:
        what = f"missing {', '.join(missing)}" if missing else f"unknown key(s) {', '.join(map(str, unknown))}"
        raise ReferencesError(f"{where}: {what}; allowed: {', '.join(sorted(required | optional | COMMON))}")
    problem = SHAPES[entry["check"]](entry) or _size_problem(entry)
    if problem:
        raise ReferencesError(f"{where}: {problem}")


def _size_problem(e: dict) -> str | None:
    """A size beyond ``LIMITS`` (checked before any check allocates for it)."""
    for key, (least, most) in LIMITS.items():
        if key in e and e[key] > most:
            return f"{key} {e[key]} is too large; allowed: {least} to {most}"
    return None


def _shape_slopes(e: dict) -> str | None:
    if not _is_int(e["heads"]) or e["heads"] < 1:
        return f"heads must be a positive integer, got {_show(e['heads'])}"
    if not (isinstance(e["slopes"], list) and len(e["slopes"]) == e["heads"] and all(map(_is_number, e["slopes"]))):
        return f"slopes must be a list of {e['heads']} numbers"
    return None


def _shape_rope(e: dict) -> str | None:
    if not isinstance(e["method"], str) or not isinstance(e.get("options", {}), dict):
        return "method must be a name and options a mapping"
    if not (_is_int(e["head_dim"]) and e["head_dim"] >= 2 and _is_int(e["length"]) and e["length"] >= 1):
        return "head_dim and length must be positive integers"
    freqs = e["inv_freq"]
    if not (
        isinstance(freqs, dict)
        and freqs
        and all(_is_int(k) and 0 <= k < e["head_dim"] // 2 and _is_number(v) for k, v in freqs.items())
    ):
        return f"inv_freq must map pair indices (0..{e['head_dim'] // 2 - 1}) to numbers"
    if not _is_number(e["attention_factor"]) or not _is_number(e.get("rel", 1e-6)):
        return "attention_factor and rel must be numbers"
    return None


def _shape_rows(e: dict) -> str | None:
    for key in ("suite", "metric") + (("better", "worse") if e["check"] == "ordering" else ()):
        if not isinstance(e[key], str) or not e[key]:
            return f"{key} must be a non-empty string"
    for key in ("params", "settings"):
        if not isinstance(e.get(key, {}), dict):
            return f"{key} must be a mapping of names to values rows must have"
    if e["check"] == "ordering":
        if e.get("rule", "every") not in RULES:
            return f"rule must be one of {', '.join(RULES)}, got {_show(e['rule'])}"
        return None
    bounds = [k for k in ("equals", "min", "max") if k in e]
    if not bounds or ("equals" in e and len(bounds) > 1) or not all(_is_number(e[k]) for k in bounds):
        return "give a number as equals, or min and/or max"
    return None


SHAPES: dict[str, Callable[[dict], str | None]] = {
    "alibi_slopes": _shape_slopes,
    "rope": _shape_rope,
    "value": _shape_rows,
    "ordering": _shape_rows,
}


# --- checks against posbench's code ----------------------------------------------------------------


def check_slopes(e: dict, runs) -> Result:
    from posbench.core.alibi_math import alibi_slopes

    got = alibi_slopes(e["heads"])
    bad = [i for i, (a, b) in enumerate(zip(got, e["slopes"])) if not math.isclose(a, b, rel_tol=1e-12)]
    if bad:
        i = bad[0]
        return Result(
            e["id"],
            "fail",
            f"head {i}: posbench {got[i]!r}, published {e['slopes'][i]!r} ({len(bad)} of {e['heads']} heads differ)",
        )
    return Result(e["id"], "pass", f"{e['heads']} heads: {_short(got)}")


def check_rope(e: dict, runs) -> Result:
    from posbench.core import registry
    from posbench.core.method import ModelConfig

    cfg = ModelConfig(d_model=e["head_dim"], n_heads=1, method=e["method"], method_options=dict(e.get("options", {})))
    try:
        m = registry.build(cfg).eval()
    except (PosbenchError, ValueError, TypeError) as exc:
        return Result(e["id"], "fail", f"cannot build {e['method']}: {exc}")
    theta, attention = m.frequencies(e["length"])
    rel = e.get("rel", 1e-6)
    for pair, want in sorted(e["inv_freq"].items()):
        if not math.isclose(theta[pair].item(), want, rel_tol=rel):
            return Result(
                e["id"],
                "fail",
                f"pair {pair}: posbench {theta[pair].item():.9g}, published {want:.9g} (relative tolerance {rel:g})",
            )
    if not math.isclose(attention, e["attention_factor"], rel_tol=rel):
        return Result(e["id"], "fail", f"attention factor: posbench {attention:.9g}, published {e['attention_factor']:.9g}")
    return Result(
        e["id"],
        "pass",
        f"{e['method']} at L {e['length']}: {len(e['inv_freq'])} pairs and the attention factor {attention:.6g} within {rel:g}",
    )


def _short(values: list[float]) -> str:
    shown = ", ".join(f"{v:.6g}" for v in values[:4])
    return f"[{shown}{', ...' if len(values) > 4 else ''}]"


# --- checks against runs ---------------------------------------------------------------------------


def _matches(have: Any, want: dict) -> bool:
    return isinstance(have, dict) and all(k in have and have[k] == v for k, v in want.items())


def suite_rows(e: dict, runs) -> tuple[list[dict], str | None]:
    """The ok rows of the entry's suite that match its params and settings, or why there are none."""
    frame = None if runs is None else runs.rows
    rows = [] if frame is None or frame.empty else frame[frame["suite"] == e["suite"]].to_dict("records")
    if not rows:
        return [], f"no run of suite {e['suite']} given"
    rows = [
        r
        for r in rows
        if r["status"] == "ok" and _matches(r["params"], e.get("params", {})) and _matches(r["settings"], e.get("settings", {}))
    ]
    if not rows:
        return [], f"no ok row of suite {e['suite']} matches params {e.get('params', {})} settings {e.get('settings', {})}"
    with_metric = [r for r in rows if _is_number(r["metrics"].get(e["metric"]))]
    if not with_metric:
        return [], f"rows of suite {e['suite']} have no metric {e['metric']}"
    return with_metric, None


def _point(row: dict) -> str:
    params = ", ".join(f"{k}={v}" for k, v in sorted(row["params"].items()))
    return f"{params or 'the grid point'} in {row['source']}"


def check_value(e: dict, runs) -> Result:
    rows, why = suite_rows(e, runs)
    if why:
        return Result(e["id"], "skipped", why)
    lo, hi = (e["equals"], e["equals"]) if "equals" in e else (e.get("min", -math.inf), e.get("max", math.inf))
    for r in rows:
        v = r["metrics"][e["metric"]]
        if not lo <= v <= hi:
            want = f"= {lo:g}" if "equals" in e else f"in [{lo:g}, {hi:g}]"
            return Result(e["id"], "fail", f"{r['method']} at {_point(r)}: {e['metric']} {v:g}, published {want}")
    return Result(e["id"], "pass", f"{e['metric']} of {len(rows)} row(s): {_short([r['metrics'][e['metric']] for r in rows])}")


def check_ordering(e: dict, runs) -> Result:
    from posbench import tasks
    from posbench.core.task import find_metric

    rows, why = suite_rows(e, runs)
    if why:
        return Result(e["id"], "skipped", why)
    task = rows[0]["task"]
    declared = find_metric(tasks.metrics_of(task or ""), e["metric"])
    higher = getattr(declared, "higher_is_better", None)
    if higher is None:
        return Result(e["id"], "skipped", f"task {task} declares no direction for metric {e['metric']}")
    points: dict[tuple, dict[str, float]] = {}
    for r in rows:
        if r["method"] in (e["better"], e["worse"]):
            key = (r["source"], tuple(sorted((k, str(v)) for k, v in r["params"].items())))
            points.setdefault(key, {})[r["method"]] = r["metrics"][e["metric"]]
            points[key]["_row"] = r
    pairs = [(p["_row"], p[e["better"]], p[e["worse"]]) for p in points.values() if e["better"] in p and e["worse"] in p]
    if not pairs:
        return Result(
            e["id"],
            "skipped",
            f"no grid point of suite {e['suite']} has both {e['better']} and {e['worse']} with metric {e['metric']}",
        )
    sign = 1 if higher else -1
    direction = "higher" if higher else "lower"
    if e.get("rule", "every") == "mean":
        b, w = (sum(x[i] for x in pairs) / len(pairs) for i in (1, 2))
        verdict = "pass" if sign * (b - w) > 0 else "fail"
        return Result(
            e["id"],
            verdict,
            f"mean {e['metric']} over {len(pairs)} grid point(s): {e['better']} {b:.4g}, "
            f"{e['worse']} {w:.4g} ({direction} is better)",
        )
    for row, b, w in pairs:
        if not sign * (b - w) > 0:
            return Result(
                e["id"],
                "fail",
                f"at {_point(row)}: {e['better']} {b:.4g}, {e['worse']} {w:.4g} ({e['metric']}, {direction} is better)",
            )
    row, b, w = pairs[0]
    return Result(
        e["id"],
        "pass",
        f"{e['better']} beats {e['worse']} at {len(pairs)} grid point(s) "
        f"({e['metric']}, {direction} is better; e.g. {b:.4g} vs {w:.4g} at {_point(row)})",
    )


CHECKS: dict[str, Callable[[dict, Any], Result]] = {
    "alibi_slopes": check_slopes,
    "rope": check_rope,
    "value": check_value,
    "ordering": check_ordering,
}


def check_all(entries: list[dict], runs) -> list[Result]:
    """One result per entry; an entry whose check raises is a fail naming the error (the others
    are still checked)."""
    out = []
    for e in entries:
        try:
            out.append(CHECKS[e["check"]](e, runs))
        except Exception as exc:  # one broken check must not hide the others' answers
            out.append(Result(e["id"], "fail", f"the check raised {type(exc).__name__}: {exc}"))
    return out
