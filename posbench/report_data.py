"""Reading stored runs: ``results/<suite>/<run-id>/cases.jsonl`` + ``env.json`` into one DataFrame.

Reports and comparisons never re-run anything; they start here. Several folders can be merged
(one per GPU type, or the shards of one run): rows keep their ``run_id`` and get a ``hardware``
label read from the run's ``env.json``, so tables can be split per machine and every number can
be traced back to the row and environment it came from.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

CASES_FILE = "cases.jsonl"
ENV_FILE = "env.json"

# Columns every row is expected to carry; missing ones are filled so downstream code can index
# them without guarding each access.
ROW_COLUMNS = [
    "case_id", "suite", "task", "method", "params", "status", "message", "metrics", "series",
    "settings", "device", "profile", "run_id", "started_at", "duration_s", "posbench_version",
    "git_commit",
]
_DICT_COLUMNS = ("params", "metrics", "series", "settings")


class RunsError(ValueError):
    """A folder holds no run, or a stored row cannot be read; the message names the file."""


def find_run_dirs(path: str | Path) -> list[Path]:
    """Run folders at or below ``path``: every folder that holds a ``cases.jsonl``, sorted.

    Accepting a parent folder lets users pass ``results/efficiency`` or a downloaded artifact
    without knowing the run id inside it.
    """
    path = Path(path)
    if (path / CASES_FILE).is_file():
        return [path]
    if not path.is_dir():
        raise RunsError(f"{path}: no such folder")
    found = sorted(p.parent for p in path.rglob(CASES_FILE))
    if not found:
        raise RunsError(f"{path}: no {CASES_FILE} in this folder or below it")
    return found


def _read_cases(path: Path) -> list[dict]:
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            # A run killed mid-write leaves a torn last line; everything before it is good.
            if lineno == len(lines):
                break
            raise RunsError(f"{path}:{lineno}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise RunsError(f"{path}:{lineno}: expected a JSON object per line")
        rows.append(row)
    return rows


def _read_env(run_dir: Path) -> dict:
    env_path = run_dir / ENV_FILE
    if not env_path.is_file():
        return {}
    env = json.loads(env_path.read_text(encoding="utf-8"))
    return env if isinstance(env, dict) else {}


def gpu_name(env: dict) -> str | None:
    """The GPU model NVML reported, or None when NVML was unavailable (CPU runs)."""
    nvml = env.get("nvml")
    if isinstance(nvml, dict):
        name = nvml.get("name")
        if isinstance(name, list):  # several GPUs: they are the same model in any sane run
            name = name[0] if name else None
        return str(name) if name else None
    return None


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


def load_runs(dirs) -> tuple[pd.DataFrame, dict[str, dict]]:
    """Merge the runs stored in ``dirs`` (run folders or folders above them).

    Returns ``(rows, envs)``: one DataFrame row per case with the stored columns (``params``,
    ``metrics``, ``series``, ``settings`` stay dicts) plus ``source`` (the run folder) and
    ``hardware`` (a machine label); ``envs`` maps each ``source`` to its ``env.json``.
    The same ``case_id`` twice within one ``run_id`` (a resumed run, or shards that overlap)
    keeps the row written last; the same case in different runs is kept, one row per run.
    """
    if isinstance(dirs, (str, Path)):
        dirs = [dirs]
    run_dirs: list[Path] = []
    for d in dirs:
        for run_dir in find_run_dirs(d):
            if run_dir not in run_dirs:
                run_dirs.append(run_dir)
    records, envs = [], {}
    for run_dir in run_dirs:
        env = _read_env(run_dir)
        envs[str(run_dir)] = env
        for row in _read_cases(run_dir / CASES_FILE):
            row = dict(row)
            for key in _DICT_COLUMNS:
                if not isinstance(row.get(key), dict):
                    row[key] = {}
            row.setdefault("run_id", run_dir.name)
            row["source"] = str(run_dir)
            row["hardware"] = hardware_label(env, row.get("device"))
            records.append(row)
    frame = pd.DataFrame.from_records(records)
    for column in ROW_COLUMNS + ["source", "hardware"]:
        if column not in frame.columns:
            frame[column] = None
    if not frame.empty:
        frame = frame.drop_duplicates(subset=["run_id", "case_id"], keep="last")
        frame = frame.reset_index(drop=True)
    return frame, envs


def row_anchor(run_id, case_id) -> str:
    """The HTML id of a row in the report's appendix; table cells link to it."""
    raw = f"row-{run_id}-{case_id}"
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in raw)
