"""A decoder-only transformer language model whose position method is a plugin.

Pre-LayerNorm blocks, tied input/output embeddings (Baevski & Auli 2018, the ALiBi paper's base
model), and a KV cache for incremental decoding. The position method is one module shared by
all layers: ``prepare`` runs once per forward and its state goes to ``embed`` (once, at the
bottom) and to ``encode_qk`` and ``attend`` in every layer (``posbench.core.method``).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from posbench.core import registry
from posbench.core.config import PRESETS, ModelConfig, model_config  # noqa: F401  (re-exported)
from posbench.core.method import PositionMethod, adapt_hooks


class KVCache:
    """Keys, values and key positions seen so far, one (keys, values) buffer pair per layer.

    Each buffer is (B, H, capacity, hd), grown by doubling, so a decode step writes one slot in
    place; layers see views of the first ``length`` slots. Keys are stored as ``encode_qk``
    returned them. With autograd recording, chunks are concatenated instead (writing in place
    would invalidate saved views).
    """

    def __init__(self, n_layers: int, capacity: int = 0):
        self.capacity = capacity
        self._k: list[torch.Tensor | None] = [None] * n_layers  # each (B, H, capacity, hd)
        self._v: list[torch.Tensor | None] = [None] * n_layers
        self.pos: torch.Tensor | None = None  # (length,)
        self.default_pos = True  # every chunk so far had the model's default positions

    @property
    def length(self) -> int:
        return 0 if self.pos is None else self.pos.shape[0]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Write this chunk's k, v (B, H, T, hd) at slots start .. start+T of ``layer``; return
        (B, H, start+T, hd) views of every key and value so far."""
        end = start + k.shape[2]
        buf_k, buf_v = self._k[layer], self._v[layer]
        if buf_k is not None and buf_k.shape[:2] != k.shape[:2]:
            raise ValueError(f"KVCache: a chunk of shape {tuple(k.shape)} after chunks of batch and heads "
                             f"{tuple(buf_k.shape[:2])}; allowed: the same (B, H) in every call")
        if torch.is_grad_enabled() and (k.requires_grad or v.requires_grad):
            past_k = buf_k[:, :, :start] if buf_k is not None else k[:, :, :0]
            past_v = buf_v[:, :, :start] if buf_v is not None else v[:, :, :0]
            self._k[layer], self._v[layer] = torch.cat([past_k, k], 2), torch.cat([past_v, v], 2)
            return self._k[layer], self._v[layer]
        if buf_k is None or buf_k.shape[2] < end or buf_k.dtype != k.dtype:
            size = max(end, self.capacity, 2 * (buf_k.shape[2] if buf_k is not None else 0))
            new_k = k.new_empty(k.shape[0], k.shape[1], size, k.shape[3])
            new_v = v.new_empty(v.shape[0], v.shape[1], size, v.shape[3])
            if buf_k is not None and start:
                new_k[:, :, :start] = buf_k[:, :, :start]
                new_v[:, :, :start] = buf_v[:, :, :start]
            self._k[layer], self._v[layer] = buf_k, buf_v = new_k, new_v
        buf_k[:, :, start:end] = k
        buf_v[:, :, start:end] = v
        return buf_k[:, :, :end], buf_v[:, :, :end]

    def layers(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(keys, values) views of the ``length`` slots held, per layer that has any."""
        n = self.length
        return [(k[:, :, :n], v[:, :, :n]) for k, v in zip(self._k, self._v) if k is not None]

    def nbytes(self) -> int:
        """Bytes of the keys and values held (``length`` slots of every layer; spare capacity and
        the position tensor are not counted)."""
        return sum(t.numel() * t.element_size() for pair in self.layers() for t in pair)

    def fork(self) -> "KVCache":
        """An independent copy to decode a branch into: its writes never touch this cache."""
        other = KVCache(len(self._k), self.capacity)
        n = self.length
        for i, (k, v) in enumerate(zip(self._k, self._v)):
            if k is not None:
                other._k[i], other._v[i] = k[:, :, :n].clone(), v[:, :, :n].clone()
        other.pos, other.default_pos = self.pos, self.default_pos
        return other


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, index: int):
        super().__init__()
        self.index = index
        self.n_heads, self.kv_heads = cfg.n_heads, cfg.kv_heads
        self.kv_dim = cfg.kv_heads * cfg.head_dim  # d_model in multi-head attention
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, cfg.d_model + 2 * self.kv_dim)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.ff = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, cfg.d_model))
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, method: PositionMethod, q_pos, k_pos, cache: KVCache | None, state):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split((d, self.kv_dim, self.kv_dim), dim=-1)
        # (B, T, D) -> (B, H, T, hd); keys and values (B, Hkv, T, hd)
        q = q.view(b, t, self.n_heads, -1).transpose(1, 2)
        k, v = (z.view(b, t, self.kv_heads, -1).transpose(1, 2) for z in (k, v))
        q, k = method.encode_qk(q, k, self.index, state)  # this chunk's, at q_pos
        if cache is not None:
            k, v = cache.append(self.index, k, v, k_pos.shape[0] - t)  # (B, Hkv, Tk, hd): the cache holds Hkv heads
        if self.kv_heads != self.n_heads and not method.grouped_kv:
            # grouped-query attention: query head h reads key/value head h // (H / Hkv). Expanded
            # here, per layer and for the moment of attention only, so every method's attend
            # takes the layout unchanged (a ``grouped_kv`` method reads it in place); the cache stays Hkv heads.
            group = self.n_heads // self.kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        o = method.attend(q, k, v, q_pos, k_pos, self.index, state)  # (B, H, T, hd)
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
        self.method = adapt_hooks(registry.build(cfg))  # hooks without state: adapted once, here
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

    def new_cache(self, capacity: int = 0) -> KVCache:
        """An empty KV cache; ``capacity`` slots are allocated at its first write (0: as needed,
        growing by doubling)."""
        return KVCache(self.cfg.n_layers, capacity)

    def compute_dtype(self, device) -> torch.dtype:
        """The dtype q and k will have in this forward: autocast's where it is on, else the
        weights' (what ``prepare`` is told, so a bias is built in the dtype attention needs)."""
        device_type = torch.device(device).type
        if torch.is_autocast_enabled(device_type):
            return torch.get_autocast_dtype(device_type)
        return self.blocks[0].qkv.weight.dtype if len(self.blocks) else self.tok.weight.dtype

    def forward(self, idx: torch.Tensor, pos: torch.Tensor | None = None, cache: KVCache | None = None):
        b, t = idx.shape
        past = cache.length if cache is not None else 0
        default = pos is None
        if default:
            upto = self.positions(0, past + t, idx.device)  # (past + T,): one arange's slice, no copy
            pos = upto[past:]
        elif pos.shape != (t,):
            raise ValueError(f"pos must have shape ({t},), got {tuple(pos.shape)}")
        k_pos = pos  # (Tk,): the cached keys' positions, then this chunk's
        if cache is not None and cache.pos is not None:
            k_pos = upto if default and cache.default_pos else torch.cat([cache.pos, pos])
        state = self.method.prepare(pos, k_pos, self.compute_dtype(idx.device))
        x = self.drop(self.method.embed(self.tok(idx) * self.cfg.token_scale, pos, state))  # (B, T, D)
        for blk in self.blocks:
            x = blk(x, self.method, pos, k_pos, cache, state)
        if cache is not None:
            cache.pos, cache.default_pos = k_pos, default and cache.default_pos
        x = self.ln_f(x)
        return F.linear(x, self.tok.weight)  # tied output embedding, (B, T, V)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy in float32; logits (B, T, V), targets (B, T)."""
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))
