"""The one contract every position method implements (``PositionMethod``), and its hooks' adapters.

Per forward the model calls ``state = prepare(q_pos, k_pos, dtype)`` once, ``embed(x, pos, state)``
once, then in every layer ``encode_qk(q, k, layer, state)`` (before the keys enter the KV cache)
and ``attend(q, k, v, q_pos, k_pos, layer, state)``; ``attend`` with ``state=None`` is the plain
reference. A hook may leave ``state`` out (``adapt_hooks``). Positions are explicit tensors, so
KV decoding and interpolation need no special case; causality is bottom-right aligned. Bias
methods subclass ``posbench.attention.bias.BiasMethod``. docs/adding-a-method.md has the details.
"""

from __future__ import annotations

import inspect
import types
from typing import Any, ClassVar

import torch
from torch import nn

# Re-exported: methods and plugins import these from here (the documented plugin API).
from posbench.core import causal
from posbench.core.config import ModelConfig  # defined without torch; methods import it from here
from posbench.core.masked import causal_attention, causal_mask  # noqa: F401
from posbench.core.outcome import Unavailable


class PositionMethod(nn.Module):
    """Base class of every position method. Subclasses set ``name`` and override what they need.

    Constructor: ``Method(cfg: ModelConfig, **options)``; an unknown option raises ``TypeError``.
    """

    name: ClassVar[str] = ""
    # True: attend takes k and v with Hkv <= H heads, (B, Hkv, Tk, hd), and query head h reads head
    # h // (H / Hkv) itself (the fused kernels); False: the model expands them to H heads first.
    grouped_kv: ClassVar[bool] = False
    # Why the method cannot take a sliding window (``cfg.window``), or None when its attend honours
    # ``self.window(layer)``: building it with a window then raises ``Unavailable`` with the reason.
    no_window: ClassVar[str | None] = None
    # True when attention may drop a per-query constant from the scores (ALiBi's -m i, FoX's F_i),
    # exact for softmax alone but not beside a score that does not move with them (METHOD+sink).
    softmax_shift: ClassVar[bool] = False

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        if cfg.window is not None and self.no_window:
            raise Unavailable(f"{self.name}: sliding-window attention (window {cfg.window}) is not supported: {self.no_window}")
        self._position_buffers: set[str] = set()

    def register_position_buffer(self, name: str, tensor: torch.Tensor, persistent: bool = False) -> None:
        """A buffer computed from positions (inv_freq, slopes, cos/sin tables), not saved unless
        ``persistent`` (a table drawn at random, as FoPE's coefficients, must be).

        It follows ``model.to(device)`` but never narrows with ``model.to(bfloat16)`` (a bfloat16
        ``inv_freq`` puts the rotary angle at position 16384 off by ~20 rad); wider casts are kept.
        """
        self.register_buffer(name, tensor, persistent=persistent)
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

    def window(self, layer: int) -> int | None:
        """The sliding window of ``layer`` (None: every earlier key); every ``attend`` honours it."""
        return self.cfg.layer_window(layer)

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
        """Causal attention of every layer (within the layer's window). Default: plain scaled
        dot-product attention by the faster path per length (``posbench.core.causal``), the same
        path nope's and rotary's take, so no method's table row differs by plumbing alone."""
        return causal.causal_sdpa(q, k, v, window=self.window(layer))

    @classmethod
    def unavailable(cls, device: torch.device | str, dtype: torch.dtype) -> str | None:
        """Why this method cannot run on ``device`` in ``dtype``, or None when it can."""
        return None

    def attn_backend(self, device: torch.device | str, dtype: torch.dtype) -> str:
        """The attention path training takes on ``device`` with compute ``dtype``, recorded in
        every row (``info.attn_backend``) so a reader sees which kernel a number came from."""
        return causal.backend(device, dtype)

    def extra_repr(self) -> str:
        return f"name={self.name!r}"


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


def base_hook(base: type, hook: str):
    """``fn(self, *args, state)`` calling ``base``'s ``hook``, with its ``state`` argument or
    without it (a hook may leave it out): how a modifier calls the method beneath it, and the
    attention probe the attention beneath a modifier that acts on the output."""
    fn = getattr(base, hook)
    params = inspect.signature(fn).parameters
    takes_state = "state" in params or len(params) > len(HOOK_ARGS[hook])  # self + every argument

    def call(self, *args, state=None):
        return fn(self, *args, state) if takes_state else fn(self, *args)

    return call


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
    """Make every hook of ``method`` callable the interface's way, once, when the model is built:
    a hook without ``state`` gets an instance attribute that drops it, an ``embed`` or ``attend``
    that requires it one that passes None; a hook that cannot work raises ``check_interface``'s
    one-line ``TypeError``."""
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

    The model hands every layer the same ``q_pos``/``k_pos`` tensors, so storage pointer, version,
    shape, dtype and device identify their values without reading them (no GPU sync); the cache
    holds the tensors it keys on, so their storage cannot be reused meanwhile."""

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
