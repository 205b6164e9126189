"""What the runner and its worker processes share across the process boundary: the signal that
ends a worker with its parent, and the result files a worker (each rank) writes and the runner
reads (``read_result``). Apart from ``worker`` so that the launcher needs nothing of it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int | None = None):
    """A function that makes the process calling it get SIGKILL when its parent dies (Linux
    ``prctl(PR_SET_PDEATHSIG)``), and exit at once if the parent (pid ``parent``) is already gone;
    None off Linux. The runner passes it as Popen's ``preexec_fn`` (it runs in the child between
    fork and exec, and the setting survives exec); a rank under torchrun calls it at start. The
    libc lookup happens here, in the caller, so the forked child only makes the call."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    import signal

    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if parent is not None and os.getppid() != parent:  # it died before the line above
            os._exit(1)

    return arm


def first_failure(results: list[dict]) -> dict | None:
    """The failure that came first: when one rank fails, its peers fail next, waiting for it."""
    failed = [r for r in results if r.get("status", "error") != "ok"]
    return min(failed, key=lambda r: r.get("failed_at", float("inf"))) if failed else None


def rank_file(result_path: Path, rank: int | str) -> Path:
    return result_path.with_name(f"{result_path.stem}.rank{rank}{result_path.suffix}")


def read_result(result_path: Path) -> dict | None:
    """The case's outcome: a rank's failure if any rank wrote one, else RESULT.json, else None."""
    failures = [json.loads(p.read_text()) for p in result_path.parent.glob(rank_file(result_path, "*").name)]
    failure = first_failure(failures)
    if failure is not None:
        return failure
    return json.loads(result_path.read_text()) if result_path.exists() else None
