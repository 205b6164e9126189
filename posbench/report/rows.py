"""The results a run folder holds, and the one way everything reads them.

A run folder ``results/<suite>/<run-id>/`` holds::

    run.json      what was run: suite, version, task, baseline, method order, metrics, settings, grid
    env.json      where it ran: versions, git commit, CPU, GPU (posbench.engine.env)
    cases.jsonl   one JSON row per finished case, appended as cases end (ROW_KEYS)
    rows/*.jsonl  a launched sweep (``--launcher slurm|local``): each array task's own rows file,
                  ``rows/<unit>.jsonl`` (rows from many nodes never go to one file)

The runner (resume), ``bench.py report`` and ``bench.py compare`` all read through this module
(``read_run_rows``: ``cases.jsonl`` and then every ``rows/*.jsonl``, merged), so they agree on
three rules:

- **A row's shape** (``check_row``, ``posbench.report.stored``): a JSON object with ``case_id``,
  ``method``, ``status`` (strings), ``params`` (scalars; those the task's grid requires, of their
  type) and ``metrics`` (numbers or null), sane numbers, ``round`` at most ``stored.MAX_ROUNDS``.
  Files are read within bounds (regular files only, bounded lines and nesting). A line that breaks
  a rule is skipped with one warning naming file and line; a torn last line is skipped silently.
- **The latest row of a case** (``latest``): rows ordered by ``started_at`` (rows without one
  first), ties kept in the order read; the last one wins. A retried case appends a newer row.
- **Rounds** (``merge_rounds``): a suite with ``rounds: k`` stores one row per case and round
  (``round`` 1..k; a row without one is round 1). The latest row counts per (case, round), and
  readers see one row per case: metrics are medians over its ok rounds, ``series[m + "_by_round"]``
  holds every round's value of each metric (index r-1, null for a round without one), and
  ``metrics["n_rounds"]`` counts the ok rounds. Tables pair these lists with the baseline's, round
  by round (``posbench.report.bootstrap``).
- **Paired windows** (rows with ``info.pairing == "windows"``, measured with the other methods of
  their grid point in one process, ``info.group`` naming it): a metric ``m`` with a per-window
  series ``series[m + "_windows"]`` also gets ``series[m + "_by_window"]``, per round ``{"group",
  "values"}`` (null for a round without an ok row). Tables and compare pair those window by window
  with the baseline's of the same group, which is what cancels the machine's drift
  (``posbench.report.bootstrap.window_clusters``). Such a case is merged even when it has one round.
"""
from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from posbench.core.files import atomic_write_text
from posbench.report import stored
from posbench.report.stored import RowsError, check_params, check_row  # noqa: F401  (re-exported: the runner checks rows)

CASES_FILE = "cases.jsonl"
ROWS_DIR = "rows"  # a launched sweep's per-task rows files: rows/<unit>.jsonl
ENV_FILE = "env.json"
RUN_FILE = "run.json"
RUN_FORMAT = 1  # run.json's own version: bump when its keys change meaning

# Keys of a row, in the order the runner writes them.
ROW_KEYS = ("case_id", "suite", "task", "method", "params", "status", "message", "metrics", "series",
            "info", "settings", "device", "profile", "run_id", "started_at", "duration_s", "posbench_version",
            "git_commit", "traceback", "round")
# Used when a run was written before run.json existed (format 0): the suites' old default.
LEGACY_BASELINE = "sinusoidal"


# ---------------------------------------------------------------------------------------------
# cases.jsonl


def warn(problem: str) -> None:
    """The one way a skipped line or row is told when the caller collects no ``problems``."""
    print(f"warning: {problem}", file=sys.stderr)


