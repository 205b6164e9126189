"""Learn first, then compare: a method below the suite's ``learned_threshold`` at L_train never learnt
the task, so its numbers beyond L_train say nothing about length (tables show ``NOT_LEARNT``); a run
where fewer than two methods learnt is a ``BROKEN`` profile. A language model's verdict comes from
its perplexity at L_train against its peers' and the source's bound (``ppl_verdicts``). Task-neutral:
it names no task, only the metrics a row holds."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

NOT_LEARNT = "not learnt at L_train"
BROKEN = "BROKEN PROFILE"
NOTHING_LEARNT = f" — {BROKEN}: 0 of "  # in the title of a table where no row learnt (``title_suffix``)

# Learn first for perplexity: at L_train a model more than PPL_PEER_FACTOR times the best model's
# perplexity there (its peers, trained alike), or more than PPL_BOUND_FACTOR times the source's own
# perplexity (the bound no model beats), is undertrained; its perplexity beyond L_train measures
# the training budget, not the position method. Issue 66's 120-step run: sinusoidal 23.1, alibi
# 14.1 against a bound of 7.65, so sinusoidal is out (23.1 > 1.5 x 14.1) and alibi stays (14.1 < 2 x 7.65).
PPL_PEER_FACTOR = 1.5
PPL_BOUND_FACTOR = 2.0
PPL_RULE = (
    f"perplexity at L_train at most {PPL_PEER_FACTOR:g}x the best method's there and at most "
    f"{PPL_BOUND_FACTOR:g}x the source's bound"
)


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
    rule: str | None = None  # the rule in words where it is not "measure >= threshold" (``PPL_RULE``)

    @property
    def total(self) -> int:
        return len(self.learnt) + len(self.not_learnt) + len(self.unknown)

    @property
    def broken(self) -> bool:
        """Nothing to compare: fewer than two rows learnt (one row: it did not learn)."""
        return len(self.learnt) < min(2, self.total)

    def note(self) -> str:
        """One sentence for a caption: how many were comparable, which were not."""
        rule = self.rule or f"{self.measure} >= {self.threshold:.0%}"
        text = f"{len(self.learnt)} of {self.total} learnt the task at L_train ({rule}) and are compared beyond it"
        if self.not_learnt:
            text += f"; {NOT_LEARNT}: {', '.join(self.not_learnt)}"
        if self.unknown:
            text += f"; no {self.measure} at L_train: {', '.join(self.unknown)}"
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
    rule: str | None = None,
) -> Comparability:
    """Group labels by their ``learned`` verdict, in the mapping's order; ``seeds``: label -> (seeds
    learnt, seeds) of the labels trained with several seeds (their verdict: ``learned_over_seeds``);
    ``measure``: what ``threshold`` bounds, as the note names it; ``rule``: the rule in words where
    it is not a threshold (``PPL_RULE``)."""
    out = Comparability(threshold, seeds=dict(seeds or {}), measure=measure, rule=rule)
    for label, verdict in verdicts.items():
        {True: out.learnt, False: out.not_learnt, None: out.unknown}[verdict].append(label)
    return out


def _finite(value) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    return float(value) if ok else None


def ppl_bound(metrics: Mapping) -> float | None:
    """The source's perplexity a row's L_train perplexity is read against: on the evaluated tokens
    (``best_ppl_eval``), else the corpus's long-run bound (``best_ppl``); None on a corpus with
    none (WikiText), where the peers alone decide."""
    return _finite(metrics.get("best_ppl_eval")) or _finite(metrics.get("best_ppl"))


def ppl_learned(ppl: float | None, best: float | None, bound: float | None) -> bool | None:
    """Whether a language model learnt at L_train (``PPL_RULE``): its perplexity there ``ppl`` is
    at most ``PPL_PEER_FACTOR`` x the best of its peers' (``best``, its own included) and at most
    ``PPL_BOUND_FACTOR`` x the source's ``bound`` (None: that side is not checked). None when it
    has no finite perplexity at L_train: unknown, not a verdict."""
    ppl = _finite(ppl)
    if ppl is None:
        return None
    if best is not None and ppl > PPL_PEER_FACTOR * best:
        return False
    return not (bound is not None and ppl > PPL_BOUND_FACTOR * bound)


def ppl_verdicts(peers: Mapping[str, Mapping]) -> dict[str, bool | None]:
    """label -> ``ppl_learned`` of each row of one comparison (one grid point of one run, or one
    table), from each row's metrics (``ppl_at_train_len``, and ``ppl_bound``'s). A row with no
    perplexity at L_train is unknown (None) and sets no peer's bar."""
    at_train = {label: _finite(m.get("ppl_at_train_len")) for label, m in peers.items()}
    known = [v for v in at_train.values() if v is not None]
    best = min(known) if known else None
    return {label: ppl_learned(at_train[label], best, ppl_bound(m)) for label, m in peers.items()}


def not_learnt_rows(rows: list[dict]) -> dict[tuple[str, str], str]:
    """(run folder, case id) -> a few words on the row, for each finished row (a report frame's
    record: ``source``, ``case_id``, ``params``, ``metrics``) with a perplexity at L_train that did
    not learn there (``ppl_verdicts``) against its peers: the rows of its run folder and grid point."""
    import json

    groups: dict[tuple, dict[tuple[str, str], dict]] = {}
    for r in rows:
        metrics = r.get("metrics")
        if r.get("status") == "ok" and isinstance(metrics, dict) and metrics.get("ppl_at_train_len") is not None:
            point = (r["source"], r.get("suite"), json.dumps(r.get("params"), sort_keys=True, default=str))
            groups.setdefault(point, {})[(r["source"], r["case_id"])] = r
    out = {}
    for members in groups.values():
        verdicts = ppl_verdicts({key: r["metrics"] for key, r in members.items()})
        best = min(float(r["metrics"]["ppl_at_train_len"]) for r in members.values())
        for key, verdict in verdicts.items():
            if verdict is False:
                r = members[key]
                bound = ppl_bound(r["metrics"])
                out[key] = (
                    f"{r['method']} at {r['params']} in {r['source']} has perplexity "
                    f"{float(r['metrics']['ppl_at_train_len']):.4g} at L_train (best {best:.4g}"
                    + (f", bound {bound:.4g}" if bound is not None else "")
                    + ")"
                )
    return out
