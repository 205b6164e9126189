"""A decoder-only transformer language model whose position method is a plugin.

Pre-LayerNorm blocks, tied input/output embeddings (Baevski & Auli 2018, the ALiBi paper's base
model), and a KV cache for incremental decoding. The position method is one module shared by
all layers: ``prepare`` runs once per forward and its state goes to ``embed`` (once, at the
bottom) and to ``encode_qk`` and ``attend`` in every layer (``posbench.core.method``).
``TransformerLM(method)`` takes a built method; ``build_model(cfg)`` builds ``cfg.method`` by name
(``posbench.core.registry``) and the model around it.
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
    place; layers see views of the slots they hold. Keys are stored as ``encode_qk`` returned them.
    A layer with a sliding window (``windows[layer]``) holds only its last ``window`` keys: the
    slots before them are dropped after each call, and the held ones moved to the buffer's start
    when it fills. With autograd recording, chunks are concatenated instead (writing in place
    would invalidate saved views).
    """

    def __init__(self, n_layers: int, capacity: int = 0, windows: list[int | None] | None = None):
        self.capacity = capacity
        self.windows = list(windows) if windows is not None else [None] * n_layers
        self._k: list[torch.Tensor | None] = [None] * n_layers  # each (B, H, capacity, hd)
        self._v: list[torch.Tensor | None] = [None] * n_layers
        self._first = [0] * n_layers  # slots held: first .. end of each buffer
        self._end = [0] * n_layers
        self.pos: torch.Tensor | None = None  # (length,): every position seen, windowed layers or not
        self.default_pos = True  # every chunk so far had the model's default positions

    @property
    def length(self) -> int:
        return 0 if self.pos is None else self.pos.shape[0]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Append this chunk's k, v (B, H, T, hd), the keys at positions start .. start+T, to
        ``layer``; return (B, H, held + T, hd) views of the keys and values it held and of the chunk."""
        window, t = self.windows[layer], k.shape[2]
        # slots start .. start+T without a window; a windowed layer writes after the keys it holds
        first, end = (0, start) if window is None else (self._first[layer], self._end[layer])
        buf_k, buf_v = self._k[layer], self._v[layer]
        if buf_k is not None and buf_k.shape[:2] != k.shape[:2]:
            raise ValueError(
                f"KVCache: a chunk of shape {tuple(k.shape)} after chunks of batch and heads "
                f"{tuple(buf_k.shape[:2])}; allowed: the same (B, H) in every call"
            )
        if torch.is_grad_enabled() and (k.requires_grad or v.requires_grad):
            past_k = buf_k[:, :, first:end] if buf_k is not None else k[:, :, :0]
            past_v = buf_v[:, :, first:end] if buf_v is not None else v[:, :, :0]
            out_k, out_v = torch.cat([past_k, k], 2), torch.cat([past_v, v], 2)
            self._k[layer], self._v[layer] = out_k, out_v
            self._first[layer], self._end[layer] = self._keep(0, out_k.shape[2], window), out_k.shape[2]
            return out_k, out_v
        if buf_k is not None and buf_k.shape[2] < end + t and first and buf_k.dtype == k.dtype:
            # a windowed layer at the end of its buffer: the held slots move to its start
            buf_k[:, :, : end - first] = buf_k[:, :, first:end].clone()
            buf_v[:, :, : end - first] = buf_v[:, :, first:end].clone()
            first, end = 0, end - first
        if buf_k is None or buf_k.shape[2] < end + t or buf_k.dtype != k.dtype:
            need, old = end - first + t, (buf_k.shape[2] if buf_k is not None else 0)
            # a windowed layer: room for 2 x window slots, so its held keys move once per window calls;
            # never more than the capacity asked for (a window longer than the context holds it all)
            size = (
                max(need, self.capacity, 2 * old) if window is None else max(need, min(2 * window, self.capacity or 2 * window))
            )
            new_k = k.new_empty(k.shape[0], k.shape[1], size, k.shape[3])
            new_v = v.new_empty(v.shape[0], v.shape[1], size, v.shape[3])
            if buf_k is not None and end > first:
                new_k[:, :, : end - first] = buf_k[:, :, first:end]
                new_v[:, :, : end - first] = buf_v[:, :, first:end]
            self._k[layer], self._v[layer] = buf_k, buf_v = new_k, new_v
            first, end = 0, end - first
        buf_k[:, :, end : end + t] = k
        buf_v[:, :, end : end + t] = v
        self._first[layer], self._end[layer] = self._keep(first, end + t, window), end + t
        return buf_k[:, :, first : end + t], buf_v[:, :, first : end + t]

    @staticmethod
    def _keep(first: int, end: int, window: int | None) -> int:
        """The first slot a layer keeps after a call: its last ``window`` keys (all without one)."""
        return first if window is None else max(first, end - window)

    def layers(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(keys, values) views of the slots held, per layer that has any (a windowed layer's:
        its last ``window``)."""
        return [(k[:, :, a:e], v[:, :, a:e]) for k, v, a, e in zip(self._k, self._v, self._first, self._end) if k is not None]

    def nbytes(self) -> int:
        """Bytes of the keys and values held (the slots each layer holds; spare capacity and the
        position tensor are not counted)."""
        return sum(t.numel() * t.element_size() for pair in self.layers() for t in pair)

    def fork(self) -> KVCache:
        """An independent copy to decode a branch into: its writes never touch this cache."""
        other = KVCache(len(self._k), self.capacity, self.windows)
        for i, (k, v) in enumerate(zip(self._k, self._v)):
            if k is not None:
                a, e = self._first[i], self._end[i]
                other._k[i], other._v[i] = k[:, :, a:e].clone(), v[:, :, a:e].clone()
                other._end[i] = e - a
        other.pos, other.default_pos = self.pos, self.default_pos
        return other


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, index: int):
        super().__init__()
        self.index = index
        self.window = cfg.layer_window(index)  # the method's attend reads it too (method.window)
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
            # (B, Hkv, Tk, hd): the cache holds Hkv heads (a windowed layer's Tk: its last window keys and the chunk)
            k, v = cache.append(self.index, k, v, k_pos.shape[0] - t)
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
    time reproduces the full forward. ``method`` is a built ``PositionMethod``, all layers' own
    (``build_model(cfg)`` builds ``cfg.method`` by name).
    """

    def __init__(self, method: PositionMethod):
        super().__init__()
        # The model's configuration is the method's: a recipe (methods/recipes.py) sets the layout
        # it needs, a sliding window on some layers; every other method keeps the one it was built with.
        cfg = method.cfg
        # Not drawn here: _init and the normal_ below draw it; build_model draws its first,
        # discarded values before the method, where they always were (seeded weights stay the same).
        self.tok = nn.utils.skip_init(nn.Embedding, cfg.vocab_size, cfg.d_model)
        self.method = adapt_hooks(method)  # hooks without state: adapted once, here
        self.cfg = cfg
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
        token-embedding scale (results with another scale are not comparable), the attention
        path the position method takes on ``device`` with compute ``dtype``, and the sliding window
        when there is one."""
        out = {
            "embed_scale": f"{self.cfg.token_scale:.6g}",
            "attn_backend": self.method.attn_backend(device, dtype),
            "compute_dtype": str(dtype).removeprefix("torch."),
        }
        if self.cfg.window is not None:  # results with another window are not comparable
            layers = self.cfg.window_layers
            out["window"] = f"{self.cfg.window}" + ("" if layers is None else f" on layers {sorted(layers)}")
        return out

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
        return KVCache(self.cfg.n_layers, capacity, [self.cfg.layer_window(i) for i in range(self.cfg.n_layers)])

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
        dtype = self.compute_dtype(idx.device)
        state = self.method.prepare(pos, k_pos, dtype)
        keys = (k_pos, state)  # what the layers attend to: every key so far
        window = self.cfg.window
        if cache is not None and window is not None and past > window:
            # windowed layers hold only their last `window` keys: their positions, and a state of
            # their own (a bias or a table is a function of the keys' positions)
            trimmed = k_pos[past - window :]
            windowed = (trimmed, self.method.prepare(pos, trimmed, dtype))
        else:
            windowed = keys
        x = self.drop(self.method.embed(self.tok(idx) * self.cfg.token_scale, pos, state))  # (B, T, D)
        for blk in self.blocks:
            layer_pos, layer_state = keys if blk.window is None else windowed
            x = blk(x, self.method, pos, layer_pos, cache, layer_state)
        if cache is not None:
            cache.pos, cache.default_pos = k_pos, default and cache.default_pos
        x = self.ln_f(x)
        return F.linear(x, self.tok.weight)  # tied output embedding, (B, T, V)


def build_model(cfg: ModelConfig) -> TransformerLM:
    """The model of ``cfg``, its method ``cfg.method`` built with ``cfg.method_options``.

    A (vocab_size, d_model) normal draw comes first: the token embedding's first initialization,
    which the model overwrites, was drawn before the method when the model built it by name, so a
    seed gives the weights it gave then (tests/core/test_model.py)."""
    torch.empty(cfg.vocab_size, cfg.d_model).normal_()
    return TransformerLM(registry.build(cfg))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy in float32; logits (B, T, V), targets (B, T)."""
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))