def read_rows(path: str | Path, problems: Optional[list[str]] = None,
              check: Optional[Callable[[dict, str], Any]] = None) -> list[dict]:
    """Every usable row of a ``cases.jsonl`` in file order; ``[]`` when the file does not exist yet.

    A line that is not UTF-8, not JSON (or nested too deep, or longer than ``stored.MAX_LINE``) or
    not a row (``check_row``) is skipped with one warning naming file and line, appended to
    ``problems`` (printed when it is None): a damaged line costs its case, never the run. A last
    line without its newline that does not parse is a write cut short and is skipped silently (the
    runner cuts it off before appending). A file that is not a regular file is a ``RowsError``.
    ``check(row, "file:line")``: a further test of each row (``load_runs``: the task's parameters),
    raising ``RowsError`` to skip it.
    """
    path = Path(path)
    fh = stored.open_regular(path)
    if fh is None:
        return []
    report = warn if problems is None else problems.append
    rows = []
    with fh:
        for lineno, raw, ended in stored.lines(fh):
            if raw is not None and not raw.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                if raw is None:
                    raise RowsError(f"{where}: longer than {stored.size_text(stored.MAX_LINE)}; allowed: lines "
                                    "up to that")
                try:
                    text = str(raw, "utf-8")
                except UnicodeDecodeError:
                    if not ended:  # a write cut inside a multi-byte character
                        break
                    raise RowsError(f"{where}: not UTF-8 text") from None
                try:
                    row = stored.loads(text)
                except ValueError as exc:
                    if not ended:  # a torn last line
                        break
                    raise RowsError(f"{where}: {exc}") from None
                check_row(row, where)
                if check is not None:
                    check(row, where)
                rows.append(row)
            except RowsError as exc:
                report(f"{exc}; line skipped")
    return rows


def rows_files(run_dir: str | Path) -> list[Path]:
    """The rows files of a run folder: ``cases.jsonl``, then ``rows/*.jsonl`` sorted by name. A
    ``rows`` that is a link is a ``RowsError`` (a run folder's links are never followed); a link
    or anything but a file inside it is left for ``read_rows`` to refuse by name."""
    run_dir = Path(run_dir)
    folder = run_dir / ROWS_DIR
    if folder.is_symlink():
        raise RowsError(f"{folder}: a symbolic link; posbench does not follow links in a run folder")
    try:
        names = sorted(e.name for e in os.scandir(folder) if e.name.endswith(".jsonl"))
    except (FileNotFoundError, NotADirectoryError):
        names = []
    return [run_dir / CASES_FILE] + [folder / n for n in names]


def read_run_rows(run_dir: str | Path, problems: Optional[list[str]] = None,
                  check: Optional[Callable[[dict, str], Any]] = None) -> list[dict]:
    """Every usable row of a run folder (``read_rows`` of each of ``rows_files``, in that order):
    the one reader of a run's rows, for resume, report and compare alike. Which row of a case
    counts is ``latest``'s rule (``started_at``), whichever file holds it."""
    rows: list[dict] = []
    for path in rows_files(run_dir):
        rows += read_rows(path, problems, check)
    return rows


def _order(row: dict) -> str:
    started = row.get("started_at")
    return started if isinstance(started, str) else ""


def latest(rows: Iterable[dict], key: Callable[[dict], Any] = lambda r: r["case_id"]) -> dict[Any, dict]:
    """``key(row)`` -> the latest row (module docstring); keys keep the order they first appear.

    The default key is the case id (one run folder, or "this case, whichever run"); reports
    use ``(run_id, case_id)`` so each run keeps its own row.
    """
    rows = list(rows)
    first_seen = {}
    for r in rows:
        first_seen.setdefault(key(r), len(first_seen))
    out: dict[Any, dict] = {}
    for r in sorted(rows, key=_order):  # stable: equal times keep the order read
        out[key(r)] = r
    return dict(sorted(out.items(), key=lambda kv: first_seen[kv[0]]))


def round_of(row: dict) -> int:
    """The row's round, 1-based; rows written before rounds existed are round 1 (``check_row``
    bounds it by ``stored.MAX_ROUNDS``)."""
    r = row.get("round")
    return r if isinstance(r, int) and not isinstance(r, bool) and 1 <= r <= stored.MAX_ROUNDS else 1


def latest_rounds(rows: Iterable[dict], key: Callable[[dict], Any] = lambda r: r["case_id"]) -> dict[Any, dict]:
    """``(key(row), round)`` -> the latest row of that case and round (``latest`` per round)."""
    return latest(rows, key=lambda r: (key(r), round_of(r)))


