"""What the tasks that train a model on a corpus share: ``TrainSettings`` (the model, the corpus,
the budget and the optimizer) with its ``TrainConfig``, and ``open_corpus``. Imports no torch:
validating a suite reads these settings. The trained model itself: ``posbench.engine.train.trained_model``.
"""
from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from posbench.core.task import ModelSettings

Precision = Literal["auto", "float32", "bfloat16", "float16"]
EvalDtype = Literal["float32", "bfloat16", "float16"]


class CorpusSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    kind: Literal["synthetic", "synthetic-copy", "wikitext", "wikitext-103", "wikitext-2", "text"] = "synthetic"
    path: Optional[str] = Field(None, description="data folder or file; default $POSBENCH_DATA_DIR (--data sets it)")
    level: Optional[Literal["word", "byte"]] = Field(
        None, description="text: word or byte (default byte); WikiText is word level only (for WikiText bytes use "
        "kind: text with the folder's files)")
    splits: Optional[dict[str, str]] = Field(None, description="corpus split -> file split, e.g. {train: test}")
    size: Optional[int] = Field(None, ge=1, description="cap on tokens per split (synthetic: training tokens)")
    seed: int = 0
    synthetic: dict[str, Union[int, float]] = Field(
        default_factory=dict, description="synthetic: vocab, order, branching, jump; synthetic-copy: vocab, "
        "branching, jump, copy_prob, max_distance, decay")

    @model_validator(mode="after")
    def _word_level_wikitext(self):
        # Said before anything runs, instead of training a word-level model under "byte".
        if self.kind.startswith("wikitext") and self.level == "byte":
            raise ValueError(f"corpus: kind {self.kind} is word level only; for bytes use kind: text, "
                             "path: <folder>, level: byte, splits: {train: test.txt, valid: valid.txt}")
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


class TrainSettings(ModelSettings):
    """A model trained on a corpus: the budget (steps or tokens) and the optimizer's settings."""

    corpus: CorpusSettings = Field(default_factory=CorpusSettings)
    steps: Optional[int] = Field(None, ge=1, description="training budget in optimizer steps ...")
    tokens: Optional[int] = Field(None, ge=1, description="... or in tokens")
    batch_size: int = Field(16, ge=1)
    lr: float = Field(1e-3, gt=0)
    warmup_steps: int = Field(50, ge=0)
    precision: Precision = "auto"
    eval_dtype: EvalDtype = "float32"

    @model_validator(mode="after")
    def _one_budget(self):
        if (self.steps is None) == (self.tokens is None):
            raise ValueError("give exactly one training budget: steps or tokens")
        return self

    def train_config(self, seq_len: int, seed: int):
        """The ``posbench.engine.train.TrainConfig`` of these settings at ``seq_len``."""
        from posbench.engine.train import TrainConfig

        return TrainConfig(seq_len=seq_len, batch_size=self.batch_size, steps=self.steps, tokens=self.tokens,
                           lr=self.lr, warmup_steps=self.warmup_steps, precision=self.precision, seed=seed)
