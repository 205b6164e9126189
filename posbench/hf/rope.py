"""posbench's rotary scalings written into a Llama-family checkpoint's rope parameters, the model's
rotary module rebuilt at each evaluation length and its frequencies and attention factor checked
against posbench's own: a difference is an error, never a silent other recipe."""

from __future__ import annotations

import math

import torch

from posbench.core import registry
from posbench.core.config import ModelConfig
from posbench.core.outcome import Unavailable

RECIPES = ("rotary", "rotary_pi", "rotary_ntk", "rotary_dynamic_ntk", "rotary_yarn", "rotary_llama3", "rotary_longrope")
# Relative tolerance of transformers' float32 frequencies against posbench's float64 ones.
FREQ_RTOL = 1e-5


def posbench_method(method: str, options: dict, rotary_dim: int, base: float, L_train: int):
    """The posbench rotary method whose frequencies the recipe follows, with L_train as its
    ``train_len`` (options may set another) and the checkpoint's base."""
    if method not in RECIPES:
        raise Unavailable(f"{method} cannot be applied to a RoPE checkpoint; allowed: {', '.join(RECIPES)}")
    cfg = ModelConfig(
        vocab_size=2,
        n_layers=1,
        d_model=rotary_dim,
        n_heads=1,
        d_ff=1,
        method=method,
        method_options={"base": base, "train_len": L_train, **options},
    )
    m = registry.build(cfg)
    if getattr(m, "yarn_ramp", "index") != "index" and m.scaling == "yarn":
        raise Unavailable(
            f"{method}: yarn_ramp {m.yarn_ramp!r} has no transformers rope_type; allowed: "
            "yarn_ramp index (the authors' ramp, transformers' yarn)"
        )
    return m.eval()


def rope_parameters(m, length: int) -> tuple[dict, int | None]:
    """(transformers rope parameters, max_position_embeddings to set or None) of posbench method
    ``m`` evaluating ``length`` tokens."""
    L_train = m.known_train_len()
    s = m.factor_at(length, L_train)
    base = m.base
    d = m.cfg.head_dim
    kind = m.scaling
    if kind == "none":
        return {"rope_type": "default", "rope_theta": base}, None
    if kind == "pi":
        return {"rope_type": "linear", "rope_theta": base, "factor": s}, None
    if kind == "ntk":  # static NTK-aware: no rope_type of its own, only the base moves
        return {"rope_type": "default", "rope_theta": base * s ** (d / (d - 2))}, None
    if kind == "dynamic_ntk":  # transformers recomputes it per length from max_position_embeddings = L_train
        return {"rope_type": "dynamic", "rope_theta": base, "factor": float(m.factor or 1.0)}, L_train
    if kind == "yarn":
        return {
            "rope_type": "yarn",
            "rope_theta": base,
            "factor": s,
            "original_max_position_embeddings": L_train,
            "beta_fast": m.yarn_beta,
            "beta_slow": m.yarn_alpha,
        }, None
    if kind == "llama3":
        return {
            "rope_type": "llama3",
            "rope_theta": base,
            "factor": s,
            "low_freq_factor": m.low_freq_factor,
            "high_freq_factor": m.high_freq_factor,
            "original_max_position_embeddings": L_train,
        }, None
    if kind == "longrope":  # the vectors posbench would use within and beyond L_train at this s
        short = m.rescale(s, L_train, L_train).tolist()
        long = m.rescale(s, L_train, max(length, L_train + 1)).tolist()
        return {
            "rope_type": "longrope",
            "rope_theta": base,
            "factor": s,
            "short_factor": short,
            "long_factor": long,
            "original_max_position_embeddings": L_train,
        }, None
    raise Unavailable(f"{m.name}: scaling {kind!r} has no transformers rope_type")


