"""Paired windows: several methods measured in one process, short window by short window.

A shared (virtual) CPU changes speed by 10-25% over seconds to minutes, and a process may run
faster or slower than the next one for its whole life. Timing each method in its own process
(``pairing: rounds``) leaves that drift in every ratio. Here one process holds every method's
model of a grid point and alternates measured windows between them: window w of each method,
then window w + 1 of each, ... A method's window w and the baseline's window w are then about a
second apart, and their ratio cancels whatever the machine did over longer spans
(``posbench.report.bootstrap.window_clusters``).

The order within a window is a row of a Williams design (``window_order``): over a cycle of
windows every method runs in every position equally often and follows every other method
equally often, so neither "runs first" nor "runs after the method with the big cache footprint"
favours anyone.

A method that raises (building its model, warming up, in a window) is out from then on, with its
own failure result (``posbench.run.worker.failure``); the others go on.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional


def window_order(n: int, index: int) -> list[int]:
    """Row ``index`` of a Williams design for ``n`` methods: the order of window ``index``.

    Row 0 is 0, 1, n-1, 2, n-2, ...; row i adds i to every entry (mod n). For even n the n rows
    hold every ordered pair (a right before b) exactly once; for odd n the reversed rows follow
    (a cycle of 2n) and every ordered pair occurs twice. Every position holds every method equally
    often over a cycle.
    """
    if n < 1:
        raise ValueError(f"window_order: n must be at least 1, got {n}")
    first, lo, hi = [0], 1, n - 1
    while lo <= hi:
        first.append(lo)
        if lo != hi:
            first.append(hi)
        lo, hi = lo + 1, hi - 1
    cycle = n if n % 2 == 0 else 2 * n
    i = index % cycle
    row = [(x + i % n) % n for x in first]
    return row if i < n else row[::-1]


@dataclass
class Member:
    """One method in a paired process: its state (``obj``, what the task built), the windows it
    ran and, once it raised, its failure result (then it runs no more)."""

    key: str
    obj: Any = None
    failure: Optional[dict] = None
    windows: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # phase -> [(start, seconds)]

    @property
    def ok(self) -> bool:
        return self.failure is None

    def fail(self, exc: BaseException) -> None:
        """Record ``exc`` as this member's outcome (call inside the ``except`` block: the
        traceback is formatted now) and drop its state, so its memory is freed for the others."""
        from posbench.core.outcome import failure

        self.failure = failure(exc)
        self.obj = None

    def guard(self, fn: Callable[..., Any], *args) -> Any:
        """``fn(*args)`` unless this member already failed; an exception fails the member alone."""
        if not self.ok:
            return None
        try:
            return fn(*args)
        except Exception as exc:  # one method's failure is its own row; the others go on
            self.fail(exc)
            return None


def alternate(members: list[Member], phase: str, windows: int, measure: Callable[[Member], float],
              first_window: int = 0, clock: Callable[[], float] = time.time) -> None:
    """Run ``windows`` windows of every member, interleaved: for w = 0..windows-1 the members in
    the order ``window_order(len(members), first_window + w)``, each ``measure(member)`` (seconds
    of one window). ``member.windows[phase]`` gets (start time from ``clock``, seconds) per window;
    a member that raises fails and is skipped from then on."""
    for m in members:
        m.windows.setdefault(phase, [])
    for w in range(windows):
        for i in window_order(len(members), first_window + w):
            m = members[i]
            if not m.ok:
                continue
            start = clock()
            seconds = m.guard(measure, m)
            if m.ok:
                m.windows[phase].append((start, seconds))
