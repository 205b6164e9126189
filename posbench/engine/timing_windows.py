"""Paired windows: several methods measured in one process, short window by short window.

One process holds every method's model of a grid point and alternates measured windows between
them in the order of a Williams design, so a method's window and the baseline's are about a second
apart and their ratio cancels slower drift (docs/measuring-speed.md). A method that raises is out
from then on, with its own failure result; the others go on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


def window_order(n: int, index: int) -> list[int]:
    """Row ``index`` of a Williams design for ``n`` methods (the order of window ``index``): over a
    cycle (n rows, 2n for odd n) every method holds every position, and follows every other, equally often."""
    # Row 0 is 0, 1, n-1, 2, n-2, ...; row i adds i (mod n); odd n appends the reversed rows.
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
    failure: dict | None = None
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


def alternate(
    members: list[Member],
    phase: str,
    windows: int,
    measure: Callable[[Member], float],
    first_window: int = 0,
    clock: Callable[[], float] = time.time,
) -> None:
    """``windows`` windows of every member, interleaved in ``window_order``; ``measure(member)``
    returns one window's seconds, appended with its start to ``member.windows[phase]``."""
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
