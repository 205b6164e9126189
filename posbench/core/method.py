"""The one contract every position method implements, and the attention helpers they share.

A method is an ``nn.Module`` owned by the model (one instance, shared by all layers). Per model
forward, the model calls, in this order:

1. ``state = prepare(q_pos, k_pos, dtype)`` once, before anything else: whatever the method
   computes from the positions and its parameters for this forward (a bias, cos/sin tables, a
   draw of random positions). Every layer gets the same object, so a bias is built once per
   forward and its gradient flows back once, with no hidden state on the module.
2. ``embed(x, pos, state)`` once at the bottom of the network.
3. In every layer, ``encode_qk(q, k, layer, state)`` on this chunk's queries and keys (both at
   positions ``q_pos``) before the keys enter the KV cache: rotary rotates them here, so the cache
   holds rotated keys and a decode step rotates one new key, not the whole cache.
4. Then ``attend(q, k, v, q_pos, k_pos, layer, state)``, k and v holding every key so far.

``attend`` called with ``state=None`` (outside a model, in tests) takes raw q and k and does the
whole computation itself, so it is also the plain reference of the pipeline above.

A hook that ignores ``state`` may leave it out (``def embed(self, x, pos)``): the model adapts
it once when it is built (``adapt_hooks``); a signature that cannot work is one ``TypeError``
line naming the hook. Methods that only add a bias to the scores subclass ``BiasMethod``
(``posbench.core.bias``) and write ``bias(q_pos, k_pos, dtype)`` alone.

Positions are explicit tensors, so KV-cache decoding (``q_pos=[t]``, ``k_pos=[0..t]``) and
interpolation (positions scaled by ``L_train / L_eval``, hence float) need no special case in any
method. Causality is by index with bottom-right alignment: query row i (of Tq) sees key columns
j <= i + (Tk - Tq). That is the usual rule for a KV cache, and it lets the common case
(Tq == Tk, no bias) go to ``scaled_dot_product_attention(is_causal=True)``, PyTorch's fastest path.
Positions must increase along the sequence and ``q_pos`` must be the last Tq entries of ``k_pos``.
"""
from __future__ import annotations

import inspect
import math
import types
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from posbench.core.config import ModelConfig  # defined without torch; methods import it from here


