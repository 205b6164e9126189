"""The efficiency task's declaration: its settings, grid point, metrics and ``TASK``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from posbench.core.registry import register_task
from posbench.core.task import Metric, ModelSettings, Task
from posbench.tasks.efficiency.report import REPORT_COLUMN, REPORT_ORDER, report_sections, summary_tables
from posbench.tasks.efficiency.run import run, run_group

METRICS = {
    "train_wps": Metric(
        title="Training speed",
        unit="words/s",
        doc="tokens/s, median over windows of full optimizer steps",
        higher_is_better=True,
        fmt="count",
        table=True,
    ),
    "train_wps_min": Metric(
        title="Training speed, slowest window",
        unit="words/s",
        doc="tokens/s, slowest training window",
        higher_is_better=None,
        fmt="count",
    ),
    "train_wps_max": Metric(
        title="Training speed, fastest window",
        unit="words/s",
        doc="tokens/s, fastest training window",
        higher_is_better=None,
        fmt="count",
    ),
    "eval_wps": Metric(
        title="Evaluation speed",
        unit="words/s",
        doc="tokens/s, median over windows of no-grad forwards",
        higher_is_better=True,
        fmt="count",
        table=True,
    ),
    "eval_wps_min": Metric(
        title="Evaluation speed, slowest window",
        unit="words/s",
        doc="tokens/s, slowest evaluation window",
        higher_is_better=None,
        fmt="count",
    ),
    "eval_wps_max": Metric(
        title="Evaluation speed, fastest window",
        unit="words/s",
        doc="tokens/s, fastest evaluation window",
        higher_is_better=None,
        fmt="count",
    ),
    "peak_mem_train_bytes": Metric(
        title="Peak training memory",
        unit="bytes",
        doc="CUDA max_memory_allocated, CPU peak resident set, training phase",
        higher_is_better=False,
        fmt="bytes",
        table=True,
    ),
    "peak_mem_train_above_base_bytes": Metric(
        title="Peak training memory above the resting footprint",
        unit="bytes",
        doc="peak_mem_train_bytes less mem_base_bytes (the model and data built, before the first step): "
        "what the steps themselves held (a table of its own where rows carry it: report.ABOVE_BASE)",
        higher_is_better=False,
        fmt="bytes",
    ),
    "peak_mem_eval_above_base_bytes": Metric(
        title="Peak evaluation memory above the resting footprint",
        unit="bytes",
        doc="peak_mem_eval_bytes less mem_base_bytes",
        higher_is_better=False,
        fmt="bytes",
    ),
    "train_mfu": Metric(
        title="Model FLOPs utilisation, training",
        unit="",
        doc="train_wps per device x train_flops_per_token / the device's dense peak at the run's dtype "
        "(posbench.engine.peaks); null where the peak is unknown (every CPU)",
        higher_is_better=True,
    ),
    "train_flops_per_token": Metric(
        title="Training FLOPs per token",
        unit="FLOP",
        doc="counted operations of training one token, forward and backward (posbench.engine.flops)",
        fmt="count",
    ),
    "peak_mem_train_reserved_bytes": Metric(
        title="Peak training memory reserved",
        unit="bytes",
        doc="CUDA max_memory_reserved in training (null on CPU)",
        higher_is_better=False,
        fmt="bytes",
    ),
    "peak_mem_eval_bytes": Metric(
        title="Peak evaluation memory",
        unit="bytes",
        doc="as peak_mem_train_bytes, evaluation phase",
        higher_is_better=False,
        fmt="bytes",
        table=True,
    ),
    "peak_mem_eval_reserved_bytes": Metric(
        title="Peak evaluation memory reserved",
        unit="bytes",
        doc="CUDA max_memory_reserved in evaluation (null on CPU)",
        higher_is_better=False,
        fmt="bytes",
    ),
    "energy_j": Metric(
        title="Training energy",
        unit="J",
        doc="joules drawn by the GPU over the measured training windows (NVML; null without)",
        higher_is_better=False,
    ),
    "j_per_token": Metric(
        title="Training energy per token",
        unit="J/token",
        doc="joules per trained token (energy_j / tokens in the measured windows)",
        higher_is_better=False,
    ),
    "eval_energy_j": Metric(
        title="Evaluation energy",
        unit="J",
        doc="joules over the measured evaluation windows (NVML; null without)",
        higher_is_better=False,
    ),
    "eval_j_per_token": Metric(
        title="Evaluation energy per token", unit="J/token", doc="joules per evaluated token", higher_is_better=False
    ),
    "train_loss": Metric(
        title="Training loss", unit="nats/token", doc="mean loss of the last training window (random tokens: about ln(vocab))"
    ),
    "mem_base_bytes": Metric(
        title="Base memory",
        unit="bytes",
        doc="in use before both phases: model and data (CPU: also the Python and torch runtime)",
        higher_is_better=None,
        fmt="bytes",
    ),
    "peak_mem_train_bytes_mean": Metric(
        title="Peak training memory, mean over ranks",
        unit="bytes",
        doc="peak_mem_train_bytes averaged over ranks (= it in one process)",
        higher_is_better=None,
        fmt="bytes",
    ),
    "peak_mem_eval_bytes_mean": Metric(
        title="Peak evaluation memory, mean over ranks",
        unit="bytes",
        doc="peak_mem_eval_bytes averaged over ranks",
        higher_is_better=None,
        fmt="bytes",
    ),
    "world_size": Metric(
        title="Ranks",
        unit="",
        doc="data-parallel ranks; words/s and energy are totals over them",
        higher_is_better=None,
        fmt="int",
    ),
    "n_params": Metric(title="Parameters", unit="", doc="parameters of the model", higher_is_better=None, fmt="count"),
    "batch_size": Metric(
        title="Batch size",
        unit="sequences",
        doc="sequences per step: tokens_per_step // seq_len",
        higher_is_better=None,
        fmt="int",
    ),
    "tokens_per_step": Metric(
        title="Tokens per step",
        unit="tokens",
        doc="tokens per step actually used: batch_size * seq_len",
        higher_is_better=None,
        fmt="int",
    ),
    "threads": Metric(title="Threads", unit="", doc="torch CPU threads in the worker", higher_is_better=None, fmt="int"),
    "eval_compile_s": Metric(
        title="Compile time, evaluation",
        unit="s",
        doc="compile: true: first forwards, compiling, timed apart",
        higher_is_better=None,
    ),
    "train_compile_s": Metric(
        title="Compile time, training", unit="s", doc="compile: true: first training steps, compiling", higher_is_better=None
    ),
    "n_rounds": Metric(
        title="Rounds",
        unit="",
        doc="rounds that finished ok; every other metric is the median over them (series <metric>_by_round: each round's value)",
        higher_is_better=None,
        fmt="int",
    ),
}


class Settings(ModelSettings):
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    tokens_per_step: int = Field(ge=1, description="tokens per optimizer step; batch = tokens_per_step // seq_len")
    warmup_steps: int = Field(2, ge=0, description="steps (and forwards) run before timing, per phase")
    measure_steps: int = Field(5, ge=1, description="steps per measured window")
    eval_measure_steps: int | None = Field(
        None,
        ge=1,
        description="forwards per measured evaluation window; default: measure_steps (a forward costs "
        "about a third of a training step, so equal windows in time take about 3x more)",
    )
    windows: int = Field(3, ge=1, description="measured windows per phase; median, min, max are reported")
    lr: float = Field(1e-4, gt=0, description="AdamW learning rate")
    power_interval_s: float = Field(
        0.1,
        gt=0,
        description="NVML power sampling period (s), where the GPU has no "
        "energy counter (info.energy_source: nvml-power-sampling)",
    )
    rounds: int = Field(
        1,
        ge=1,
        description="interleaved rounds: every method of a grid point is measured once per "
        "round, round-robin, each round in a fresh process; ratios to the baseline are paired "
        "by round (median and bootstrap 95% interval)",
    )
    compile: bool = Field(
        False,
        description="run the model through torch.compile (inductor); each phase's first step (compilation) "
        "is timed apart (eval_compile_s, train_compile_s) and never enters warm-up or windows; a method the compiler "
        "fails on gets an unavailable row with the compiler's reason",
    )
    pairing: Literal["rounds", "windows"] = Field(
        "rounds",
        description="rounds: each method alone in its process per round, ratios paired by round; "
        "windows: every method of a grid point in one process per round, alternating measured windows, ratios "
        "paired window by window (peak memory from a short process per method)",
    )

    @model_validator(mode="after")
    def _windows_in_one_process(self):
        if self.pairing == "windows" and self.nproc > 1:
            raise ValueError(
                "pairing: windows measures every method of a grid point in one process; allowed: nproc 1, or pairing: rounds"
            )
        return self

    @property
    def eval_steps(self) -> int:
        return self.eval_measure_steps or self.measure_steps


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    seq_len: int = Field(ge=1, description="input length L of training and evaluation")


TASK = register_task(
    Task(
        Settings,
        Params,
        METRICS,
        run,
        run_group=run_group,
        REPORT_ORDER=REPORT_ORDER,
        REPORT_COLUMN=REPORT_COLUMN,
        report_sections=report_sections,
        summary_tables=summary_tables,
        name="efficiency",
    )
)
