"""What the tasks that train a model on a corpus share: ``TrainSettings`` (the model, the corpus,
the budget and the optimizer) with its ``TrainConfig``, ``BudgetSettings`` (the budget alone, with
``budget_metrics``, what a row records of it), and ``open_corpus``. Imports no torch:
validating a suite reads these settings. The trained model itself: ``posbench.engine.train.trained_model``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from posbench.core.task import Metric, ModelSettings
from posbench.data import synthetic_options

Precision = Literal["auto", "float32", "bfloat16", "float16"]
EvalDtype = Literal["float32", "bfloat16", "float16"]


class CorpusSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    kind: Literal["synthetic", "synthetic-copy", "wikitext", "wikitext-103", "wikitext-2", "text"] = "synthetic"
    path: str | None = Field(None, description="data folder or file; default $POSBENCH_DATA_DIR (--data sets it)")
    level: Literal["word", "byte"] | None = Field(
        None,
        description="text: word or byte (default byte); WikiText is word level only (for WikiText bytes use "
        "kind: text with the folder's files)",
    )
    splits: dict[str, str] | None = Field(None, description="corpus split -> file split, e.g. {train: test}")
    size: int | None = Field(None, ge=1, description="cap on tokens per split (synthetic: training tokens)")
    seed: int = 0
    synthetic: dict[str, int | float | str] = Field(
        default_factory=dict,
        description="synthetic: vocab, order, branching, jump; synthetic-copy: vocab, "
        "branching, jump, copy_prob, max_distance, decay, distance (decay or log-uniform)",
    )

    @field_validator("synthetic")
    @classmethod
    def _synthetic_options(cls, options: dict, info: ValidationInfo) -> dict:
        # Said before anything runs: the corpus of every case would refuse them (an error row each).
        kind = info.data.get("kind")
        if kind in ("synthetic", "synthetic-copy"):
            synthetic_options.check(kind, options)
        return options

    @model_validator(mode="after")
    def _word_level_wikitext(self):
        # Said before anything runs, instead of training a word-level model under "byte".
        if self.kind.startswith("wikitext") and self.level == "byte":
            raise ValueError(
                f"corpus: kind {self.kind} is word level only; for bytes use kind: text, "
                "path: <folder>, level: byte, splits: {train: test.txt, valid: valid.txt}"
            )
        return self


def open_corpus(c: CorpusSettings):
    """The corpus the settings name. WikiText-2 as shipped has no training file: its test split
    trains (as the data README suggests), and the row says so through ``corpus``."""
    from posbench.data.corpus import DataError, load_corpus

    splits = c.splits
    if c.kind.startswith("wikitext") and splits is None:
        try:
            return load_corpus(c.kind, path=c.path, seed=c.seed, size=c.size)
        except DataError as exc:
            if "train" not in str(exc):
                raise
            splits = {"train": "test", "valid": "valid"}
    options = dict(c.synthetic) if c.kind in ("synthetic", "synthetic-copy") else {}
    level = c.level or ("word" if c.kind.startswith("wikitext") else "byte")
    return load_corpus(c.kind, path=c.path, level=level, seed=c.seed, splits=splits, size=c.size, **options)


BUDGETS = ("steps", "tokens", "time_s", "flops")  # posbench.engine.budget.BUDGETS (no torch here)
DEFAULT_WARMUP_S = 2.0  # posbench.engine.budget.DEFAULT_WARMUP_S

BUDGET_METRICS = {
    "budget_steps": Metric(title="Budget, steps", unit="steps", doc="the steps budget given", higher_is_better=None, fmt="int"),
    "budget_tokens": Metric(
        title="Budget, tokens", unit="tokens", doc="the tokens budget given", higher_is_better=None, fmt="count"
    ),
    "budget_time_s": Metric(
        title="Budget, training time",
        unit="s",
        doc="the time budget given: each method trains until it is spent on the clock",
        higher_is_better=None,
    ),
    "budget_flops": Metric(
        title="Budget, operations",
        unit="FLOP",
        doc="the flops budget given (posbench.engine.flops)",
        higher_is_better=None,
        fmt="count",
    ),
    "budget_step_seconds": Metric(
        title="Warm-up seconds per step",
        unit="s",
        doc="time budget: the mean step time its warm-up measured, which set the steps",
        higher_is_better=None,
    ),
    "budget_warmup_seconds": Metric(
        title="Warm-up time",
        unit="s",
        doc="time budget: seconds the warm-up took (not part of the budget)",
        higher_is_better=None,
    ),
    "budget_planned_steps": Metric(
        title="Warm-up's planned steps",
        unit="steps",
        doc="time budget: the steps the warm-up planned; the clock decides the steps reached (train_steps)",
        higher_is_better=None,
        fmt="int",
    ),
    "budget_seconds": Metric(
        title="Budget time spent",
        unit="s",
        doc="time budget: training seconds spent from the budget, measured "
        "on the clock (held-out checks excluded); within one step of budget_time_s",
        higher_is_better=None,
    ),
    "train_flops": Metric(
        title="Training operations",
        unit="FLOP",
        doc="counted operations of the steps trained (posbench.engine.flops)",
        higher_is_better=None,
        fmt="count",
    ),
}


def budget_metrics(result) -> dict:
    """What a row records of the budget of a ``posbench.engine.train.TrainResult``: the budget
    given (``budget_<kind>``), the counted operations of the steps done, and for a time budget the
    warm-up's step time, duration and plan, and the seconds spent from the budget. The steps reached and the measured time are the task's
    ``train_steps`` and ``train_seconds``."""
    b = result.budget or {}
    out = {"train_flops": result.flops}
    if b.get("kind"):
        out[f"budget_{b['kind']}"] = b["value"]
    if b.get("kind") == "time_s":
        out.update(
            budget_step_seconds=b.get("step_seconds"),
            budget_warmup_seconds=b.get("warmup_seconds"),
            budget_planned_steps=b.get("steps"),
            budget_seconds=getattr(result, "budget_seconds", None),
        )
    return out


class BudgetSettings(ModelSettings):
    """The training budget, exactly one of ``BUDGETS`` (docs/tasks/budgets.md), and the seeds."""

    steps: int | None = Field(None, ge=1, description="training budget in optimizer steps ...")
    tokens: int | None = Field(None, ge=1, description="... or in tokens (steps = tokens // (batch_size * L_train))")
    time_s: float | None = Field(
        None,
        gt=0,
        description="... or in measured training seconds on this device: "
        "each method trains until they are spent (planned from a short warm-up)",
    )
    flops: float | None = Field(
        None,
        gt=0,
        description="... or in counted training operations "
        "(posbench.engine.flops: the model's matmuls plus the method's position work)",
    )
    budget_warmup_s: float = Field(
        DEFAULT_WARMUP_S,
        gt=0,
        description="time_s: seconds of timed warm-up steps the step count is decided from (not part of the budget)",
    )
    seeds: list[Annotated[int, Field(ge=0, le=2**32 - 1)]] | None = Field(  # numpy's generators take 0..2^32-1
        None,
        min_length=1,
        description="train and evaluate one model per seed (weights and batch order); metrics "
        "are the mean, with <metric>_std (sample std), <metric>_seed_lo/_seed_hi (95% t interval over seeds) and "
        "n_seeds; replaces `seed`",
    )

    @model_validator(mode="after")
    def _one_budget(self):
        given = [k for k in BUDGETS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one training budget: {', '.join(BUDGETS[:-1])} or {BUDGETS[-1]} "
                f"(given: {', '.join(given) or 'none'})"
            )
        if self.seeds is not None and len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct, got {self.seeds}")
        if self.time_s is not None and self.time_s <= self.budget_warmup_s:
            raise ValueError(
                f"time_s {self.time_s:g} is not above the warm-up it is decided from "
                f"(budget_warmup_s {self.budget_warmup_s:g}); give a longer time_s or a shorter warm-up"
            )
        return self

    def budget_config(self) -> dict:
        """The budget fields of ``posbench.engine.train.TrainConfig``."""
        return dict(
            steps=self.steps,
            tokens=self.tokens,
            time_s=self.time_s,
            flops=self.flops,
            warmup_s=self.budget_warmup_s if self.time_s is not None else None,
        )


class TrainSettings(BudgetSettings):
    """A model trained on a corpus: the budget and the optimizer's settings."""

    corpus: CorpusSettings = Field(default_factory=CorpusSettings)
    batch_size: int = Field(16, ge=1)
    lr: float = Field(1e-3, gt=0)
    warmup_steps: int = Field(50, ge=0)
    precision: Precision = "auto"
    eval_dtype: EvalDtype = "float32"

    def train_config(self, seq_len: int, seed: int):
        """The ``posbench.engine.train.TrainConfig`` of these settings at ``seq_len``."""
        from posbench.engine.train import TrainConfig

        return TrainConfig(
            seq_len=seq_len,
            batch_size=self.batch_size,
            lr=self.lr,
            warmup_steps=self.warmup_steps,
            precision=self.precision,
            seed=seed,
            **self.budget_config(),
        )
