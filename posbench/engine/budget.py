"""Training budgets (``steps``, ``tokens``, ``time_s``, ``flops``) turned into the optimizer steps a
run takes, so the learning-rate schedule follows them. A time budget is planned from a measured
warm-up and then spent on the real clock (``TimeBudget``: re-planned after every step); see
docs/tasks/budgets.md."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator

BUDGETS = ("steps", "tokens", "time_s", "flops")
DEFAULT_WARMUP_S = 2.0  # seconds of timed warm-up steps a time budget is decided from
MIN_TIMED_STEPS = 3
_EPS = 1e-9  # a budget that is an exact multiple of the step time still fits its last step


def now() -> float:
    """The clock budgets are measured on (a test replaces it with a fake one)."""
    return time.perf_counter()


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


def steps_for(
    kind: str, value: float, tokens_per_step: int, flops_per_step: int | None = None, step_seconds: float | None = None
) -> int:
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
        n = planned_steps(value, 0.0, 0, step_seconds)
    else:
        raise ValueError(f"training budget: {kind!r} is not a budget; allowed: {', '.join(BUDGETS)}")
    if n < 1:
        raise ValueError(f"training budget {kind}={value:g} gives {n} steps; it must allow at least one step")
    return n


def measure_step_seconds(
    step: Callable[[], None],
    warmup_s: float,
    clock: Callable[[], float] | None = None,
    sync: Callable[[], None] = lambda: None,
    agree: Callable[[bool], bool] = lambda more: more,
) -> tuple[float, float, int]:
    """(mean seconds of a timed step, warm-up seconds in all, timed steps): ``step()`` once
    untimed, then timed until ``warmup_s`` has passed and at least ``MIN_TIMED_STEPS`` ran.
    ``sync`` waits for the device (CUDA) before each reading of ``clock`` (default ``now``);
    ``agree`` turns this process's "one more step?" into every rank's (under torchrun each
    step is a collective, so all ranks must take the same number)."""
    clock = clock or now
    began = clock()
    step()
    sync()
    start = clock()
    n = 0
    while agree(n < MIN_TIMED_STEPS or clock() - start < warmup_s):
        step()
        sync()
        n += 1
    end = clock()
    return (end - start) / n, end - began, n


def planned_steps(budget_s: float, spent_s: float, done: int, first_step_s: float) -> int:
    """Steps a time budget of ``budget_s`` seconds will reach, ``done`` steps and ``spent_s``
    seconds in: ``done`` plus the steps that fit in what is left at the mean step time so far
    (``first_step_s``, the warm-up's, before the first step). Never below ``done``."""
    step_s = spent_s / done if done else first_step_s
    if step_s <= 0:
        raise ValueError("training budget: time_s needs a positive step time")
    return done + max(0, math.floor((budget_s - spent_s) / step_s + _EPS))


class TimeBudget:
    """A time budget spent on the real clock during training: ``tick()`` after each step,
    ``total()`` the steps it will reach (re-planned from the steps so far), ``paused()`` around
    work that is not training (held-out checks). ``sync`` waits for the device before a reading."""

    def __init__(
        self,
        seconds: float,
        first_step_s: float,
        clock: Callable[[], float] | None = None,
        sync: Callable[[], None] = lambda: None,
    ):
        self.seconds, self.first_step_s, self.sync = seconds, first_step_s, sync
        self.clock = clock or now
        self.spent, self.done = 0.0, 0
        self.mark = self.clock()

    def tick(self) -> None:
        """One step done: its time counts against the budget."""
        self.sync()
        t = self.clock()
        self.spent += t - self.mark
        self.mark = t
        self.done += 1

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Time inside is not spent from the budget."""
        self.sync()
        self.spent += self.clock() - self.mark
        try:
            yield
        finally:
            self.mark = self.clock()

    def total(self) -> int:
        return planned_steps(self.seconds, self.spent, self.done, self.first_step_s)
