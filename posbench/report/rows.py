"""Several run folders as one table of rows (reports, compare), each row labelled with its
folder (``source``) and machine (``hardware``). The folder itself is ``posbench.store``'s."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posbench.core.task import Task
from posbench.store.bounds import RowsError, check_params
from posbench.store.meta import RunMeta, read_env, read_run_meta
from posbench.store.row import ROW_KEYS
from posbench.store.run_rows import CASES_FILE, _finite, case_rows, read_run_rows, warn


def gpu_name(env: dict) -> str | None:
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


def cpu_model(env: dict) -> str | None:
    """The CPU model from env.json, which may store it as a string or as a dict."""
    cpu = env.get("cpu")
    if isinstance(cpu, dict):
        for key in ("model", "name", "brand"):
            if cpu.get(key):
                return str(cpu[key])
        return None
    return str(cpu) if cpu else None


def hardware_label(env: dict, device: str | None) -> str:
    """A short machine name for captions and for splitting tables: the GPU, else the CPU."""
    gpu = gpu_name(env)
    if gpu and str(device or "").startswith("cuda"):
        return gpu
    cpu = cpu_model(env)
    if cpu:
        return f"CPU ({cpu})" if not gpu else f"{device} ({cpu})"
    return str(device or "unknown device")


def find_run_dirs(path: str | Path) -> list[Path]:
    """Run folders at or below ``path`` (each holding a ``cases.jsonl``), sorted: a parent folder or
    a downloaded artifact works without knowing the run id inside it."""
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
    ``metas`` each keyed by ``source`` (``metas[source]`` is None for a run without run.json),
    ``tasks`` the tasks of the rows that this installation knows, by name: what the report reads."""

    rows: Any  # pandas.DataFrame
    envs: dict[str, dict]
    metas: dict[str, RunMeta | None]
    problems: list[str] = field(default_factory=list)  # lines skipped, one warning each
    tasks: dict[str, Task] = field(default_factory=dict)

    def meta_of(self, sources: Iterable[str]) -> RunMeta | None:
        """The run.json of the first of ``sources`` that has one (shards of a run share it)."""
        for s in sources:
            if self.metas.get(s) is not None:
                return self.metas[s]
        return None

    def with_rows(self, rows) -> Runs:
        """The same runs (envs, metas, tasks) holding only ``rows``, a part of ``self.rows``."""
        return Runs(rows, self.envs, self.metas, tasks=self.tasks)


def load_runs(dirs, report: Callable[[str], Any] | None = None, find_task: Callable[[str], Task | None] | None = None) -> Runs:
    """The runs stored in ``dirs`` (run folders or folders above them), one row per (run, case):
    its rounds merged (``case_rows``), with their tasks (``find_task``: a name -> the task, None for
    one unknown here: the CLI hands its registry's lookup; left out, no task is known). Unusable
    lines or rows (``read_rows``, ``check_params``) are skipped with one
    warning each, handed to ``report`` (default: stderr) and kept in ``problems``."""
    if isinstance(dirs, (str, Path)):
        dirs = [dirs]
    run_dirs: list[Path] = []
    for d in dirs:
        for run_dir in find_run_dirs(d):
            if run_dir not in run_dirs:
                run_dirs.append(run_dir)
    return read_runs(run_dirs, report, find_task)


def read_runs(
    run_dirs: list[Path], report: Callable[[str], Any] | None = None, find_task: Callable[[str], Task | None] | None = None
) -> Runs:
    """``load_runs`` of run folders known to be ones (the end of a run reads back its own folder)."""
    import pandas as pd  # only readers of several runs need it; the runner does not

    records, envs, metas, problems = [], {}, {}, []
    tasks: dict[str, Task | None] = {}

    def task_of(name: Any) -> Task | None:  # each task name looked up once
        if not isinstance(name, str) or not name:
            return None
        if name not in tasks:
            tasks[name] = find_task(name) if find_task is not None else None
        return tasks[name]

    for run_dir in run_dirs:
        source = str(run_dir)
        env, meta = read_env(run_dir), read_run_meta(run_dir)
        envs[source], metas[source] = env, meta
        default_task = meta.task if meta else None

        def task_params(row: dict, where: str, default_task=default_task) -> None:
            name = row.get("task") or default_task
            task = task_of(name)
            check_params(row, name, task.Params if task is not None else None, where)

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
    for record in records:
        task_of(record["task"])
    for problem in problems:
        (warn if report is None else report)(problem)
    # The latest row per (run, case, round), then one row per (run, case): rounds merged.
    records = list(case_rows(records, key=lambda r: (r["run_id"], r["case_id"])).values())
    frame = pd.DataFrame.from_records(records)
    for column in ROW_KEYS + ("source", "hardware"):
        if column not in frame.columns:
            frame[column] = None
    return Runs(frame.reset_index(drop=True), envs, metas, problems, {k: t for k, t in tasks.items() if t is not None})
