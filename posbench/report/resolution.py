"""The smallest memory difference a report or ``compare`` claims: the measurement's resolution.

Peak memory is one number per process, so a cell often has no interval. A re-run of identical
code still moves it: on a CPU (the cpu profile's tiny model, four processes a method) the peak
resident set of about 0.4 GiB moved by up to 5 MiB, and the peak above the resting footprint
(about 26 MiB) by up to 4.6 MiB, 18%; CUDA's allocator counts are nearly exact, moved only by
library workspaces. So two memory values are
told apart only when they differ by more than ``max(rel x the larger, floor)`` for the device
that measured them; within it tables claim no order and ``compare`` no change.
docs/reports.md (memory resolution).
"""

from __future__ import annotations

MIB = float(1 << 20)

# device type -> (relative, absolute bytes): the difference under which memory values are one
RESOLUTION = {
    "cpu": (0.05, 8 * MIB),  # the resident set: allocator arenas, thread stacks, library pages
    "cuda": (0.01, 1 * MIB),  # the caching allocator's own bytes: cuBLAS/cuDNN workspaces vary
}
UNKNOWN = RESOLUTION["cpu"]  # a device not named above: the coarser rule


def of_device(device) -> tuple[float, float]:
    """(relative, bytes) for a row's ``device`` (``cpu``, ``cuda:0``, None: the coarser rule)."""
    kind = str(device or "").split(":")[0]
    return RESOLUTION.get(kind, UNKNOWN)


def described(device) -> str:
    """The rule in words: ``max(5%, 8 MiB)``."""
    rel, floor = of_device(device)
    return f"max({rel:.0%}, {floor / MIB:.0f} MiB)"


def smallest(a: float, b: float, device) -> float:
    """The smallest difference in bytes told apart between ``a`` and ``b`` measured on ``device``."""
    rel, floor = of_device(device)
    return max(rel * max(abs(a), abs(b)), floor)


def separable(a: float, b: float, device) -> bool:
    """Whether memory values ``a`` and ``b`` differ by more than the resolution."""
    return abs(a - b) > smallest(a, b, device)


def band(value: float, device) -> tuple[float, float]:
    """``value`` ± half its resolution: two values' bands are disjoint about where ``separable``
    says they differ, so the summary's overlap rule (``posbench.report.headline.verdict``) reads them."""
    half = smallest(value, value, device) / 2
    return value - half, value + half
