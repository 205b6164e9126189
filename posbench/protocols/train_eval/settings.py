"""The settings block of the train-then-evaluate protocol (``Settings``: training, the pretrained
checkpoint, the evaluation lengths and modes, and the optional measures: loss by distance,
attention diagnostics, decode cost), and the metrics every trained model records
(``TRAINED_MODEL_METRICS``, what ``model.train_case_model`` returns). Imports no torch: validating
a suite reads these settings.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from posbench.core.task import Metric
from posbench.protocols.pretrained_eval import PretrainedSettings
from posbench.protocols.training import TrainSettings

# In the order the extrapolation task declares them (its report's tables follow that order).
TRAINED_MODEL_METRICS = {
    "best_ppl": Metric(
        title="Best achievable perplexity",
        unit="perplexity",
        doc="best achievable perplexity of the corpus (synthetic sources, long run), else null",
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
}


class Settings(TrainSettings, PretrainedSettings):
    L_valid_factors: list[Annotated[int, Field(ge=1)]] = Field(
        [1, 2, 4, 8, 16], min_length=1, description="L_valid = factor * L_train"
    )
    L_valid: list[int] | None = Field(
        None,
        min_length=1,
        description="evaluation lengths in tokens, the same for "
        "every L_train (the frontier's target lengths); replaces L_valid_factors",
    )
    modes: list[Literal["nonoverlapping", "sliding"]] = Field(["nonoverlapping", "sliding"], min_length=1)
    stride: int = Field(1, ge=1, description="sliding-window stride S (1 is the paper's analysis; capped at L_valid)")
    interpolate: bool = Field(False, description="also evaluate with positions scaled by L_train / L_valid")
    eval_tokens: int | None = Field(None, ge=2, description="use the first N tokens of the valid split")
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
    decode_tokens: int | None = Field(
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
