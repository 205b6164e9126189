"""The lengthgen task's declaration: its settings, grid point, metrics and ``TASK``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from posbench.core.registry import register_task
from posbench.core.task import Metric, Task
from posbench.protocols.training import BUDGET_METRICS, BudgetSettings, EvalDtype, Precision
from posbench.tasks.lengthgen.report import TITLE, report_sections, summary_tables
from posbench.tasks.lengthgen.run import run

METRICS = {
    "acc_at_train_len": Metric(
        title="Accuracy at L_train",
        unit="fraction",
        doc="fraction of answers exactly right at n = L_train",
        higher_is_better=True,
        fmt="plain",
        table=True,
    ),
    "acc_beyond": Metric(
        title="Accuracy beyond L_train",
        unit="fraction",
        doc="answers exactly right, pooled over every test length "
        "n > L_train (the papers' average over unseen lengths); compare only rows that learnt",
        higher_is_better=True,
        fmt="plain",
        table=True,
    ),
    "token_acc_beyond": Metric(
        title="Per-token accuracy beyond L_train",
        unit="fraction",
        doc="answer tokens right (argmax given the true prefix), pooled over every n > L_train: Ruoss et al.'s measure",
        higher_is_better=True,
        fmt="plain",
    ),
    "acc_at_max_len": Metric(
        title="Accuracy at the longest n",
        unit="fraction",
        doc="accuracy at the longest test length",
        higher_is_better=True,
        fmt="plain",
    ),
    "learned": Metric(
        title="Learnt at L_train",
        unit="",
        doc="1 when accuracy at L_train >= learned_threshold, else 0",
        higher_is_better=None,
        fmt="int",
        appendix=False,
    ),
    "acc@*": Metric(
        title="Accuracy", unit="fraction", doc="acc@<n>: fraction of answers exactly right at length n", higher_is_better=True
    ),
    "acc_lo@*": Metric(title="Accuracy, Wilson 95% lower bound", unit="fraction", doc="acc_lo@<n>", higher_is_better=None),
    "acc_hi@*": Metric(title="Accuracy, Wilson 95% upper bound", unit="fraction", doc="acc_hi@<n>", higher_is_better=None),
    "chance_at_train_len": Metric(
        title="Chance accuracy at L_train",
        unit="fraction",
        doc="exact match of uniform guessing at n = L_train",
        higher_is_better=None,
    ),
    "final_train_loss": Metric(title="Final training loss", unit="nats/token", doc="answer-token loss at the last step"),
    "train_steps": Metric(title="Training steps", unit="steps", doc="optimizer steps", higher_is_better=None, fmt="int"),
    "train_examples": Metric(title="Training examples", unit="", doc="examples trained on", higher_is_better=None, fmt="count"),
    "train_seconds": Metric(title="Training time", unit="s", doc="wall-clock training time (s)"),
    "n_params": Metric(title="Parameters", unit="", doc="parameters of the model", higher_is_better=None, fmt="count"),
    "n_seeds": Metric(
        title="Seeds",
        unit="",
        doc="seeds trained (with `seeds`): every metric m is their mean, m_std the spread, "
        "m_seed_lo/m_seed_hi its 95% t interval over seeds",
        higher_is_better=None,
        fmt="int",
    ),
    "seeds_learnt": Metric(
        title="Seeds learnt",
        unit="",
        doc="with `seeds`: how many seeds learnt the task at L_train (learned is 1 only when all did)",
        higher_is_better=None,
        fmt="int",
        appendix=False,
    ),
    **BUDGET_METRICS,
}

# The generators' names (posbench.data.algorithmic.TASKS, checked equal in tests/tasks/test_lengthgen_run.py),
# written out: that module imports numpy, and `bench.py validate/list/--help` read Settings without it.
TASK_NAMES = ("reverse", "duplicate", "parity", "modular_arithmetic", "missing_duplicate", "copy", "addition", "sort")
TaskName = Literal[TASK_NAMES]  # type: ignore[valid-type]


class Settings(BudgetSettings):
    # The budget (steps, tokens, time_s or flops: BudgetSettings); tokens and flops count every
    # row at the longest training row's length, L_train's (rows of one batch share a length).
    batch_size: int = Field(64, ge=1)
    lr: float = Field(1e-3, gt=0)
    warmup_steps: int = Field(50, ge=0)
    precision: Precision = "auto"
    eval_dtype: EvalDtype = "float32"
    test_factors: list[float] = Field(
        [0.5, 1.0, 2.0, 4.0], min_length=1, description="test lengths n = round(factor * L_train); 1 must be among them"
    )
    eval_samples: int = Field(200, ge=1, description="examples scored per test length")
    eval_batch_size: int = Field(100, ge=1)
    learned_threshold: float = Field(
        0.9, ge=0.0, le=1.0, description="accuracy at L_train a method needs to count as having learnt"
    )

    @model_validator(mode="after")
    def _check(self):
        if any(f <= 0 for f in self.test_factors):
            raise ValueError(f"test_factors must be > 0, got {self.test_factors}")
        if 1.0 not in self.test_factors:
            raise ValueError(f"test_factors must include 1 (the learn-first check at L_train), got {self.test_factors}")
        return self

    def test_lengths(self, L: int) -> list[int]:
        """The test lengths at L_train = L, ascending, each at least 1."""
        return sorted({max(1, round(f * L)) for f in self.test_factors})


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    L_train: int = Field(ge=1, description="longest training length (lengths 1..L_train are trained)")
    task: TaskName = Field(description="algorithmic task (posbench.data.algorithmic)")


TASK = register_task(
    Task(
        Settings=Settings,
        Params=Params,
        METRICS=METRICS,
        run=run,
        TITLE=TITLE,
        report_sections=report_sections,
        summary_tables=summary_tables,
        name="lengthgen",
    )
)