def merge_rounds(rows: list[dict]) -> dict:
    """One row for a case from its rows of different rounds (the latest of each; module docstring).

    Status: ``ok`` when every stored round is ok, else the first failed round's status, message
    (prefixed ``round r:``) and traceback; ``--retry-failed`` re-runs just that round. A case
    with a single row (one round, or a run from before rounds) comes back unchanged.
    """
    if len(rows) == 1 and not group_of(rows[0]):
        return dict(rows[0])  # one round (or a row from before rounds): nothing to merge
    rows = sorted(rows, key=round_of)
    ok = [r for r in rows if r["status"] == "ok"]
    failed = [r for r in rows if r["status"] != "ok"]
    out = dict(ok[0] if ok else rows[0])
    if failed:
        first = failed[0]
        out.update(status=first["status"], message=first.get("message", ""), traceback=first.get("traceback", ""))
        if len(rows) > 1:
            out["message"] = f"round {round_of(first)}: {out['message']}"
    n = max(round_of(r) for r in rows)
    names = list(dict.fromkeys(k for r in ok for k in r["metrics"]))
    metrics, series = {}, dict(out.get("series") or {})
    for name in names:
        by_round: list = [None] * n
        for r in ok:
            value = _finite(r["metrics"].get(name))
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                by_round[round_of(r) - 1] = value
        values = [v for v in by_round if v is not None]
        metrics[name] = _median(values) if values else None
        series[f"{name}_by_round"] = by_round
    for name in names:  # paired windows: each round's windows, with the process they came from
        by_window: list = [None] * n
        for r in ok:
            values = (r.get("series") or {}).get(f"{name}_windows")
            if group_of(r) and isinstance(values, list):
                by_window[round_of(r) - 1] = {"group": group_of(r), "values": values}
        if any(by_window):
            series[f"{name}_by_window"] = by_window
    if not ok:
        metrics = dict(out["metrics"])
    metrics["n_rounds"] = len(ok)
    out.update(metrics=metrics, series=series, round=None)
    if len(rows) > 1:
        out["duration_s"] = sum(float(r.get("duration_s") or 0) for r in rows)
    return out


def group_of(row: dict) -> Optional[str]:
    """The process (``info.group``) a paired-windows row was measured in; None for other rows."""
    info = row.get("info")
    if isinstance(info, dict) and info.get("pairing") == "windows" and isinstance(info.get("group"), str):
        return info["group"]
    return None


def _median(values: list):
    values = sorted(values)
    mid = len(values) // 2
    if len(values) % 2:
        return values[mid]
    return (values[mid - 1] + values[mid]) / 2


def case_rows(rows: Iterable[dict], key: Callable[[dict], Any] = lambda r: r["case_id"]) -> dict[Any, dict]:
    """``key(row)`` -> one merged row per case: the latest row of each round, then ``merge_rounds``."""
    groups: dict[Any, list] = {}
    for (k, _round), row in latest_rounds(rows, key).items():
        groups.setdefault(k, []).append(row)
    return {k: merge_rounds(group) for k, group in groups.items()}


def _finite(value):
    return None if isinstance(value, float) and not math.isfinite(value) else value


# ---------------------------------------------------------------------------------------------
# run.json


@dataclass
class RunMeta:
    """What ``run.json`` records: enough to lay out tables and read ratios without the suite file."""

    suite: str
    version: int
    task: str
    baseline: Optional[str]
    methods: list[str]
    metrics: list[str]
    settings: dict = field(default_factory=dict)
    grid: dict = field(default_factory=dict)
    profile: str = ""
    device: str = ""
    run_id: str = ""
    posbench_version: str = ""
    written_at: str = ""
    format: int = RUN_FORMAT

    @classmethod
    def of_suite(cls, suite, device: str, run_id: str) -> "RunMeta":
        """The record of a resolved ``posbench.run.suite.Suite`` about to run on ``device``."""
        from posbench import __version__

        settings = suite.settings.model_dump() if hasattr(suite.settings, "model_dump") else dict(suite.settings)
        return cls(suite=suite.name, version=suite.version, task=suite.task, baseline=suite.baseline,
                   methods=list(suite.methods), metrics=list(suite.metrics), settings=settings,
                   grid={k: list(v) for k, v in suite.grid.items()}, profile=suite.profile, device=device,
                   run_id=run_id, posbench_version=__version__,
                   written_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))


def write_run_meta(run_dir: str | Path, meta: RunMeta) -> Path:
    """``run_dir/run.json``, written atomically (a reader sees the old file or the new one)."""
    return atomic_write_text(Path(run_dir) / RUN_FILE, json.dumps(asdict(meta), indent=2, default=str) + "\n")


