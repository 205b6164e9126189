"""Worker processes: how a case (or a group of cases) is launched, watched and ended.

A fresh ``python -P -m posbench.run.worker`` (or torchrun's ranks) per job, in its own session,
killed with its runner (``PR_SET_PDEATHSIG``), under ``timeout_s``; a process that died without a
result gets an ``error``/``oom``/``timeout`` result. ``worker_env`` is every worker's environment;
``kill_running`` ends the workers of every pool thread on an interrupt.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from posbench.core.case import CaseSpec
from posbench.core.outcome import OOM_TEXT
from posbench.run.handoff import die_with_parent, read_result
from posbench.run.machine import TEMP_PREFIX

PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def worker_command(case: CaseSpec, case_file: Path, result_file: Path) -> list[str]:
    """The worker's command line: through torchrun when the case asks for several processes."""
    # -P: the current folder is not put on sys.path, so a pydantic.py or posbench/ where the user
    # stands is never imported; the package comes from PYTHONPATH (run_worker sets it).
    worker = ["-m", "posbench.run.worker", str(case_file), str(result_file)]
    nproc = case.settings.get("nproc", 1)
    if nproc > 1:
        # --standalone: a rendezvous on this node at a free port, so cases never share one.
        return [sys.executable, "-P", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)] + worker
    return [sys.executable, "-P"] + worker


# glibc's allocator adapts its mmap threshold to the largest block a process has freed, so two
# processes running the same code can differ 2-3x on a CPU: a generation step of the tiny model at
# C = 4096, B = 8 took 64-102 ms after a prefill that freed nothing large (every 16 MiB KV-cache
# concatenation a fresh mmap, page-faulted in) and 29-40 ms once the threshold was fixed; which
# method happened to free a large block first decided its "speed". Every CPU worker therefore gets
# one fixed policy (blocks up to 32 MiB from the heap, which is not trimmed back below 1 GiB);
# a user's own MALLOC_* settings win.
CPU_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


def cpu_malloc_env() -> dict[str, str]:
    """The allocator policy of CPU workers: ``CPU_MALLOC_ENV`` where the user set nothing."""
    return {key: os.environ.get(key, value) for key, value in CPU_MALLOC_ENV.items()}


def worker_env(case: CaseSpec) -> dict[str, str]:
    """The environment of ``case``'s worker process(es)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
    env["PYTHONSAFEPATH"] = "1"  # as -P, also for the ranks torchrun starts
    threads = case.settings.get("threads")
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    if case.device == "cpu":
        env.update(cpu_malloc_env())
    return env


def run_worker(case: CaseSpec, timeout_s: float, env: dict[str, str] | None = None) -> dict:
    """Run ``case`` in a fresh process (or torchrun's ranks); its result or how it died. ``env``:
    variables added to ``worker_env`` (the pool's device)."""
    return _spawn(case, case.to_json(), timeout_s, env)


def run_group_worker(cases: list[CaseSpec], round_: int, timeout_s: float, env: dict[str, str] | None = None) -> list[dict]:
    """Run ``cases`` (one grid point and round) together in one fresh worker process
    (``worker.run_group``); a result per case, in order. A process that died or timed out gives
    every case its outcome, naming the methods that shared the process."""
    result = _spawn(cases[0], {"group": [c.to_json() for c in cases], "round": round_}, timeout_s, env)
    if isinstance(result.get("group"), list) and len(result["group"]) == len(cases):
        return result["group"]
    if result.get("status") == "ok" or "group" in result:  # a worker that broke the protocol
        result = {"status": "error", "message": "the group worker returned no result per case", "traceback": ""}
    if len(cases) > 1:
        result = dict(result, message=f"{result['message']} (one process for {', '.join(c.method for c in cases)})")
    return [dict(result) for _ in cases]


_RUNNING: set[subprocess.Popen] = set()  # workers now running, from any thread
_RUNNING_LOCK = threading.Lock()


def kill_running() -> int:
    """End every worker now running (the pool's, interrupted); how many there were."""
    with _RUNNING_LOCK:
        procs = list(_RUNNING)
    for proc in procs:
        _kill(proc, grace_s=5.0)
    return len(procs)


def _spawn(case: CaseSpec, payload: dict, timeout_s: float, extra_env: dict[str, str] | None = None) -> dict:
    """Run the worker on ``payload`` (a case, or a group of cases like ``case``) in a fresh
    process; the result file's content, or how the process died."""
    with tempfile.TemporaryDirectory(prefix=f"{TEMP_PREFIX}{os.getpid()}-") as tmp:
        case_file, result_file, log_file = (Path(tmp) / n for n in ("case.json", "result.json", "worker.log"))
        case_file.write_text(json.dumps(payload))
        env = dict(worker_env(case), **(extra_env or {}))
        with open(log_file, "wb") as log:
            # A session of its own: Ctrl-C reaches only the runner, which then ends the worker
            # (and anything it started) as a group.
            # preexec_fn: the worker gets SIGKILL when this process dies (kill -9 of bench.py
            # must not leave it running beside the resumed run).
            # (PR_SET_PDEATHSIG fires when the *thread* that started the worker ends: a pool
            # thread waits for its worker, so that is the same moment.)
            proc = subprocess.Popen(
                worker_command(case, case_file, result_file),
                stdin=subprocess.DEVNULL,  # nothing a worker loads may read bench.py's stdin (a prompt answered by a pipe)
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
                preexec_fn=die_with_parent(os.getpid()),
            )
            with _RUNNING_LOCK:
                _RUNNING.add(proc)
            try:
                code = proc.wait(timeout=timeout_s)
                _end_process_group(proc.pid)
            except subprocess.TimeoutExpired:
                _kill(proc)
                return {
                    "status": "timeout",
                    "message": f"no result after {timeout_s:g} s; worker killed",
                    "traceback": _tail(log_file),
                }
            except BaseException:  # KeyboardInterrupt: never leave a worker behind
                _kill(proc)
                raise
            finally:
                with _RUNNING_LOCK:
                    _RUNNING.discard(proc)
        result = read_result(result_file)  # torchrun's exit code says less than the rank files
        if result is not None:
            return result
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        tail = _tail(log_file)
        # An allocation failure the worker could not catch (C++ bad_alloc, a MemoryError while
        # starting up, before it could write a result) is still out of memory.
        if any(t in tail.lower() for t in OOM_TEXT + ("memoryerror",)):
            limit = case.settings.get("memory_limit_mb")
            under = f" under memory_limit_mb {limit}" if limit else ""
            return {"status": "oom", "message": f"worker ran out of memory{under} and died ({how})", "traceback": tail}
        return {"status": "error", "message": f"worker died without a result ({how})", "traceback": tail}


def _end_process_group(pgid: int) -> None:
    """SIGKILL what the ended worker left in its session (a plugin that forked a child): nothing
    of a case outlives it. The kernel keeps a group's id from being reused while a member lives,
    so the id names that group only; a child that made a session of its own is out of reach."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the worker left nothing behind


def _kill(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """End the worker. torchrun starts each rank in a session of its own, out of reach of a
    group kill, so it gets SIGTERM first: it then stops its ranks itself."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.wait()


def _tail(path: Path, limit: int = 4000) -> str:
    """The end of the worker's output, for rows where the worker could not report itself."""
    try:
        return str(path.read_bytes()[-limit:], "utf-8", errors="replace")
    except OSError:
        return ""
