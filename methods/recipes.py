"""Recipes: the hybrid layouts recent long-context models ship, as named presets built from
posbench's parts: ``rope_nope_hybrid`` (RoPE layers with a NoPE layer every ``every``-th), a
sliding ``window`` on the RoPE layers (the model's ``window`` and ``window_layers``), and a query
temperature on the NoPE layers (SSMax's idea, ``ssmax``: a query scale growing with the log of
the length). Each is a method like any other: a suite lists it by name, its options are settable
(``method_options``), ``bench.py list`` names the recipes in its header.

The window is the recipe's: the model takes it from the method (its ``cfg``), so a suite that sets
a model ``window`` as well is refused when validated (posbench/run/suite/cross_checks.py), and a
model built so in code is declined with the reason. The papers' windows (512 to 8192 tokens)
are far above posbench's CPU lengths (L_train 64): the CPU profiles set ``window`` in
``method_options`` at the same fraction of L_train. Temperature ``temp`` on NoPE layers, per query
at position p (keys seen: n = p + 1):

    none:   1
    logn:   max(1, log n / log L_train) in evaluation, 1 in training (L_train: ``train_len``, or
            recorded in the first training forward, as ``rotary``'s scalings record it)
    llama4: 1 + attn_scale log(floor((p + 1) / floor_scale) + 1), in training and evaluation
            (Llama 4's attention temperature tuning; 1 below floor_scale tokens)

Llama 4's floor_scale (8192) is its chunk size (8192): the temperature grows once per chunk. So
``floor_scale`` (null, the default) is the recipe's ``window``, whatever it is set to: at
posbench's CPU scale (window 16, L_train 64) the temperature is 1 + 0.1 log 2 from position 15
on, inside the training length, as at Llama 4's scale; ``floor_scale: 8192`` keeps Llama 4's
number (a temperature of 1 below position 8191, irope's behaviour before issue 65).
"""

import dataclasses

import torch

from posbench.core import registry
from posbench.core.outcome import Unavailable
from posbench.core.registry import register_variants

RECIPES = {
    # RNoPE-SWA (Yang et al. 2025, Cohere, "Rope to Nope and Back Again: A New Hybrid Attention
    # Strategy", arXiv 2501.18795): three RoPE layers with a sliding window (4k tokens) to each
    # NoPE layer of full attention; no temperature.
    "rnope_swa": {"every": 4, "window": 4096, "base": 10000.0, "temp": "none"},
    # SWAN-GPT (Puvvada et al. 2025, NVIDIA, arXiv 2504.08719): NoPE layers of full attention
    # interleaved with RoPE layers of a 512-token sliding window, one NoPE to three SWA-RoPE; the
    # attention scores of the NoPE layers scaled with the log of the length at inference.
    "swan": {"every": 4, "window": 512, "base": 10000.0, "temp": "logn"},
    # Llama 4's iRoPE (Meta 2025, the Llama 4 model card and Hugging Face's Llama4TextAttention):
    # every 4th layer NoPE with full attention; the RoPE layers attend within chunks of 8192 tokens
    # (posbench: a sliding window of 8192, its nearest part); the NoPE layers' queries scaled by
    # attention temperature tuning (floor_scale 8192, the chunk: here the window; attn_scale 0.1);
    # rope theta 500000.
    "irope": {"every": 4, "window": 8192, "base": 500000.0, "temp": "llama4"},
}
TEMPS = ("none", "logn", "llama4")
ATTN_SCALE = 0.1  # Llama 4's attention temperature tuning (its floor_scale: the chunk, the recipe's window)


def recipe_method(name: str, preset: dict) -> type:
    """The method class of one recipe: ``rope_nope_hybrid`` with the recipe's window on its RoPE
    layers and its temperature on the NoPE layers."""
    hybrid = registry.get("rope_nope_hybrid")

    class Recipe(hybrid):
        def __init__(
            self,
            cfg,
            window: int = preset["window"],
            every: int = preset["every"],
            base: float = preset["base"],
            temp: str = preset["temp"],
            train_len: int | None = None,
            floor_scale: int | None = None,
        ):
            if cfg.window is not None:
                raise Unavailable(
                    f"{name}: a recipe sets its own sliding window (option window, {window} by default); "
                    "allowed: no model window with a recipe"
                )
            if not (isinstance(window, int) and not isinstance(window, bool) and window >= 1):
                raise ValueError(f"{name}: window must be a positive integer, got {window!r}")
            if temp not in TEMPS:
                raise ValueError(f"{name}: temp must be one of {', '.join(TEMPS)}, got {temp!r}")
            if train_len is not None and not (isinstance(train_len, int) and not isinstance(train_len, bool) and train_len >= 2):
                raise ValueError(f"{name}: train_len must be an integer >= 2 or null (recorded in training), got {train_len!r}")
            if not isinstance(every, int) or isinstance(every, bool) or every < 1:
                raise ValueError(f"{name}: every must be a positive integer, got {every!r}")
            if floor_scale is not None and not (
                isinstance(floor_scale, int) and not isinstance(floor_scale, bool) and floor_scale >= 1
            ):
                raise ValueError(f"{name}: floor_scale must be a positive integer or null (the window), got {floor_scale!r}")
            rope_layers = [i for i in range(cfg.n_layers) if (i + 1) % every != 0]
            # the model reads its layout from here: the RoPE layers windowed, the NoPE ones not
            layout = dataclasses.replace(cfg, window=window if rope_layers else None, window_layers=rope_layers or None)
            super().__init__(layout, every=every, base=base)
            self.temp, self.train_len = temp, train_len
            # Llama 4's floor_scale is its chunk: the recipe's window unless set
            self.floor_scale = window if floor_scale is None else floor_scale
            self.register_buffer("trained_len", torch.tensor(train_len or 0))

        def temperature(self, q_pos: torch.Tensor) -> torch.Tensor | None:
            """(Tq,) float32: the NoPE layers' query scale at positions q_pos; None: 1."""
            if self.temp == "llama4":
                return 1 + ATTN_SCALE * torch.log(torch.floor((q_pos.double() + 1) / self.floor_scale) + 1).float()
            if self.temp == "logn" and not self.training:
                L = self.trained_len.double()
                ratio = torch.log(q_pos.double() + 1) / torch.log(L.clamp(min=2))
                return torch.where(L > 0, ratio.clamp(min=1), torch.ones_like(ratio)).float()
            return None

        def prepare(self, q_pos, k_pos, dtype):
            if self.temp == "logn" and self.training and self.train_len is None:
                self.trained_len.clamp_(min=k_pos.shape[0])  # on the device: no host sync
            return super().prepare(q_pos, k_pos, dtype)

        def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
            if self.is_nope(layer):
                scale = self.temperature(q_pos)
                if scale is not None:
                    q = q * scale.to(q.dtype)[:, None]  # (B, H, Tq, hd) * (Tq, 1)
            return super().attend(q, k, v, q_pos, k_pos, layer, state)

        def attn_backend(self, device, dtype) -> str:
            return f"sdpa causal; RoPE layers windowed ({self.cfg.window}), NoPE every {self.every}, temperature {self.temp}"

        def extra_repr(self) -> str:
            return f"name={self.name!r}, window={self.cfg.window}, every={self.every}, temp={self.temp!r}, floor_scale={self.floor_scale}"

    Recipe.name = name
    Recipe.__name__ = Recipe.__qualname__ = f"Recipe_{name}"
    Recipe.__doc__ = f"the {name} recipe (methods/recipes.py)"
    return Recipe


register_variants(RECIPES, recipe_method)
