"""The unit of distribution: what one device runs whole when a sweep is spread out.

A shard, a pool slot and a Slurm array task each run whole units: for a timed task a grid point
with every method and round (its ratios divide speeds of one device), otherwise a case. ``key``
is readable (``seq_len=128``, a case id); ``name`` its file-safe form (``rows/<name>.jsonl``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from posbench.core.case import CaseSpec
from posbench.store.file_stems import file_stem


@dataclass
class Unit:
    """One unit: its key and the (case, round)s it runs, in schedule order."""

    key: str
    timed: bool
    todo: list[tuple[CaseSpec, int]] = field(default_factory=list)
    jobs: list[tuple[list[CaseSpec], int]] = field(default_factory=list)  # its worker processes (``schedule.jobs``)

    @property
    def name(self) -> str:
        """The key as a file name stem (a Slurm task's ``rows/<name>.jsonl``)."""
        return file_stem(self.key)


def point_key(case: CaseSpec) -> str:
    """``seq_len=128`` (``head_dim=64/seq_len=1024`` for several axes, in grid order)."""
    return "/".join(f"{k}={v}" for k, v in case.params.items()) or "point"


def unit_key(case: CaseSpec, timed: bool) -> str:
    """The key of the unit ``case`` belongs to."""
    return point_key(case) if timed else case.id


def split(todo: list[tuple[CaseSpec, int]], timed: bool) -> list[Unit]:
    """The (case, round)s of ``todo`` as units, each keeping the schedule's order within it."""
    units: dict[str, Unit] = {}
    for case, rnd in todo:
        key = unit_key(case, timed)
        units.setdefault(key, Unit(key, timed)).todo.append((case, rnd))
    return list(units.values())


def shard_cases(cases: list[CaseSpec], shard: tuple[int, int] | None, timed: bool) -> list[CaseSpec]:
    """Shard i of n of the suite's full case list: the cases of unit k when k % n == i (units in
    suite order), so every shard holds whole grid points of a timed task and the split is the
    same on every machine."""
    if shard is None:
        return cases
    i, n = shard
    keys = list(dict.fromkeys(unit_key(c, timed) for c in cases))
    kept = {k for j, k in enumerate(keys) if j % n == i}
    return [c for c in cases if unit_key(c, timed) in kept]
