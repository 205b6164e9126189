"""What a run leaves on the machine beside its folder: worker temp folders (named for their
runner, so the next run removes those of a runner that was killed) and how busy the machine
was at the start and the end (``env.json``'s ``machine``)."""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

TEMP_PREFIX = "posbench-"  # worker temp folders: posbench-<runner pid>-<random>


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def clean_stale_temp_dirs(root: str | None = None) -> list[Path]:
    """Remove worker temp folders whose runner is gone (killed with -9: nothing ran its cleanup)."""
    removed = []
    for path in Path(root or tempfile.gettempdir()).glob(TEMP_PREFIX + "*"):
        m = re.fullmatch(re.escape(TEMP_PREFIX) + r"(\d+)-.*", path.name)
        if m and path.is_dir() and not _alive(int(m.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def record_machine(run_dir: Path, when: str, device: str, timed: bool = True) -> None:
    """How busy the machine is now, into env.json ("machine": {"start", "end"}); a one-line
    warning when other processes compete for the CPU or GPU and the run measures speed (``timed``:
    a task that times its methods; a busy machine does not change a perplexity or an accuracy)."""
    from posbench.engine import env as envmod

    state = envmod.machine_state(device)
    envmod.record_machine(run_dir, when, state)
    warning = envmod.busy_warning(state) if timed else None
    if warning:
        print(f"posbench ({when} of run): {warning}", file=sys.stderr)
