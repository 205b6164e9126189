"""The extrapolation task's declaration: its settings, grid point, metrics and ``TASK``."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from posbench.core.registry import register_task
from posbench.core.task import Metric, Task
from posbench.tasks.attention_diagnostics import attention_declarations
from posbench.tasks.extrapolation.report import REPORT_ORDER, compare_values, report_sections, summary_tables
from posbench.tasks.extrapolation.run import run
from posbench.tasks.pretrained import PretrainedSettings
from posbench.tasks.training import BUDGET_METRICS, TrainSettings

METRICS = {
    "ppl_at_train_len": Metric(
        title="Perplexity at L_train",
        unit="perplexity",
        doc="perplexity at L_valid = L_train, non-overlapping",
        higher_is_better=False,
        fmt="ppl",
    ),
    "ppl_at_max_len": Metric(
        title="Perplexity at the longest L_valid",
        unit="perplexity",
        doc="perplexity at the longest L_valid, non-overlapping",
        higher_is_better=False,
        fmt="ppl",
    ),
    "ppl@*": Metric(
        title="Perplexity",
        unit="perplexity",
        doc="ppl@<mode>@<L_valid>[@interp]: perplexity of one evaluation",
        higher_is_better=False,
        fmt="ppl",
    ),
    "best_ppl": Metric(
        title="Best achievable perplexity",
        unit="perplexity",
        doc="best achievable perplexity of the corpus (synthetic sources, long run), else null",
        higher_is_better=None,
        fmt="ppl",
    ),
    "best_ppl_eval": Metric(
        title="Source perplexity on the evaluated tokens",
        unit="perplexity",
        doc="perplexity of the true source on the evaluated tokens (synthetic sources), "
        "else null; each cell of series.evals has its own, series.best_per_position_loss the curves",
        higher_is_better=None,
        fmt="ppl",
    ),
    "final_train_loss": Metric(title="Final training loss", unit="nats/token", doc="training loss at the last step (nats/token)"),
    "train_steps": Metric(title="Training steps", unit="steps", doc="optimizer steps", higher_is_better=None, fmt="int"),
    "train_tokens": Metric(title="Training tokens", unit="tokens", doc="tokens trained on", higher_is_better=None, fmt="count"),
    "train_seconds": Metric(title="Training time", unit="s", doc="wall-clock training time (s)"),
    "peak_mem_train_bytes": Metric(
        title="Peak training memory",
        unit="bytes",
        doc="CUDA max_memory_allocated during training, CPU peak "
        "resident set of the worker (since training began where /proc/self/clear_refs allows, "
        "else since the process began); none for a reused checkpoint",
        higher_is_better=None,
        fmt="bytes",
    ),
    "train_s_per_token": Metric(
        title="Training time per token",
        unit="s",
        doc="train_seconds / train_tokens: the frontier's cost; none for a reused checkpoint",
        higher_is_better=None,
    ),
    "reused_checkpoint": Metric(
        title="Reused checkpoint",
        unit="",
        doc="1 when the model came from the case's checkpoint",
        higher_is_better=None,
        fmt="int",
    ),
    "n_params": Metric(title="Parameters", unit="", doc="parameters of the model", higher_is_better=None, fmt="count"),
    "n_seeds": Metric(
        title="Seeds",
        unit="",
        doc="seeds averaged (with `seeds`): every metric m is their mean, m_std the spread, "
        "m_seed_lo/m_seed_hi its 95% t interval over seeds",
        higher_is_better=None,
        fmt="int",
    ),
    "ppl_far@*": Metric(
        title="Perplexity of copies from beyond L_train",
        unit="perplexity",
        doc="ppl_far@<L_valid> (by_distance): perplexity of the tokens copied from more than L_train back, "
        "inside the window; series.by_distance has every bucket",
        higher_is_better=False,
        fmt="ppl",
    ),
    "bound_far@*": Metric(
        title="Source perplexity of copies from beyond L_train",
        unit="perplexity",
        doc="bound_far@<L_valid>: the true source's perplexity on the tokens of ppl_far",
        higher_is_better=None,
        fmt="ppl",
        shown_in="ppl_far@*",
    ),
    "copy_gain_far@*": Metric(
        title="Copy gain beyond L_train",
        unit="",
        doc="copy_gain_far@<L_valid> (by_distance): the share of the source's advantage the model realises on "
        "copies from beyond L_train, against its own loss on copies it cannot see (0 ignores them, 1 the source)",
        higher_is_better=True,
        fmt="plain",
    ),
    "copy_gain_within": Metric(
        title="Copy gain within L_train",
        unit="",
        doc="by_distance: the copy gain on the copies within L_train at L_valid = L_train (the learn-first gate)",
        higher_is_better=True,
        fmt="plain",
    ),
    "copies_learnt": Metric(
        title="Learnt to copy",
        unit="",
        doc="by_distance: 1 when copy_gain_within reaches 0.5 (the loss-by-distance tables' learn-first gate)",
        higher_is_better=None,
        fmt="int",
    ),
    "passkey@*": Metric(
        title="Passkey accuracy",
        unit="",
        doc="passkey@<L_valid>[@interp]: share of text passkey probes answered exactly (pretrained checkpoints, --model hf:DIR)",
        higher_is_better=True,
        fmt="plain",
    ),
    "decode_tpot_ms@*": Metric(
        title="Decode time per token",
        unit="ms",
        doc="decode_tpot_ms@<L_valid>: one greedy decode step with a "
        "KV cache at context L_valid, batch 1, median over decode_repeats of each repeat's median "
        "(decode_tokens steps; the frontier's decode cost)",
        higher_is_better=False,
        fmt="ms",
    ),
    "decode_tpot_ms_min@*": Metric(
        title="Decode time per token, fastest repeat",
        unit="ms",
        doc="decode_tpot_ms_min@<L_valid>: the fastest repeat's median decode step",
        higher_is_better=None,
        fmt="ms",
    ),
    "decode_tpot_ms_max@*": Metric(
        title="Decode time per token, slowest repeat",
        unit="ms",
        doc="decode_tpot_ms_max@<L_valid>: the slowest repeat's median decode step",
        higher_is_better=None,
        fmt="ms",
    ),
    "decode_ttft_ms@*": Metric(
        title="Prefill time",
        unit="ms",
        doc="decode_ttft_ms@<L_valid>: prefill of a (1, L_valid) prompt, median over decode_repeats",
        higher_is_better=False,
        fmt="ms",
    ),
    **attention_declarations(Metric),
    **BUDGET_METRICS,
}


class Settings(TrainSettings, PretrainedSettings):
    L_valid_factors: list[int] = Field([1, 2, 4, 8, 16], min_length=1, description="L_valid = factor * L_train")
    L_valid: Optional[list[int]] = Field(
        None,
        min_length=1,
        description="evaluation lengths in tokens, the same for "
        "every L_train (the frontier's target lengths); replaces L_valid_factors",
    )
    modes: list[Literal["nonoverlapping", "sliding"]] = Field(["nonoverlapping", "sliding"], min_length=1)
    stride: int = Field(1, ge=1, description="sliding-window stride S (1 is the paper's analysis; capped at L_valid)")
    interpolate: bool = Field(False, description="also evaluate with positions scaled by L_train / L_valid")
    eval_tokens: Optional[int] = Field(None, ge=2, description="use the first N tokens of the valid split")
    eval_batch_size: int = Field(8, ge=1)
    reuse_checkpoint: bool = Field(True, description="evaluate an existing checkpoint of this case instead of retraining")
    by_distance: bool = Field(
        False,
        description="synthetic-copy corpora: also the perplexity of copied tokens per copy-distance "
        "bucket (1-8, 9-64, ..., beyond L_train) and of tokens that copy nothing, beside the source's (series.by_distance)",
    )
    attention_diagnostics: bool = Field(
        False,
        description="also the attention's entropy (and its ratio to log of the keys), first-token "
        "mass and mass by distance, per layer and head at each L_valid (series.attention), from a probed forward",
    )
    attention_sequences: int = Field(4, ge=1, description="attention_diagnostics: windows of the valid split probed")
    attention_max_factor: int = Field(
        8, ge=1, description="attention_diagnostics: the longest L_valid probed, as a multiple of L_train"
    )
    decode_tokens: Optional[int] = Field(
        None,
        ge=1,
        description="also time this many greedy decode steps with a KV "
        "cache at each L_valid (decode_tpot_ms@<L_valid>: the frontier's decode cost)",
    )
    decode_repeats: int = Field(
        3,
        ge=1,
        description="repeats of the decode cost (a prefill and decode_tokens steps "
        "each): its median and the fastest and slowest repeat",
    )

    @model_validator(mode="after")
    def _lengths(self):
        if self.L_valid is not None and any(v < 2 for v in self.L_valid):
            raise ValueError(f"L_valid lengths must be at least 2 tokens, got {self.L_valid}")
        return self

    def valid_lengths(self, L: int) -> list[int]:
        """The evaluation lengths at L_train = L: ``L_valid`` when given, else factor x L."""
        return sorted(set(self.L_valid)) if self.L_valid else [f * L for f in self.L_valid_factors]


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    L_train: int = Field(ge=2, description="training length")


TASK = register_task(
    Task(
        Settings,
        Params,
        METRICS,
        run,
        REPORT_ORDER=REPORT_ORDER,
        report_sections=report_sections,
        summary_tables=summary_tables,
        compare_values=compare_values,
        name="extrapolation",
    )
)