class PositionMethod(nn.Module):
    """Base class of every position method. Subclasses set ``name`` and override what they need.

    Constructor: ``Method(cfg: ModelConfig, **options)``; an unknown option raises ``TypeError``.
    """

    name: ClassVar[str] = ""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self._position_buffers: set[str] = set()

    def register_position_buffer(self, name: str, tensor: torch.Tensor) -> None:
        """A non-persistent buffer computed from positions (inv_freq, slopes, cos/sin tables).

        It follows ``model.to(device)`` but never loses precision to ``model.to(bfloat16)`` (or
        ``.half()``): a bfloat16 ``inv_freq`` puts the rotary angle at position 16384 off by ~20
        rad. Casts to a wider float type (float64, for a reference) are kept. Compute it in
        float32 (or float64, then cast) from the positions.
        """
        self.register_buffer(name, tensor, persistent=False)
        self._position_buffers.add(name)

    def _apply(self, fn, recurse=True):
        kept = {name: self._buffers[name] for name in self._position_buffers if self._buffers.get(name) is not None}
        out = super()._apply(fn, recurse)
        for name, old in kept.items():
            new = self._buffers[name]
            if new.is_floating_point() and torch.finfo(new.dtype).bits < torch.finfo(old.dtype).bits:
                # The cast narrowed the table: keep the device move, undo the dtype (exactly, from
                # the kept original).
                self._buffers[name] = old.to(device=new.device)
        return out

    def prepare(self, q_pos: torch.Tensor, k_pos: torch.Tensor, dtype: torch.dtype) -> Any:
        """Once per model forward, before ``embed``: the state every layer's ``encode_qk`` and
        ``attend`` receive. q_pos (Tq,) this forward's positions, k_pos (Tk,) every key's (the KV
        cache's and then q_pos), dtype the compute dtype of q and k. Default: nothing."""
        return None

    def embed(self, x: torch.Tensor, pos: torch.Tensor, state: Any = None) -> torch.Tensor:
        """x: (B, T, D) token embeddings; pos: (T,) positions. Default: no position information."""
        return x

    def encode_qk(self, q: torch.Tensor, k: torch.Tensor, layer: int, state: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """q, k (B, H, Tq, hd): this forward's queries and keys, both at positions q_pos, before the
        keys are appended to the KV cache. Default: unchanged."""
        return q, k

    def attend(
        self,
        q: torch.Tensor,  # (B, H, Tq, hd), as encode_qk returned it (raw when state is None)
        k: torch.Tensor,  # (B, H, Tk, hd), as encode_qk returned each key (raw when state is None)
        v: torch.Tensor,  # (B, H, Tk, hd)
        q_pos: torch.Tensor,  # (Tq,)
        k_pos: torch.Tensor,  # (Tk,)
        layer: int,
        state: Any = None,  # what prepare returned; None: a call outside a model forward
    ) -> torch.Tensor:  # (B, H, Tq, hd)
        """Causal attention of every layer. Default: plain scaled dot-product attention."""
        return causal_attention(q, k, v)

    @classmethod
    def unavailable(cls, device: torch.device | str, dtype: torch.dtype) -> str | None:
        """Why this method cannot run on ``device`` in ``dtype``, or None when it can."""
        return None

    def attn_backend(self, device: torch.device | str, dtype: torch.dtype) -> str:
        """The attention path training takes on ``device`` with compute ``dtype``, recorded in
        every row (``info.attn_backend``) so a reader sees which kernel a number came from."""
        return "sdpa causal"

    def extra_repr(self) -> str:
        return f"name={self.name!r}"


# ---------------------------------------------------------------------------------------------
# Shared attention helpers


def causal_mask(tq: int, tk: int, device) -> torch.Tensor:
    """(Tq, Tk) bool, True where key j is visible to query i (bottom-right aligned)."""
    i = torch.arange(tq, device=device)[:, None] + (tk - tq)
    j = torch.arange(tk, device=device)[None, :]
    return j <= i


def causal_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None = None,
    masked: bool = False,
) -> torch.Tensor:
    """Causal SDPA; ``bias`` (H, Tq, Tk) or (1, H, Tq, Tk), added to the scores unscaled.

    Without a bias, square attention uses ``is_causal=True`` (flash kernels) and single-token
    decoding uses no mask at all. With a bias, the causal mask is folded into it as -inf (callers
    that cache their bias fold it once with ``mask_bias`` and pass ``masked=True``), and the bias
    keeps a batch dimension of 1 so PyTorch broadcasts it instead of materialising B copies.
    A bias whose dtype differs from q (float32 bias, half-precision compute) takes the explicit
    path in float32, because SDPA wants the mask in the query's dtype.
    """
    tq, tk = q.shape[-2], k.shape[-2]
    if bias is None:
        if tq == tk:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if tq == 1:
            return F.scaled_dot_product_attention(q, k, v)
        mask = causal_mask(tq, tk, q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    if not masked:
        bias = mask_bias(bias)
    if bias.dim() == 3:
        bias = bias[None]
    if bias.dtype == q.dtype:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    return explicit_attention(q, k, v, bias)


def mask_bias(bias: torch.Tensor) -> torch.Tensor:
    """``bias`` (..., Tq, Tk) with -inf where the key is in the future of the query."""
    tq, tk = bias.shape[-2], bias.shape[-1]
    if tq == 1:  # a single query (decoding) sees every key
        return bias
    return bias.masked_fill(~causal_mask(tq, tk, bias.device), float("-inf"))


def explicit_attention(q, k, v, bias: torch.Tensor) -> torch.Tensor:
    """Softmax(q k^T / sqrt(d) + bias) v with scores, bias and softmax in float32.

    ``bias`` must already hold -inf where attention is not allowed.
    """
    scale = 1.0 / math.sqrt(q.shape[-1])
    if q.dtype == torch.float32 and bias.dtype == torch.float32:
        # Scaling q (Tq x hd products) instead of the scores (Tq x Tk) is the same product with
        # one (B, H, Tq, Tk) pass fewer, forward and backward; the bias is added in place, as
        # matmul's backward needs its inputs, not its output.
        scores = torch.matmul(q * scale, k.transpose(-2, -1)).add_(bias)
    else:
        # Half-precision q, k: the product itself is taken in float32 (rounding q.k to bfloat16
        # first would lose ~3 significant digits before the float32 bias is added).
        scores = torch.matmul(q.float() * scale, k.float().transpose(-2, -1)).add_(bias.float())
    probs = torch.softmax(scores, dim=-1).to(v.dtype)
    return torch.matmul(probs, v)


def causal_explicit_attention(q, k, v, bias: torch.Tensor) -> torch.Tensor:
    """``explicit_attention`` for a bias that already holds -inf at least wherever the key is in
    the future of the query (``mask_bias``), computing only the keys each query may see.

    The query rows are cut into up to 4 blocks of at least 64 rows; a block ending at row r1
    sees the keys before r1 + Tk - Tq only, so the scores, softmax and their gradients skip most
    of the masked upper triangle (3/8 of the square with 4 blocks). The skipped entries would
    have had probability exactly 0: the result is the same computation. Smaller (B, H, rows, keys)
    blocks also stay in cache better (on a CPU, 2 to 4 blocks beat one and 8 for T = 128..512).
    """
    tq, tk = q.shape[-2], k.shape[-2]
    n_blocks = min(4, tq // 64)
    if n_blocks < 2:
        return explicit_attention(q, k, v, bias)
    rows = -(-tq // n_blocks)
    outs, end = [], 0
    for qb, bb in zip(q.split(rows, dim=-2), bias.split(rows, dim=-2)):
        end += qb.shape[-2]
        keys = end + tk - tq
        outs.append(explicit_attention(qb, k.narrow(-2, 0, keys), v.narrow(-2, 0, keys), bb.narrow(-1, 0, keys)))
    return torch.cat(outs, dim=-2)


def biased_attention(q, k, v, bias: torch.Tensor) -> torch.Tensor:
    """Causal attention with a bias (H, Tq, Tk) that already holds -inf on future keys.

    A bias that needs a gradient (learned: t5_bias, kerple_log, fire) sends CPU SDPA to its math
    path; on a CPU in float32 the explicit computation is the same arithmetic without that path's
    extra passes, and it skips the key blocks entirely in the future."""
    if bias.requires_grad and q.dtype == torch.float32 and q.device.type == "cpu":
        return causal_explicit_attention(q, k, v, bias)
    return causal_attention(q, k, v, bias, masked=True)


# ---------------------------------------------------------------------------------------------
# Hook signatures: a hook that ignores ``state`` may leave it out


# The positional arguments of each hook after ``self``. The last of embed's, encode_qk's and
# attend's is ``state``, which a hook may leave out; prepare takes all three.
HOOK_ARGS = {
    "embed": ("x", "pos", "state"),
    "encode_qk": ("q", "k", "layer", "state"),
    "attend": ("q", "k", "v", "q_pos", "k_pos", "layer", "state"),
    "prepare": ("q_pos", "k_pos", "dtype"),
}


def _accepts(fn, n: int) -> bool:
    """Whether ``fn(self, a1, ..., an)`` binds: n positional arguments, no required keyword."""
    params = list(inspect.signature(fn).parameters.values())[1:]  # without self
    if any(p.kind is p.KEYWORD_ONLY and p.default is p.empty for p in params):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = sum(p.default is p.empty for p in positional)
    return required <= n and (n <= len(positional) or any(p.kind is p.VAR_POSITIONAL for p in params))


def interface_problem(cls: type) -> str | None:
    """One line naming the first hook of method class ``cls`` the model cannot call, or None when
    every hook takes the interface's arguments, with or without ``state``."""
    for hook, names in HOOK_ARGS.items():
        fn = getattr(cls, hook)
        if _accepts(fn, len(names)) or (hook != "prepare" and _accepts(fn, len(names) - 1)):
            continue
        params = list(inspect.signature(fn).parameters.values())[1:]
        takes = ", ".join({p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name for p in params)
        allowed = f"{hook}(self, {', '.join(names)})"
        if hook != "prepare":
            allowed += f" or {hook}(self, {', '.join(names[:-1])})"
        name = getattr(cls, "name", "") or cls.__name__
        return f"method {name!r}: {hook} takes ({takes}); allowed: {allowed} (see posbench.core.method)"
    return None


def check_interface(cls: type) -> None:
    """Raise a one-line TypeError when a hook of method class ``cls`` cannot be called."""
    problem = interface_problem(cls)
    if problem:
        raise TypeError(problem)


def adapt_hooks(method: PositionMethod) -> PositionMethod:
    """Make every hook of ``method`` callable the interface's way, once (the model does this when
    it is built): a hook written without ``state`` (``def embed(self, x, pos)``) gets an instance
    attribute that drops it; an ``embed`` or ``attend`` that requires ``state`` gets one that
    passes None when a caller leaves it out (a call outside a model). Hooks that take the
    interface's arguments are left as they are (every built-in method's). A hook that cannot
    work raises the one-line ``TypeError`` of ``check_interface``."""
    cls = type(method)
    check_interface(cls)
    for hook, names in HOOK_ARGS.items():
        if hook == "prepare":
            continue
        fn, n = getattr(cls, hook), len(names)
        with_state, without = _accepts(fn, n), _accepts(fn, n - 1)
        if with_state and (without or hook == "encode_qk"):  # encode_qk is always given the state
            continue
        state_name = list(inspect.signature(fn).parameters)[n] if with_state else None  # [0] is self
        # A bound method: copy.deepcopy rebinds it to the copy (the kit's float64 reference).
        setattr(method, hook, types.MethodType(_adapter(hook, n, state_name), method))
    return method


def _adapter(hook: str, n: int, state_name: str | None):
    def call(self, *args, **kwargs):
        state = kwargs.pop("state", None)
        if len(args) == n:  # the model passes state positionally, last
            *args, state = args
        fn = getattr(type(self), hook)
        if state_name is None:
            return fn(self, *args, **kwargs)
        return fn(self, *args, **{state_name: state}, **kwargs)

    call.__name__ = hook
    return call


class PositionCache:
    """Memoises a function of the position tensors across the layers of one forward pass.

    The model hands the same ``q_pos``/``k_pos`` tensor objects to every layer (and reuses them
    across steps of the same length), so a key of storage pointer, version, shape, dtype and
    device identifies their values without reading them (no GPU synchronisation). The cache holds
    a reference to the tensors it keys on, so their storage cannot be freed and reused meanwhile.
    """

    def __init__(self, capacity: int = 4):
        self.capacity = capacity
        self._entries: dict[tuple, tuple[Any, tuple[torch.Tensor, ...]]] = {}

    @staticmethod
    def _key(tensors: tuple[torch.Tensor, ...], extra: tuple) -> tuple:
        parts = []
        for t in tensors:
            # Inference tensors (made under torch.inference_mode) keep no version counter.
            version = -1 if t.is_inference() else t._version
            parts.append((t.data_ptr(), version, tuple(t.shape), tuple(t.stride()), t.dtype, str(t.device)))
        return tuple(parts) + extra

    def get(self, tensors: tuple[torch.Tensor, ...], build, extra: tuple = ()):
        if torch.compiler.is_compiling():
            # Under torch.compile the graph holds the computation (and the compiler keeps what
            # is constant): keying on storage pointers and version counters would break the graph
            # at every layer, a cost the eager path does not pay (an unfair compiled comparison).
            return build()
        key = self._key(tensors, extra)
        hit = self._entries.get(key)
        if hit is not None:
            return hit[0]
        value = build()
        if len(self._entries) >= self.capacity:
            self._entries.pop(next(iter(self._entries)))
        self._entries[key] = (value, tensors)
        return value

    def clear(self) -> None:
        self._entries.clear()

