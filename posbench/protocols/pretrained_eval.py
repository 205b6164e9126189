"""What tasks that evaluate a pretrained checkpoint share (``--model hf:DIR``, the ``posbench[hf]``
extra): the settings (``PretrainedSettings``), the checkpoint opened under the case's method
(``open_pretrained``: posbench's recipe applied, k = 0 for the extension task) and its
evaluation tokens (``pretrained_tokens``). Imports neither torch nor transformers at module level.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


class PretrainedSettings(BaseModel):
    """A Hugging Face checkpoint evaluated instead of a model trained by posbench."""

    model_config = ConfigDict(extra="forbid", strict=True)

    pretrained: str | None = Field(
        None,
        description="hf:DIR: evaluate this Hugging Face checkpoint (a folder "
        "written by save_pretrained) instead of training a model (--model hf:DIR; "
        "needs pip install posbench[hf])",
    )
    passkey_trials: int = Field(
        5,
        ge=0,
        description="pretrained checkpoints: text passkey probes per L_valid (needle depths spread over 0..1; 0: no probe)",
    )

    @field_validator("pretrained")
    @classmethod
    def _hf_prefix(cls, value):
        if value is not None and not value.startswith("hf:"):
            raise ValueError(f"pretrained must be hf:DIR (a folder written by save_pretrained), got {value!r}")
        return value


def open_pretrained(case, L_train: int):
    """(lm, checkpoint): the case's checkpoint in its ``eval_dtype`` on its device, under the case's
    method as a posbench recipe; ``Unavailable`` when the method does not apply to its family."""
    import torch

    from posbench.hf.checkpoint import load
    from posbench.hf.lm import PretrainedLM, recipe_for

    s = case.settings
    ckpt = load(s.pretrained, getattr(torch, s.eval_dtype), case.device)
    recipe = recipe_for(ckpt, case.method, s.method_options.get(case.method, {}), L_train)
    return PretrainedLM(ckpt, recipe), ckpt


def pretrained_tokens(s, ckpt, split: str = "valid", max_tokens: int | None = None):
    """((N,) int64 ids of ``split`` (valid: capped at ``eval_tokens``, train at ``max_tokens``), the
    corpus's description): text through the checkpoint's tokenizer; ids as they are, when they fit."""
    import numpy as np

    from posbench.hf.text import TEXT_KINDS, check_ids, text_tokens
    from posbench.protocols.training import open_corpus

    c = s.corpus
    cap = s.eval_tokens if split == "valid" else max_tokens
    if c.kind in TEXT_KINDS:
        return text_tokens(ckpt.tokenizer, c.kind, c.path, c.splits, cap, split)
    corpus = open_corpus(c)
    ids = np.asarray(corpus.split(split)[:cap], dtype=np.int64)
    check_ids(ids, ckpt.vocab_size, corpus.name)
    return ids, corpus.describe()
