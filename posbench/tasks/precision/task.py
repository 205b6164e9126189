"""The precision task's declaration: its settings, grid point, metrics and ``TASK``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from posbench.core.registry import register_task
from posbench.core.task import Metric, Task
from posbench.protocols.train_eval.evaluations import compare_values
from posbench.protocols.train_eval.settings import TRAINED_MODEL_METRICS
from posbench.protocols.train_eval.settings import Settings as TrainEvalSettings
from posbench.tasks.precision.report import DISTINCT, report_sections
from posbench.tasks.precision.run import run

# The report's precision section: the distinct-value table of the bias_counts study (report.py
# draws the staircase charts after it), then perplexity by bias dtype and its cost; training and
# model sizes go to the run-details appendix. The per-dtype and longest-length values the suite's
# progress lines print are columns of those tables (shown_in), not tables of one value each.
METRICS = {
    DISTINCT: Metric(
        title="Distinct bias values in the last window",
        unit="",
        doc="last_window_distinct@<dtype>: median over heads of distinct bias values in the last window of "
        "positions after the cast",
        higher_is_better=True,
        fmt="int",
        table=True,
        axis="dtype",
    ),
    "last_window_distinct@float16": Metric(
        title="Distinct float16 bias values, last window",
        unit="values",
        doc="median over heads of distinct float16 bias values in the last window",
        higher_is_better=True,
        fmt="int",
        shown_in=DISTINCT,
    ),
    "last_window_distinct@bfloat16": Metric(
        title="Distinct bfloat16 bias values, last window",
        unit="values",
        doc="the same for bfloat16",
        higher_is_better=True,
        fmt="int",
        shown_in=DISTINCT,
    ),
    "last_window_distinct@float32": Metric(
        title="Distinct float32 bias values, last window",
        unit="values",
        doc="the same for float32 (every position distinct)",
        higher_is_better=True,
        fmt="int",
        shown_in=DISTINCT,
    ),
    "ppl@*": Metric(
        title="Perplexity by bias dtype",
        unit="perplexity",
        doc="ppl@<float32|compute>_bias@<L_valid>: perplexity "
        "in eval_dtype with the bias kept in float32 or cast to the compute dtype",
        higher_is_better=False,
        fmt="ppl",
        table=True,
        axis="L_valid",
    ),
    "ppl_diff@*": Metric(
        title="Perplexity cost of the compute-dtype bias",
        unit="perplexity",
        doc="ppl_diff@<L_valid>: compute-dtype bias minus float32 bias",
        higher_is_better=None,
        # four significant digits, not perplexity's two decimals: on a CPU the differences are
        # ~1e-4 and two decimals print a table of zeros that reads as a broken study
        fmt="plain",
        table=True,
        axis="L_valid",
        appendix=False,
    ),
    "ppl_diff_at_max_len": Metric(
        title="Perplexity cost of the compute-dtype bias",
        unit="perplexity",
        doc="perplexity with the bias in the compute dtype minus with a float32 bias, longest L_valid",
        higher_is_better=None,
        fmt="plain",
        shown_in="ppl_diff@*",
    ),
    "best_ppl_eval": Metric(
        title="Source perplexity on the evaluated tokens",
        unit="perplexity",
        doc="perplexity of the true source on the evaluated tokens (synthetic sources), else null",
        higher_is_better=None,
        fmt="ppl",
    ),
    # the training of the bias_dtype_ppl study, declared as every trained model's (train-then-evaluate)
    **{
        k: TRAINED_MODEL_METRICS[k]
        for k in ("best_ppl", "final_train_loss", "train_steps", "train_tokens", "train_seconds", "reused_checkpoint", "n_params")
    },
}


class Settings(TrainEvalSettings):
    eval_dtype: Literal["float32", "bfloat16", "float16"] = "bfloat16"
    analysis_heads: int = Field(32, ge=1, description="bias_counts: number of heads (BLOOM-7B: 32)")
    analysis_length: int = Field(8192, ge=1, description="bias_counts: positions")
    analysis_window: int = Field(1000, ge=1, description="bias_counts: positions per window")
    analysis_chart_heads: list[int] = Field([0, 15, 31], min_length=1)
    analysis_factor: float = Field(0.25, gt=0, description="interpolation factor applied to the bias")
    analysis_dtypes: list[str] = Field(["float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"])


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    study: Literal["bias_counts", "bias_dtype_ppl"]
    L_train: int = Field(64, ge=2)


TASK = register_task(
    Task(Settings, Params, METRICS, run, report_sections=report_sections, compare_values=compare_values, name="precision")
)
