"""The local pool: units of a sweep run side by side, one per slot (``--gpus``, ``--parallel``).

A slot is a unit's own GPUs (``CUDA_VISIBLE_DEVICES``) or, on a CPU, a turn; a timed task refuses
``--parallel`` (units sharing cores would time the sharing). The threads only wait for workers;
the calling thread alone saves rows (``run_units``' ``emit``). docs/many-gpus.md.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from posbench.core.outcome import PosbenchError
from posbench.run.options import RunOptions
from posbench.run.suite import Suite
from posbench.run.units import Unit

MAX_PARALLEL = 1024  # --parallel: slots (threads) at once; more is a typo, not a machine


class PoolError(PosbenchError):
    """A bad ``--gpus`` / ``--parallel``; ``str()`` is the one line to print."""


@dataclass(frozen=True)
class Slot:
    """One place a unit runs: ``gpus`` (the CUDA device ids it gets; empty on a CPU) and ``index``."""

    index: int
    gpus: tuple[str, ...] = ()

    def env(self) -> dict[str, str]:
        """What its workers' environment adds: the GPUs they may see."""
        return {"CUDA_VISIBLE_DEVICES": ",".join(self.gpus)} if self.gpus else {}

    def info(self) -> dict[str, str]:
        """What a row of this slot records (``info``): which GPUs, or which CPU slot."""
        return {"cuda_visible_devices": ",".join(self.gpus)} if self.gpus else {"pool_slot": str(self.index)}


def visible_gpus() -> list[str]:
    """The GPUs this process may use: ``CUDA_VISIBLE_DEVICES`` when set, else torch's count."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [g.strip() for g in listed.split(",") if g.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def parse_gpus(text: str, available: Sequence[str] | None = None) -> list[str]:
    """``--gpus 0,1,3`` or ``--gpus all`` -> the device ids, each once; ``available`` (default:
    ``visible_gpus``) is what ``all`` means and what a listed id must be one of."""
    text = text.strip()
    avail = list(visible_gpus() if available is None else available)
    if text == "all":
        if not avail:
            raise PoolError(
                "--gpus all: no GPU is visible here (CUDA_VISIBLE_DEVICES or torch found none); "
                "allowed: --gpus on a CUDA machine, or --parallel N on a CPU"
            )
        return avail
    ids = [g.strip() for g in text.split(",")]
    if not ids or any(not g for g in ids):
        raise PoolError(f"--gpus {text!r}: expected comma-separated device ids, e.g. 0,1,2,3, or all")
    dup = next((g for i, g in enumerate(ids) if g in ids[:i]), None)
    if dup is not None:
        raise PoolError(f"--gpus {text!r}: GPU {dup} is listed twice; two units would share it; allowed: each GPU once")
    unknown = [g for g in ids if g not in avail]
    if unknown:
        raise PoolError(f"--gpus {text!r}: no GPU {unknown[0]} here; allowed: {', '.join(avail) or 'none visible'}")
    return ids


def gpu_slots(gpus: Sequence[str], per_slot: int) -> list[Slot]:
    """``gpus`` cut into slots of ``per_slot`` (a case's ``nproc``); GPUs left over stay idle."""
    if per_slot > len(gpus):
        raise PoolError(
            f"--gpus: a case needs {per_slot} GPUs (nproc {per_slot}) and only {len(gpus)} are given; "
            f"allowed: at least {per_slot} GPUs, or a smaller nproc"
        )
    return [Slot(i, tuple(gpus[i * per_slot : (i + 1) * per_slot])) for i in range(len(gpus) // per_slot)]


def cpu_slots(parallel: int, timed: bool, task: str) -> list[Slot]:
    """``--parallel N`` slots on a CPU; a timed task refuses more than one (module docstring)."""
    if not 1 <= parallel <= MAX_PARALLEL:
        raise PoolError(f"--parallel {str(parallel)[:24]}: allowed: a whole number from 1 to {MAX_PARALLEL}")
    if parallel > 1 and timed:
        raise PoolError(
            f"--parallel {parallel}: task {task!r} times its methods against each other, and two units "
            "on the same CPU would slow each other (the ratios would measure the sharing); allowed: "
            "--parallel 1, or --gpus on a CUDA machine (a device per unit)"
        )
    return [Slot(i) for i in range(parallel)]


def slots_for(suite: Suite, o: RunOptions) -> list[Slot] | None:
    """This run's slots (``--gpus``: ``gpu_slots``, ``--parallel``: ``cpu_slots``), or None: one job
    at a time. The run and its dry run both ask here, before anything is written."""
    if o.gpus is None and o.parallel == 1:
        return None
    if o.in_process:
        raise PoolError(
            "--gpus / --parallel start a worker per unit, which a run under torchrun (cases on its "
            "joined ranks) cannot do; allowed: one of the two"
        )
    if o.gpus is not None:
        if o.parallel != 1:
            raise PoolError("--gpus and --parallel both say how many units run at once; allowed: one of them")
        return gpu_slots(list(o.gpus), int(suite.settings.nproc))
    return cpu_slots(o.parallel, suite.task.timed, suite.task_name)


# run_unit(unit, slot, emit, stopped): run the unit's jobs, calling emit(*what) per finished case.
RunUnit = Callable[[Unit, Slot, Callable[..., None], threading.Event], None]


def run_units(
    units: list[Unit],
    slots: list[Slot],
    run_unit: RunUnit,
    emit: Callable[..., None],
    on_start: Callable[[Unit, Slot], None] | None = None,
) -> None:
    """Run ``units`` on ``slots``, each slot one unit at a time, in order; ``emit(*what)`` is
    called here, in the calling thread, for everything ``run_unit`` reports. An error in a
    ``run_unit`` stops the others (their running workers killed) and is raised here; so is a
    KeyboardInterrupt of this thread."""
    from posbench.run.launch import kill_running

    pending = list(units)
    lock = threading.Lock()
    stopped = threading.Event()
    inbox: queue.Queue = queue.Queue()

    def next_unit() -> Unit | None:
        with lock:
            return pending.pop(0) if pending and not stopped.is_set() else None

    def slot_loop(slot: Slot) -> None:
        try:
            while (unit := next_unit()) is not None:
                inbox.put(("start", unit, slot))
                run_unit(unit, slot, lambda *what: None if stopped.is_set() else inbox.put(("row", what)), stopped)
        except BaseException as exc:  # noqa: B036  (handed to the calling thread, which raises it)
            inbox.put(("error", exc))
        finally:
            inbox.put(("done", slot))

    threads = [
        threading.Thread(target=slot_loop, args=(s,), name=f"posbench-slot-{s.index}", daemon=True)
        for s in slots[: max(1, len(units))]
    ]
    for t in threads:
        t.start()
    live = len(threads)
    try:
        while live:
            try:
                kind, *rest = inbox.get(timeout=0.5)  # a timeout, so Ctrl-C is seen promptly
            except queue.Empty:
                continue
            if kind == "done":
                live -= 1
            elif kind == "start" and on_start is not None:
                on_start(*rest)
            elif kind == "row":
                emit(*rest[0])
            elif kind == "error":
                raise rest[0]
    except BaseException:
        stopped.set()
        for _ in range(120):  # a thread may start one more worker between its check and the kill
            kill_running()
            for t in threads:
                t.join(timeout=0.5)
            if not any(t.is_alive() for t in threads):
                break
        raise
