"""Training budgets: ``steps``, ``tokens``, ``time_s`` (measured training wall time on this
device) or ``flops`` (``posbench.engine.flops``), each turned into the optimizer steps a run will
take, so the learning-rate schedule follows the steps it will reach. docs/tasks/budgets.md.

A time budget is decided from a short measured warm-up: one untimed step (allocation, kernel
choice), then timed steps until ``warmup_s`` has passed (at least ``MIN_TIMED_STEPS``); the run
takes ``floor(time_s / mean step time)`` steps. The warm-up is not part of the budget.
"""
from __future__ import annotations

import math
import time
from typing import Callable, Optional

BUDGETS = ("steps", "tokens", "time_s", "flops")
DEFAULT_WARMUP_S = 2.0  # seconds of timed warm-up steps a time budget is decided from
MIN_TIMED_STEPS = 3


def budget_of(cfg) -> tuple[str, float]:
    """(kind, value) of the one budget ``cfg`` gives (a ``TrainConfig`` or settings with the
    fields of ``BUDGETS``); a one-line ValueError for none, two, or one that is not positive."""
    given = [(k, getattr(cfg, k, None)) for k in BUDGETS if getattr(cfg, k, None) is not None]
    if len(given) != 1:
        named = ", ".join(k for k, _ in given) or "none"
        raise ValueError(f"training budget: give exactly one of {' or '.join(BUDGETS)} (given: {named})")
    kind, value = given[0]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"training budget: {kind} must be a positive number, got {value!r}")
    return kind, value


def steps_for(kind: str, value: float, tokens_per_step: int, flops_per_step: Optional[int] = None,
              step_seconds: Optional[float] = None) -> int:
    """Optimizer steps a budget allows: ``steps`` as given; ``tokens`` // tokens per step;
    ``flops`` // operations per step; ``time_s`` // the measured step time. At least one step
    allowed, else a one-line ValueError."""
    if kind == "steps":
        n = int(value)
    elif kind == "tokens":
        n = int(value // tokens_per_step)
    elif kind == "flops":
        if not flops_per_step:
            raise ValueError("training budget: flops needs the operations of one step")
        n = int(value // flops_per_step)
    elif kind == "time_s":
        if not step_seconds or step_seconds <= 0:
            raise ValueError("training budget: time_s needs a measured step time")
        n = int(value // step_seconds)
    else:
        raise ValueError(f"training budget: {kind!r} is not a budget; allowed: {', '.join(BUDGETS)}")
    if n < 1:
        raise ValueError(f"training budget {kind}={value:g} gives {n} steps; it must allow at least one step")
    return n


def measure_step_seconds(step: Callable[[], None], warmup_s: float, clock: Callable[[], float] = time.perf_counter,
                         sync: Callable[[], None] = lambda: None) -> tuple[float, float, int]:
    """(mean seconds of a timed step, warm-up seconds in all, timed steps): ``step()`` once
    untimed, then timed until ``warmup_s`` has passed and at least ``MIN_TIMED_STEPS`` ran.
    ``sync`` waits for the device (CUDA) before each reading of ``clock``."""
    began = clock()
    step()
    sync()
    start = clock()
    n = 0
    while n < MIN_TIMED_STEPS or clock() - start < warmup_s:
        step()
        sync()
        n += 1
    end = clock()
    return (end - start) / n, end - began, n
