"""The extension task's declaration: its settings, grid point, metrics and ``TASK``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from posbench.core.registry import register_task
from posbench.core.task import Metric, Task
from posbench.protocols.pretrained_eval import PretrainedSettings
from posbench.protocols.training import BUDGET_METRICS, TrainSettings
from posbench.tasks.extension.regimes import BIAS_DTYPES, RECIPES, checkpoint_misfit
from posbench.tasks.extension.report import REPORT_ORDER, TITLE, report_sections, summary_tables
from posbench.tasks.extension.run import run

METRICS = {
    "ppl_at_target_k0": Metric(
        title="Perplexity at L_target, zero-shot",
        unit="perplexity",
        doc="non-overlapping perplexity at L_target with the recipe applied and no fine-tuning (k = 0)",
        higher_is_better=False,
        fmt="ppl",
    ),
    "ppl_at_target": Metric(
        title="Perplexity at L_target after fine-tuning",
        unit="perplexity",
        doc="non-overlapping perplexity at L_target after the largest k of finetune_steps",
        higher_is_better=False,
        fmt="ppl",
    ),
    "ppl_at_max_len": Metric(
        title="Perplexity at the longest L_valid after fine-tuning",
        unit="perplexity",
        doc="non-overlapping perplexity at the longest L_valid after the largest k",
        higher_is_better=False,
        fmt="ppl",
    ),
    "passkey_at_target_k0": Metric(
        title="Passkey accuracy at L_target, zero-shot",
        unit="fraction",
        doc="passkey exact match at L_target, k = 0",
        higher_is_better=True,
    ),
    "passkey_at_target": Metric(
        title="Passkey accuracy at L_target after fine-tuning",
        unit="fraction",
        doc="passkey exact match at L_target after the largest k",
        higher_is_better=True,
    ),
    "ppl@*": Metric(
        title="Perplexity",
        unit="perplexity",
        doc="ppl@<mode>@<L_valid>@k<k>: perplexity after k fine-tuning steps",
        higher_is_better=False,
        fmt="ppl",
    ),
    "passkey@*": Metric(
        title="Passkey accuracy",
        unit="fraction",
        doc="passkey@<L_valid>@k<k>: passkey exact match after k fine-tuning steps (counts over depths)",
        higher_is_better=True,
    ),
    "finetune_seconds@*": Metric(
        title="Fine-tuning time",
        unit="s",
        doc="finetune_seconds@k<k>: wall-clock time of the k-step fine-tune",
        higher_is_better=None,
    ),
    "finetune_loss@*": Metric(
        title="Final fine-tuning loss",
        unit="nats/token",
        doc="finetune_loss@k<k>: loss at the last fine-tuning step",
        higher_is_better=None,
    ),
    "base_ppl_at_train_len": Metric(
        title="Base perplexity at L_train",
        unit="perplexity",
        doc="the trained model's non-overlapping perplexity at L_train, before any recipe (learn first)",
        higher_is_better=None,
        fmt="ppl",
    ),
    "base_passkey_at_train_len": Metric(
        title="Base passkey accuracy at L_train",
        unit="fraction",
        doc="the trained model's passkey accuracy at L_train, before any recipe (learn first)",
        higher_is_better=None,
    ),
    "L_target": Metric(
        title="L_target", unit="tokens", doc="the fine-tuning length, target_factor x L_train", higher_is_better=None, fmt="int"
    ),
    "L_train": Metric(
        title="L_train",
        unit="tokens",
        doc="a checkpoint's (--model hf:DIR) training length: pretrained_L_train or its config's (series.L_train_source)",
        higher_is_better=None,
        fmt="int",
    ),
    "finetune_memory_needed_bytes": Metric(
        title="Fine-tuning memory estimate",
        unit="bytes",
        doc="a checkpoint's parameters x 16 (float32 weights, gradients, AdamW moments)",
        higher_is_better=None,
        fmt="count",
    ),
    "final_train_loss": Metric(
        title="Final training loss", unit="nats/token", doc="training loss of the base model at its last step"
    ),
    "train_steps": Metric(
        title="Training steps", unit="steps", doc="optimizer steps of the base model", higher_is_better=None, fmt="int"
    ),
    "train_tokens": Metric(
        title="Training tokens", unit="tokens", doc="tokens the base model trained on", higher_is_better=None, fmt="count"
    ),
    "train_seconds": Metric(title="Training time", unit="s", doc="wall-clock training time of the base model (s); 0 when reused"),
    "reused_checkpoint": Metric(
        title="Reused checkpoint",
        unit="",
        doc="1 when the base model came from a checkpoint (another recipe's case trained it)",
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
    **BUDGET_METRICS,
}


class Settings(TrainSettings, PretrainedSettings):
    # The base model's budget, optimizer and corpus: TrainSettings; it trains on the corpus mixed
    # with passkey examples (``mix``), as the retrieval task's models do, so passkey has a baseline.
    target_factor: int = Field(4, ge=2, description="L_target = target_factor x L_train: the fine-tuning length")
    finetune_steps: list[int] = Field(
        [0, 100, 400],
        min_length=1,
        description="k: fine-tuning steps at L_target, each a fine-tune of its own from the trained model; 0 is zero-shot",
    )
    finetune_lr: float = Field(2e-4, gt=0, description="peak learning rate of the fine-tune")
    finetune_warmup_steps: int = Field(
        20, ge=0, description="linear warm-up of the fine-tune: min(this, ceil(k / 10)) steps, then cosine decay to 10%"
    )
    finetune_batch_size: int | None = Field(
        None, ge=1, description="rows per fine-tuning step; default batch_size / target_factor (the base's tokens per step)"
    )
    L_valid_factors: list[Annotated[int, Field(ge=1)]] = Field(
        [1, 2], min_length=1, description="evaluation lengths: factor x L_target"
    )
    modes: list[Literal["nonoverlapping", "sliding"]] = Field(["nonoverlapping", "sliding"], min_length=1)
    stride: int = Field(64, ge=1, description="sliding-window stride S (capped at L_valid)")
    eval_tokens: int | None = Field(None, ge=2, description="use the first N tokens of the valid split")
    eval_batch_size: int = Field(8, ge=1)
    mix: float = Field(0.5, ge=0.0, le=1.0, description="fraction of training rows that are passkey examples")
    loss: Literal["all", "answers", "predictable"] = Field(
        "predictable", description="loss of passkey rows (the retrieval task's setting)"
    )
    n_symbols: int = Field(16, ge=2, description="passkey digits")
    key_len: int = Field(5, ge=1, description="passkey: symbols in the key")
    filler_len: int = Field(5, ge=1, description="tokens of the repeated filler phrase")
    depths: list[float] = Field([0.0, 0.25, 0.5, 0.75, 1.0], min_length=1, description="passkey needle depths")
    eval_samples: int = Field(100, ge=1, description="passkey answers scored per L_valid (split over depths)")
    stop_at_acc: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="base model: stop once held-out passkey accuracy at L_train reaches this (the retrieval task's criterion)",
    )
    check_every: int = Field(100, ge=1, description="steps between the held-out checks of stop_at_acc")
    check_samples: int = Field(200, ge=1, description="held-out passkey examples per check")
    reuse_checkpoint: bool = Field(True, description="reuse the base model another case of the run trained")
    pretrained_L_train: int | None = Field(
        None,
        ge=2,
        description="--model hf:DIR: the checkpoint's training "
        "length (default its config's max_position_embeddings or max_seq_len; "
        "the grid's L_train is not read)",
    )
    finetune_memory_bytes: int | None = Field(
        None, ge=0, description="--model hf:DIR: memory the fine-tune may use (default what the device has free or available)"
    )

    @model_validator(mode="after")
    def _check(self):
        ks = self.finetune_steps
        if any(k < 0 for k in ks) or len(set(ks)) != len(ks) or 0 not in ks:
            raise ValueError(f"finetune_steps must be distinct whole numbers >= 0 including 0 (the zero-shot point), got {ks}")
        if any(not 0.0 <= d <= 1.0 for d in self.depths):
            raise ValueError(f"depths must lie in [0, 1], got {self.depths}")
        self.probe_config()
        return self

    def probe_config(self):
        """The retrieval probes' ``ProbeConfig`` (passkey only reads these three)."""
        from posbench.core.config import ProbeConfig

        return ProbeConfig(n_symbols=self.n_symbols, key_len=self.key_len, filler_len=self.filler_len)

    def ks(self) -> list[int]:
        return sorted(self.finetune_steps)


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    L_train: int = Field(ge=2, description="training length of the base model")
    recipe: Literal[RECIPES] = Field(
        description="extension recipe (rotary: none, pi, ntk, yarn, longrope, "  # type: ignore[valid-type]
        "llama3, drope; alibi: extrapolate, interpolate)"
    )
    bias_dtype: Literal[BIAS_DTYPES] = Field(
        "float32",
        description="alibi: the bias in float32 or in the "  # type: ignore[valid-type]
        "compute dtype while fine-tuning and evaluating",
    )


TASK = register_task(
    Task(
        Settings=Settings,
        Params=Params,
        METRICS=METRICS,
        run=run,
        TITLE=TITLE,
        REPORT_ORDER=REPORT_ORDER,
        report_sections=report_sections,
        summary_tables=summary_tables,
        name="extension",
        unavailable=lambda case: checkpoint_misfit(case.method, case.params["recipe"], case.settings.get("pretrained")),
    )
)
