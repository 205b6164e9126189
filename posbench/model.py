"""A decoder-only transformer language model whose position method is a plugin.

Pre-LayerNorm blocks, tied input/output embeddings (Baevski & Auli 2018, the ALiBi paper's base
model), and a KV cache for incremental decoding. The position method is one module shared by
all layers: ``embed`` runs once at the bottom, ``attend`` runs in every layer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from . import registry
from .config import PRESETS, ModelConfig, model_config  # noqa: F401  (re-exported)
from .method import PositionMethod


@dataclass
class KVCache:
    """Keys, values and key positions seen so far, one (k, v) pair per layer."""

    keys: list[torch.Tensor | None] = field(default_factory=list)  # each (B, H, T_past, hd)
    values: list[torch.Tensor | None] = field(default_factory=list)
    pos: torch.Tensor | None = None  # (T_past,)

    @property
    def length(self) -> int:
        return 0 if self.pos is None else self.pos.shape[0]


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, index: int):
        super().__init__()
        self.index = index
        self.n_heads = cfg.n_heads
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.ff = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, cfg.d_model))
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, method: PositionMethod, q_pos, k_pos, cache: KVCache | None):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        # (B, T, D) -> (B, H, T, hd)
        q, k, v = (z.view(b, t, self.n_heads, -1).transpose(1, 2) for z in (q, k, v))
        if cache is not None:
            past_k, past_v = cache.keys[self.index], cache.values[self.index]
            if past_k is not None:
                k = torch.cat([past_k, k], dim=2)
                v = torch.cat([past_v, v], dim=2)
            cache.keys[self.index], cache.values[self.index] = k, v
        o = method.attend(q, k, v, q_pos, k_pos, self.index)  # (B, H, T, hd)
        o = o.transpose(1, 2).reshape(b, t, d)
        x = x + self.drop(self.proj(o))
        return x + self.drop(self.ff(self.ln2(x)))


class TransformerLM(nn.Module):
    """``model(idx, pos=None, cache=None) -> logits``; idx (B, T) token ids, logits (B, T, V).

    ``pos`` (T,) defaults to ``cache.length + arange(T)``; pass float positions to interpolate.
    With a ``KVCache`` the call appends this chunk's keys and values, so feeding one token at a
    time reproduces the full forward.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.method = registry.build(cfg)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.apply(self._init)
        # fairseq transformer_lm: embeddings drawn with std d^-0.5 and multiplied by sqrt(d) (the
        # default token_scale) enter at unit scale, comparable to a sinusoidal table's amplitude.
        nn.init.normal_(self.tok.weight, std=cfg.d_model**-0.5)
        # GPT-2's scaled init of residual projections keeps deep pre-LN stacks stable at start.
        for blk in self.blocks:
            for lin in (blk.proj, blk.ff[2]):
                nn.init.normal_(lin.weight, std=0.02 / math.sqrt(2 * cfg.n_layers))
        self._arange: torch.Tensor | None = None

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def info(self, device, dtype: torch.dtype) -> dict[str, str]:
        """What a row must say about how this model computed (strings, for ``row["info"]``): the
        token-embedding scale (results with another scale are not comparable) and the attention
        path the position method takes on ``device`` with compute ``dtype``."""
        return {"embed_scale": f"{self.cfg.token_scale:.6g}", "attn_backend": self.method.attn_backend(device, dtype),
                "compute_dtype": str(dtype).removeprefix("torch.")}

    def positions(self, start: int, length: int, device) -> torch.Tensor:
        """(length,) int64 positions start..start+length-1, sliced from one cached arange.

        Slicing the same storage lets methods recognise repeated positions without reading them.
        """
        need = start + length
        if self._arange is None or self._arange.device != torch.device(device) or self._arange.numel() < need:
            size = max(need, 2 * (self._arange.numel() if self._arange is not None else 0), 1024)
            self._arange = torch.arange(size, device=device)
        return self._arange[start:need]

    def new_cache(self) -> KVCache:
        return KVCache(keys=[None] * self.cfg.n_layers, values=[None] * self.cfg.n_layers)

    def forward(self, idx: torch.Tensor, pos: torch.Tensor | None = None, cache: KVCache | None = None):
        b, t = idx.shape
        past = cache.length if cache is not None else 0
        if pos is None:
            pos = self.positions(past, t, idx.device)
        elif pos.shape != (t,):
            raise ValueError(f"pos must have shape ({t},), got {tuple(pos.shape)}")
        k_pos = pos
        if cache is not None:
            k_pos = pos if cache.pos is None else torch.cat([cache.pos, pos])
            cache.pos = k_pos
        x = self.drop(self.method.embed(self.tok(idx) * self.cfg.token_scale, pos))  # (B, T, D)
        for blk in self.blocks:
            x = blk(x, self.method, pos, k_pos, cache)
        x = self.ln_f(x)
        return F.linear(x, self.tok.weight)  # tied output embedding, (B, T, V)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy in float32; logits (B, T, V), targets (B, T)."""
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))
