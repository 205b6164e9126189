"""User code asked in a child process with a time limit: ``call(target, kwargs, timeout_s)``.

Method files may block, exit or crash the interpreter, so what the runner or CLI needs from them
before a worker exists (``unavailable``, the names a folder registers, the conformance checks)
is asked in ``python -P -m posbench.run.isolated``; a child without an answer is ``UserCodeFailed``.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from posbench.core.outcome import PosbenchError

if TYPE_CHECKING:  # the child imports what it needs when asked: listing stays light
    from posbench.core.case import CaseSpec

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
TEMP_PREFIX = "posbench-"  # as ``folder.TEMP_PREFIX``: a killed runner's leftovers are removed
STDERR_SHOWN = 20_000  # characters of the child's stderr passed on


class UserCodeFailed(PosbenchError):
    """User code (a method file) hung, exited or crashed the child asking it; one line."""


class UserCodeError(PosbenchError):
    """The user code answered with an error (a ``PosbenchError`` in the child: an unknown method,
    a broken method file); the message is the child's one line, ``kind`` its type's name."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


def call(target: str, kwargs: dict, timeout_s: float, methods_dirs: Sequence[str] = (), what: str = "") -> Any:
    """``target(**kwargs)`` run in a child process that first loads ``methods_dirs``; its answer
    (JSON), or ``UserCodeFailed`` / ``UserCodeError``. ``what`` names the work in messages."""
    what = what or target
    with tempfile.TemporaryDirectory(prefix=f"{TEMP_PREFIX}{os.getpid()}-") as tmp:
        request, answer, err = Path(tmp) / "request.json", Path(tmp) / "answer.json", Path(tmp) / "stderr.log"
        request.write_text(
            json.dumps({"target": target, "kwargs": kwargs, "methods_dirs": [str(Path(d).resolve()) for d in methods_dirs]})
        )
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
        from posbench.run.handoff import die_with_parent

        with open(err, "wb") as err_fh:
            proc = subprocess.Popen(
                [sys.executable, "-P", "-m", "posbench.run.isolated", str(request), str(answer)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err_fh,
                start_new_session=True,
                env=env,
                preexec_fn=die_with_parent(os.getpid()),
            )
            try:
                code = proc.wait(timeout=timeout_s)
                _kill(proc)  # what a method file forked there ends with it
            except subprocess.TimeoutExpired:
                _kill(proc)
                raise UserCodeFailed(
                    f"{what}: no answer after {timeout_s:g} s (a method file blocks at import or "
                    "while answering?); the process was killed"
                ) from None
            except BaseException:  # Ctrl-C, SIGTERM: never leave the child behind
                _kill(proc)
                raise
        stderr = str(err.read_bytes()[-STDERR_SHOWN:], "utf-8", errors="replace")
        try:
            out = json.loads(answer.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            out = None
    if stderr and (out is None or "error" not in out):
        sys.stderr.write(stderr if stderr.endswith("\n") else stderr + "\n")
    if out is None:
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        last = [line for line in stderr.splitlines() if line.strip()]
        tail = f": {last[-1].strip()[:300]}" if last else ""
        raise UserCodeFailed(
            f"{what}: ended without an answer ({how}; a method file that calls sys.exit or crashes at import?){tail}"
        )
    if "error" in out:
        raise UserCodeError(out["error"], out.get("kind", "UserCodeError"))
    return out["ok"]


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL the child's session: the child and whatever it started (gone already: nothing to do)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


# --- what the child may be asked ----------------------------------------------------------------


def listing(device: str | None = None) -> dict:
    """``{"methods": name -> origin, "reasons": name -> why not here (None: available; only with
    ``device``), "broken": name -> the error asking it raised}``."""
    from posbench.core import registry

    methods = registry.listing()
    reasons: dict[str, str | None] = {}
    broken: dict[str, str] = {}
    if device:
        import torch

        from posbench.core.outcome import one_line

        cuda_missing = device == "cuda" and not torch.cuda.is_available()
        for name in methods:
            if cuda_missing:
                reasons[name] = "CUDA is not available here"
                continue
            try:
                reasons[name] = registry.get(name).unavailable(torch.device(device), torch.float32)
            except Exception as exc:
                broken[name] = one_line(exc)
    return {
        "methods": methods,
        "reasons": reasons,
        "broken": broken,
        "modifiers": registry.modifiers(),
        "recipes": registry.recipes(),
    }


def require(method: str) -> str:
    """The file defining ``method``, imported (so a broken file fails here, within the limit)."""
    from posbench.core import registry

    origin = registry.require(method)
    registry.get(method)
    return origin


class _CheckTimedOut(BaseException):
    """Raised into a check past its time limit (a BaseException: the check's own ``except
    Exception`` cannot swallow it)."""


def conformance(method: str, device: str, step_s: float | None = None, step_how: str = "") -> dict:
    """``conformance.run_each``'s outcomes, each check within ``step_s`` (None: no limit of its
    own): the first that runs longer (a method that sleeps or loops) ends the checks in one line,
    which says how the limit was reached (``step_how``)."""
    from posbench.core import conformance as testing

    if step_s is None:
        return testing.run_all(method, device=device)
    limit = step_s

    def expire(signum, frame):
        raise _CheckTimedOut()

    out: dict = {}
    checks = testing.run_each(method, device=device)
    old = signal.signal(signal.SIGALRM, expire)
    try:
        while True:
            signal.setitimer(signal.ITIMER_REAL, limit)
            try:
                key, outcome = next(checks)
            except StopIteration:
                return out
            except _CheckTimedOut:
                done = f" (after {len(out)} that answered)" if out else ""
                how = f" ({step_how})" if step_how else ""
                raise PosbenchError(
                    f"the checks of {method}: a check gave no answer within {limit:g} s{how}{done}; the tiny shapes take "
                    "well under a second: does the method sleep or loop? allowed: a method whose calls return in seconds"
                ) from None
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            out[key] = outcome
    finally:
        signal.signal(signal.SIGALRM, old)


def unavailable(cases: list[dict]) -> list[list]:
    """Per case (a ``CaseSpec``'s JSON): ``[reason or None, None]``, or ``[None, error]`` when asking
    raised (a method file that does not import)."""
    from posbench.core import registry
    from posbench.core.case import CaseSpec
    from posbench.core.outcome import one_line

    out, broken = [], {}
    for raw in cases:
        case = CaseSpec.from_json(raw)
        try:
            if case.method in broken:
                raise RuntimeError(broken[case.method])
            # its file imported within POSBENCH_IMPORT_TIMEOUT_S: one that blocks costs seconds, not this child's limit
            registry.load_limited(case.method)
            out.append([unavailable_reason(case), None])
        except Exception as exc:
            broken[case.method] = one_line(exc)
            out.append([None, broken[case.method]])
    return out


def main(argv: list[str]) -> int:
    from posbench.run.handoff import die_with_parent

    arm = die_with_parent(os.getppid())
    if arm is not None:
        arm()
    request, answer = Path(argv[0]), Path(argv[1])
    req = json.loads(request.read_text(encoding="utf-8"))
    try:
        if req["methods_dirs"]:
            from posbench.core import registry

            for folder in req["methods_dirs"]:
                registry.add_methods_dir(folder)
        module, name = req["target"].split(":")
        out = {"ok": getattr(importlib.import_module(module), name)(**req["kwargs"])}
    except PosbenchError as exc:
        out = {"error": str(exc).strip().splitlines()[0] if str(exc).strip() else "", "kind": type(exc).__name__}
    except Exception as exc:
        from posbench.core.outcome import one_line

        out = {"error": one_line(exc), "kind": type(exc).__name__}
    tmp = answer.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, default=str))
    os.replace(tmp, answer)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def unavailable_reason(case: CaseSpec) -> str | None:
    """The method's own answer for this device and dtype, decided without a worker."""
    import torch

    from posbench import tasks
    from posbench.core import registry

    task = tasks.get(case.task)
    if task.own_methods:  # tasks whose "methods" are not position methods answer for their variants
        return task.unavailable_reason(case)
    dtype = getattr(torch, case.settings.get("dtype", "float32"))
    # then the task's own word (a recipe that does not fit a checkpoint's family)
    return registry.get(case.method).unavailable(torch.device(case.device), dtype) or task.unavailable_reason(case)