def _read_json(path: Path) -> Any:
    """A stored JSON file (run.json, env.json), read within bounds; missing: ``...`` (Ellipsis)."""
    data = stored.read_small(path)
    if data is None:
        return ...
    try:
        text = str(data, "utf-8")
    except UnicodeDecodeError:
        raise RowsError(f"{path}: not UTF-8 text") from None
    try:
        return stored.loads(text)
    except stored.NotJson as exc:
        line = f":{exc.lineno}" if exc.lineno else ""
        raise RowsError(f"{path}{line}: {exc}") from None


_STR, _LIST_OF_STR = "a string", "a list of strings"
_META_TYPES = {"suite": _STR, "version": "a whole number", "task": _STR, "baseline": "a string or null",
               "methods": _LIST_OF_STR, "metrics": _LIST_OF_STR, "settings": "an object",
               "grid": "an object of lists", "profile": _STR, "device": _STR, "run_id": _STR,
               "posbench_version": _STR, "written_at": _STR, "format": "a whole number"}


def _meta_type_ok(key: str, value: Any) -> bool:
    kind = _META_TYPES[key]
    if kind == _STR:
        return isinstance(value, str)
    if kind == "a whole number":
        return isinstance(value, int) and not isinstance(value, bool) and abs(value) < stored.MAX_INT
    if kind == "a string or null":
        return value is None or isinstance(value, str)
    if kind == _LIST_OF_STR:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "an object":
        return isinstance(value, dict)
    return isinstance(value, dict) and all(isinstance(v, list) for v in value.values())


def read_run_meta(run_dir: str | Path) -> Optional[RunMeta]:
    """The run's ``run.json``, or None for a run written before posbench kept one. A file that is
    not a regular file, not UTF-8, not JSON, or whose keys have the wrong types is a one-line
    ``RowsError`` naming it and the key."""
    path = Path(run_dir) / RUN_FILE
    data = _read_json(path)
    if data is ...:
        return None
    if not isinstance(data, dict):
        raise RowsError(f"{path}: expected a JSON object, got {type(data).__name__}")
    missing = [k for k in ("suite", "version", "task", "baseline", "methods", "metrics") if k not in data]
    if missing:
        raise RowsError(f"{path}: no {missing[0]!r}; run.json needs suite, version, task, baseline, methods, metrics")
    if not isinstance(data["methods"], list) or not isinstance(data["metrics"], list):
        raise RowsError(f"{path}: methods and metrics must be lists")
    for key, kind in _META_TYPES.items():
        if key in data and not _meta_type_ok(key, data[key]):
            raise RowsError(f"{path}: {key}: expected {kind}, got {type(data[key]).__name__}")
    return RunMeta(**{k: v for k, v in data.items() if k in _META_TYPES})


# ---------------------------------------------------------------------------------------------
# env.json and hardware labels


def read_env(run_dir: str | Path) -> dict:
    """The run's ``env.json``; ``{}`` when there is none or it holds no object."""
    env = _read_json(Path(run_dir) / ENV_FILE)
    return env if isinstance(env, dict) else {}


def gpu_name(env: dict) -> Optional[str]:
    """The GPU model NVML reported, else torch's name for it (env.json ``gpu``: a GPU run without
    NVML), or None (CPU runs)."""
    nvml = env.get("nvml")
    if isinstance(nvml, dict):
        name = nvml.get("name")
        if isinstance(name, list):  # several GPUs: they are the same model in any sane run
            name = name[0] if name else None
        if name:
            return str(name)
    torch_name = env.get("gpu")
    return torch_name if isinstance(torch_name, str) and torch_name else None


def cpu_model(env: dict) -> Optional[str]:
    """The CPU model from env.json, which may store it as a string or as a dict."""
    cpu = env.get("cpu")
    if isinstance(cpu, dict):
        for key in ("model", "name", "brand"):
            if cpu.get(key):
                return str(cpu[key])
        return None
    return str(cpu) if cpu else None


