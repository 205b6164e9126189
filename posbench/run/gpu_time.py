"""How long a suite's profile holds a GPU, estimated from its grid and budgets before it runs
(issue 69): the GPU workflow's matrix splits a suite too long for one job into shards
(``--shard i/n``, split as the runner splits them: ``posbench.run.units.shard_cases``), and a test
fails when a leg could exceed the job's limit.

Each case is estimated on its own and never beyond its ``timeout_s`` (the runner stops it there):

- a training case (one of the budgets ``steps``, ``tokens``, ``time_s``, ``flops``), per seed: a
  ``time_s`` budget as given plus its timed warm-up; the others as the model's training operations
  (``posbench.engine.flops``, without the position method's small share) at ``GPU_OPS_PER_S``;
  plus ``CASE_OVERHEAD_S`` (a worker's start, data, model, evaluation) per seed;
- a measuring case (one with no training budget: a speed or cost measurement): ``MEASURE_ROUND_S`` a round.

The constants are deliberately pessimistic for one data-centre GPU in bfloat16: an estimate that
is too long only makes more shards, one that is too short kills a job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from posbench.core.case import CaseSpec
from posbench.engine.budget import BUDGETS
from posbench.engine.flops import TRAIN_FACTOR, matmul_flops
from posbench.run.units import shard_cases

GPU_OPS_PER_S = 5e13  # sustained training operations a second: about a sixth of an A100's bf16 peak
CASE_OVERHEAD_S = 120.0  # a worker's start, the corpus, the model, the evaluation at every length
MEASURE_ROUND_S = 120.0  # one round of a measuring case: warm-up, windows, compiles
DEFAULT_LENGTH = 512  # a training case's sequence length when its grid names none


@dataclass(frozen=True)
class Estimate:
    """A suite profile's estimated GPU seconds, ``seconds[case id]`` for each of its ``cases``
    (suite order); ``timed``: its task's shards hold whole grid points."""

    suite: str
    cases: tuple[CaseSpec, ...]
    seconds: dict[str, float]
    timed: bool

    @property
    def total_s(self) -> float:
        return sum(self.seconds.values())

    def shard_s(self, i: int, n: int) -> float:
        """Seconds of ``--shard i/n`` (the cases the runner gives that shard)."""
        return sum(self.seconds[c.id] for c in shard_cases(list(self.cases), (i, n), self.timed))

    def shards_for(self, limit_s: float) -> int | None:
        """The fewest shards that each fit ``limit_s``; None when no split does (one case, or one
        grid point of a timed task, is longer)."""
        n = max(1, math.ceil(self.total_s / limit_s))
        while n <= max(1, len(self.cases)):
            if all(self.shard_s(i, n) <= limit_s for i in range(n)):
                return n
            n += 1
        return None


def _seed_count(settings: dict) -> int:
    seeds = settings.get("seeds")
    return len(seeds) if isinstance(seeds, list) and seeds else 1


def _training_ops(kind: str, value: float, settings: dict, length: int) -> float:
    """Training operations of one seed's budget (``kind`` not ``time_s``)."""
    if kind == "flops":
        return value
    from posbench.core.config import model_config

    cfg = model_config(settings.get("model") or "tiny", **(settings.get("model_overrides") or {}))
    per_sequence = TRAIN_FACTOR * matmul_flops(cfg, length)
    if kind == "steps":
        return value * (settings.get("batch_size") or 1) * per_sequence
    return value / length * per_sequence  # tokens


def case_seconds(case: CaseSpec) -> float:
    """The estimated GPU seconds of ``case``, at most its ``timeout_s``."""
    settings = case.settings
    budgets = [(k, settings[k]) for k in BUDGETS if settings.get(k) is not None]
    if not budgets:
        seconds = MEASURE_ROUND_S * (settings.get("rounds") or 1)
    else:
        kind, value = budgets[0]
        length = int(case.params.get("L_train") or case.params.get("seq_len") or DEFAULT_LENGTH)
        if kind == "time_s":
            train = value + (settings.get("budget_warmup_s") or 0.0)
        else:
            train = _training_ops(kind, value, settings, length) / GPU_OPS_PER_S
        seconds = _seed_count(settings) * (train + CASE_OVERHEAD_S)
    timeout = settings.get("timeout_s")
    return min(seconds, timeout) if timeout else seconds


def estimate(suite) -> Estimate:
    """``suite``'s (a loaded ``Suite`` with its profile applied) estimated GPU seconds, per case."""
    cases = tuple(suite.cases("cuda"))
    return Estimate(suite.name, cases, {c.id: case_seconds(c) for c in cases}, bool(suite.task.timed))
