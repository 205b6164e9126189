"""Seeds as an axis of the training tasks: one model per seed of ``seeds``, and their results
combined into one row (``combine_metrics``): each metric the mean over seeds, with its sample std
and its 95% t interval over seeds (``posbench.report.stats.seed_interval``), each seed's value kept
in the series. docs/suites.md#budgets-and-seeds.
"""

from __future__ import annotations

from posbench.core.task import SEED_CI_SUFFIXES, SPREAD_SUFFIX
from posbench.report.learn_first import learned, learned_over_seeds
from posbench.report.stats import seed_interval


def seed_list(s) -> list[int]:
    """The seeds a case trains: ``seeds`` when given, else ``[seed]``."""
    return list(s.seeds) if getattr(s, "seeds", None) else [s.seed]


def checkpoint_name(name: str, seed: int, seeds: list[int]) -> str:
    """A checkpoint's name for one seed: a single seed keeps ``name`` (older run folders)."""
    return name if len(seeds) == 1 else f"{name}@seed{seed}"


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def combine_metrics(per_seed: list[dict], keep: tuple[str, ...] = ()) -> tuple[dict, dict]:
    """(metrics, series) of one row from each seed's metrics. Every key any seed has with a number
    becomes the mean over the seeds that have a finite one, with ``<m>_std`` (sample std, ddof 1),
    ``<m>_seed_lo``/``<m>_seed_hi`` (95% t interval; None for a single finite value) and
    ``series["<m>_by_seed"]`` (each seed's value, None where it has none); a key no seed has a
    number for is None. ``keep``: keys whose values are not averaged (left to the caller)."""
    metrics: dict = {"n_seeds": len(per_seed)}
    series: dict = {}
    keys = [k for m in per_seed for k in m]
    for key in dict.fromkeys(keys):
        if key in keep or key == "n_seeds":
            continue
        values = [m.get(key) for m in per_seed]
        if not any(is_number(v) for v in values):
            metrics[key] = None
            continue
        mean, std, n, lo, hi = seed_interval(values)
        if n == 0:
            metrics[key] = None
            continue
        metrics[key] = mean
        metrics[key + SPREAD_SUFFIX] = std
        metrics[key + SEED_CI_SUFFIXES[0]], metrics[key + SEED_CI_SUFFIXES[1]] = lo, hi
        series[f"{key}_by_seed"] = [float(v) if is_number(v) else None for v in values]
    return metrics, series


def combine_accuracy_seeds(per_seed: list[dict], pooled: dict, learned_threshold: float) -> tuple[dict, dict]:
    """(metrics, series) of an accuracy task's row from each seed's metrics and ``pooled``, its
    summary of every seed's cells together. One seed: its own. Several: ``combine_metrics`` (mean,
    std, 95% t interval over seeds), then the accuracies and their Wilson intervals over the samples
    of every seed pooled (``acc@``, ``acc_lo@``, ``acc_hi@``: each seed scores the same count, so the
    pooled accuracy is the mean over seeds); learn first per seed: ``seeds_learnt`` of ``n_seeds``,
    ``learned`` 1 only when every seed learnt (``learned_over_seeds``), an effective length only then."""
    if len(per_seed) == 1:
        return per_seed[0], {}
    metrics, series = combine_metrics(per_seed)
    verdicts = [learned(m.get("acc_at_train_len"), learned_threshold) for m in per_seed]
    metrics.update({k: v for k, v in pooled.items() if k.startswith(("acc@", "acc_lo@", "acc_hi@"))})
    metrics["seeds_learnt"] = sum(v is True for v in verdicts)
    overall = learned_over_seeds(verdicts)
    metrics["learned"] = None if overall is None else int(overall)
    if not overall and "effective_length" in metrics:
        metrics["effective_length"] = None
    return metrics, series
