"""Learn first, then compare: a method below the suite's ``learned_threshold`` at L_train never learnt
the task, so its numbers beyond L_train say nothing about length (tables show ``NOT_LEARNT``); a run
where fewer than two methods learnt is a ``BROKEN`` profile. Task-neutral: it names no task."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

NOT_LEARNT = "not learnt at L_train"
BROKEN = "BROKEN PROFILE"


def learned(accuracy: float | None, threshold: float) -> bool | None:
    """Whether a model learnt the task: its accuracy at L_train is >= ``threshold``. None when
    there is no accuracy (the L_train evaluation failed or did not run): unknown, not a verdict."""
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"learned_threshold must lie in [0, 1], got {threshold!r}")
    if accuracy is None or isinstance(accuracy, bool) or not isinstance(accuracy, (int, float)) or not math.isfinite(accuracy):
        return None
    return accuracy >= threshold


def learned_over_seeds(verdicts: list[bool | None]) -> bool | None:
    """Learn first, per seed: a method learnt when every seed's model did; not when any seed's did
    not; unknown (None) when none failed but one has no accuracy at L_train."""
    if any(v is False for v in verdicts):
        return False
    if not verdicts or any(v is None for v in verdicts):
        return None
    return True


def length_text(is_learned: bool | None, effective_length: int | None) -> str:
    """The text of an effective-length cell: the length when the task was learnt, ``NOT_LEARNT``
    when it was not, ``-`` when unknown."""
    if is_learned is False:
        return NOT_LEARNT
    if is_learned is None or effective_length is None:
        return "-"
    return str(effective_length)


def comparable_length(is_learned: bool | None, effective_length: int | None) -> int | None:
    """The effective length a row may report: None unless the task was learnt at L_train."""
    return effective_length if is_learned else None


@dataclass
class Comparability:
    """Which methods (or any row labels) of one table learnt the task, and what that allows."""

    threshold: float
    learnt: list[str] = field(default_factory=list)
    not_learnt: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # no accuracy at L_train
    seeds: dict[str, tuple[int, int]] = field(default_factory=dict)  # label -> (seeds learnt, seeds), >= 2 seeds
    measure: str = "accuracy"  # what the threshold bounds, for the note

    @property
    def total(self) -> int:
        return len(self.learnt) + len(self.not_learnt) + len(self.unknown)

    @property
    def broken(self) -> bool:
        """Nothing to compare: fewer than two rows learnt (one row: it did not learn)."""
        return len(self.learnt) < min(2, self.total)

    def note(self) -> str:
        """One sentence for a caption: how many were comparable, which were not."""
        text = (
            f"{len(self.learnt)} of {self.total} learnt the task at L_train ({self.measure} >= {self.threshold:.0%}) "
            "and are compared beyond it"
        )
        if self.not_learnt:
            text += f"; {NOT_LEARNT}: {', '.join(self.not_learnt)}"
        if self.unknown:
            text += f"; no accuracy at L_train: {', '.join(self.unknown)}"
        if self.seeds:  # learn first applies per seed: a label counts as learnt when all its seeds did
            text += "; seeds learnt: " + ", ".join(f"{label} {k} of {n}" for label, (k, n) in self.seeds.items())
        text += "."
        if self.broken:
            text = f"{BROKEN}: {text} This profile compares nothing: fix its training before reading it."
        return text

    def title_suffix(self) -> str:
        """What a table title adds: nothing when two or more learnt, a loud mark when broken."""
        return f" — {BROKEN}: {len(self.learnt)} of {self.total} learnt the task at L_train" if self.broken else ""


def comparability(
    verdicts: Mapping[str, bool | None],
    threshold: float,
    seeds: Mapping[str, tuple[int, int]] | None = None,
    measure: str = "accuracy",
) -> Comparability:
    """Group labels by their ``learned`` verdict, in the mapping's order; ``seeds``: label -> (seeds
    learnt, seeds) of the labels trained with several seeds (their verdict: ``learned_over_seeds``);
    ``measure``: what ``threshold`` bounds, as the note names it."""
    out = Comparability(threshold, seeds=dict(seeds or {}), measure=measure)
    for label, verdict in verdicts.items():
        {True: out.learnt, False: out.not_learnt, None: out.unknown}[verdict].append(label)
    return out