class RopeRecipe:
    """A posbench rotary method applied to a Llama-family model, re-applied whenever the
    evaluation length changes; ``checks`` records each length's comparison."""

    def __init__(self, model, method: str, options: dict, L_train: int):
        cfg = model.config
        self.model, self.method = model, method
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.rotary_dim = int(self.head_dim * cfg.rope_parameters.get("partial_rotary_factor", 1.0))
        self.shipped = dict(cfg.rope_parameters)  # the checkpoint's own, recorded in the row
        self.max_positions = cfg.max_position_embeddings
        self.m = posbench_method(method, options, self.rotary_dim, float(cfg.rope_parameters["rope_theta"]), L_train)
        self.length: int | None = None
        self.checks: dict[int, dict] = {}

    def apply(self, length: int) -> dict:
        """Rebuild the model's rotary module for ``length`` and check its frequencies against posbench's."""
        cfg = self.model.config
        params, max_pos = rope_parameters(self.m, length)
        cfg.rope_parameters = params
        cfg.max_position_embeddings = max_pos or self.max_positions
        old = self.model.model.rotary_emb
        device = old.inv_freq.device
        rotary = type(old)(config=cfg).to(device)
        probe = torch.zeros(1, device=device)
        rotary(probe, torch.arange(length, device=device)[None])  # a dynamic type updates itself here
        self.model.model.rotary_emb = rotary
        self.length = length
        theta, factor = self.m.frequencies(length)  # (rotary_dim/2,) float64, attention factor
        got = rotary.inv_freq.detach().double().cpu()
        rel = float(((got - theta) / theta).abs().max())
        check = {
            "rope_type": params["rope_type"],
            "factor": params.get("factor"),
            "max_rel_freq_diff": rel,
            "attention_factor": float(rotary.attention_scaling),
            "posbench_attention_factor": factor,
        }
        if rel > FREQ_RTOL or not math.isclose(check["attention_factor"], factor, rel_tol=FREQ_RTOL):
            raise RuntimeError(
                f"hf rope: transformers' {params['rope_type']} at L={length} differs from posbench's "
                f"{self.method} (inverse frequencies off by {rel:.2e} relative, attention factor "
                f"{check['attention_factor']:.6g} vs {factor:.6g})"
            )
        self.checks[length] = check
        return check

    def refresh(self) -> None:
        """Rebuild the rotary module at the next call (after the model changed dtype: float32 frequencies)."""
        self.length = None

    def forward(self, idx: torch.Tensor, pos: torch.Tensor | None) -> torch.Tensor:
        """logits (B, T, V) of idx (B, T) at positions ``pos`` (T,) float, default 0..T-1."""
        T = idx.shape[1]
        length = T if pos is None else int(pos[-1]) + 1  # as posbench's rotary: the last key's position + 1
        if length != self.length:
            self.apply(length)
        if pos is None:
            return self.model(input_ids=idx, use_cache=False).logits
        position_ids = pos.to(idx.device)[None].expand(idx.shape[0], -1)  # (B, T) float
        # A mask of ones: without one, transformers reads position steps other than 1 as packed
        # sequences and lets each token see only itself.
        mask = torch.ones(idx.shape, dtype=torch.long, device=idx.device)
        return self.model(input_ids=idx, position_ids=position_ids, attention_mask=mask, use_cache=False).logits


class NoRotation(torch.nn.Module):
    """A Llama rotary module that rotates by nothing: cos 1, sin 0."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shape = (*position_ids.shape, self.dim)  # (B, T, rotary_dim), as the module it replaces
        return torch.ones(shape, dtype=x.dtype, device=x.device), torch.zeros(shape, dtype=x.dtype, device=x.device)


class DropeRecipe:
    """DroPE (Gelberg et al. 2025) on a Llama-family model: the rotation removed, positions left to
    the causal mask (posbench's ``nope``), recalibrated by the fine-tune."""

    def __init__(self, model):
        self.model = model
        model.model.rotary_emb = NoRotation(2 * model.model.rotary_emb.inv_freq.numel())

    def refresh(self) -> None:
        """Nothing to rebuild: the rotation by nothing follows the model's dtype."""

    def forward(self, idx: torch.Tensor, pos: torch.Tensor | None) -> torch.Tensor:
        """logits (B, T, V) of idx (B, T); positions play no part."""
        return self.model(input_ids=idx, use_cache=False).logits
