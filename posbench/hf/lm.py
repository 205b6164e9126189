"""A checkpoint under one posbench recipe behind the call posbench's evaluation makes:
``lm(idx (B, T), pos (T,) | None) -> logits (B, T, V)`` (``posbench.engine.evaluate``)."""

from __future__ import annotations

import torch

from posbench.hf.checkpoint import Checkpoint


def recipe_for(ckpt: Checkpoint, method: str, options: dict, L_train: int):
    """The recipe that applies posbench method ``method`` to the checkpoint, or ``Unavailable``
    with the reason when it does not apply to its family."""
    if ckpt.family == "rope":
        from posbench.hf.rope import RopeRecipe

        return RopeRecipe(ckpt.model, method, options, L_train)
    from posbench.hf.alibi import AlibiRecipe

    return AlibiRecipe(ckpt.model, ckpt.model_type, method, options)


class PretrainedLM:
    """A Hugging Face causal LM evaluated the way posbench evaluates its own models."""

    def __init__(self, ckpt: Checkpoint, recipe):
        self.ckpt, self.model, self.recipe = ckpt, ckpt.model, recipe

    def __call__(self, idx: torch.Tensor, pos: torch.Tensor | None = None) -> torch.Tensor:
        return self.recipe.forward(idx, pos)

    def parameters(self):
        return self.model.parameters()

    @property
    def training(self) -> bool:
        return self.model.training

    def eval(self):
        self.model.eval()
        return self

    def train(self, mode: bool = True):
        self.model.train(mode)
        return self

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())