def hardware_label(env: dict, device: Optional[str]) -> str:
    """A short machine name for captions and for splitting tables: the GPU, else the CPU."""
    gpu = gpu_name(env)
    if gpu and str(device or "").startswith("cuda"):
        return gpu
    cpu = cpu_model(env)
    if cpu:
        return f"CPU ({cpu})" if not gpu else f"{device} ({cpu})"
    return str(device or "unknown device")


# ---------------------------------------------------------------------------------------------
# Several run folders as one table of rows (reports, compare)


def find_run_dirs(path: str | Path) -> list[Path]:
    """Run folders at or below ``path``: every folder that holds a ``cases.jsonl``, sorted.

    Accepting a parent folder lets users pass ``results/<suite>`` or a downloaded artifact
    without knowing the run id inside it.
    """
    path = Path(path)
    if os.path.lexists(path / CASES_FILE):  # whatever it is: read_rows refuses a FIFO or a device in one line
        return [path]
    if not path.is_dir():
        raise RowsError(f"{path}: no such folder")
    # os.walk does not follow links to folders: a link loop cannot make the search endless
    found = sorted(Path(folder) for folder, _dirs, files in os.walk(path) if CASES_FILE in files)
    if not found:
        raise RowsError(f"{path}: no {CASES_FILE} in this folder or below it")
    return found


@dataclass
class Runs:
    """Rows of several run folders: ``rows`` a DataFrame (one line per case and run, the stored
    keys plus ``source``, the run folder, and ``hardware``, a machine label), ``envs`` and
    ``metas`` each keyed by ``source`` (``metas[source]`` is None for a run without run.json)."""

    rows: Any  # pandas.DataFrame
    envs: dict[str, dict]
    metas: dict[str, Optional[RunMeta]]
    problems: list[str] = field(default_factory=list)  # lines skipped, one warning each

    def meta_of(self, sources: Iterable[str]) -> Optional[RunMeta]:
        """The run.json of the first of ``sources`` that has one (shards of a run share it)."""
        for s in sources:
            if self.metas.get(s) is not None:
                return self.metas[s]
        return None


def load_runs(dirs, report: Optional[Callable[[str], Any]] = None) -> Runs:
    """Merge the runs stored in ``dirs`` (run folders or folders above them).

    Each (run_id, case_id) keeps its latest row per round (a resumed run, or shards that overlap),
    its rounds merged into one row (``merge_rounds``); the same case in different runs is kept,
    one row per run. A line or row that cannot be used (``read_rows``; parameters the row's task
    needs, ``check_params``) is skipped with one warning naming file and line, handed to
    ``report`` (default: printed to stderr) and kept in ``Runs.problems``.
    """
    import pandas as pd  # only readers of several runs need it; the runner does not

    if isinstance(dirs, (str, Path)):
        dirs = [dirs]
    run_dirs: list[Path] = []
    for d in dirs:
        for run_dir in find_run_dirs(d):
            if run_dir not in run_dirs:
                run_dirs.append(run_dir)
    records, envs, metas, problems = [], {}, {}, []
    for run_dir in run_dirs:
        source = str(run_dir)
        env, meta = read_env(run_dir), read_run_meta(run_dir)
        envs[source], metas[source] = env, meta
        default_task = meta.task if meta else None

        def task_params(row: dict, where: str, default_task=default_task) -> None:
            check_params(row, row.get("task") or default_task, where)

        for row in read_run_rows(run_dir, problems, check=task_params):
            row = dict(row)
            for key in ("series", "settings", "info"):
                if not isinstance(row.get(key), dict):
                    row[key] = {}
            row["metrics"] = {k: _finite(v) for k, v in row["metrics"].items()}
            row["run_id"] = row.get("run_id") or run_dir.name
            row["task"] = row.get("task") or default_task
            row["suite"] = row.get("suite") or (meta.suite if meta else run_dir.parent.name)
            row["source"] = source
            row["hardware"] = hardware_label(env, row.get("device"))
            records.append(row)
    for problem in problems:
        (warn if report is None else report)(problem)
    # The latest row per (run, case, round), then one row per (run, case): rounds merged.
    records = list(case_rows(records, key=lambda r: (r["run_id"], r["case_id"])).values())
    frame = pd.DataFrame.from_records(records)
    for column in ROW_KEYS + ("source", "hardware"):
        if column not in frame.columns:
            frame[column] = None
    return Runs(frame.reset_index(drop=True), envs, metas, problems)
