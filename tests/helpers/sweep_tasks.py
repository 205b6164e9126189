"""What a launched sweep's local tasks leave running, ended by tests (their controllers and
everything those started), found through ``/proc``."""

import json
import os
import signal
from pathlib import Path


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def end_tasks(run_dir: Path) -> None:
    """Kill what a launch left running (its local tasks and their workers)."""
    try:
        record = json.loads((run_dir / "launcher.json").read_text())
    except (OSError, ValueError):
        return
    for unit in record["units"].values():
        if unit.get("job_id", "").isdigit():
            for pid in descendants(int(unit["job_id"])) + [int(unit["job_id"])]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
