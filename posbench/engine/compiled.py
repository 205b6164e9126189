"""``compile: true``: a model through ``torch.compile``, its compile time measured apart.

The timing tasks compile the model (``compile_module``), time its first calls on their own until
one compiles nothing new (``settle``; a compiler failure is an ``Unavailable`` row), and run
warm-up and windows under ``no_recompile``. Why and what rows record: docs/measuring-speed.md.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from posbench.core.outcome import Unavailable

REASON_CHARS = 300  # a compiler's reason is cut to this many characters (the traceback has the rest)


def mode_for(device: str, decode: bool) -> str | None:
    """The ``torch.compile`` mode: CUDA graphs for decoding on CUDA, inductor's default otherwise."""
    return "reduce-overhead" if decode and device == "cuda" else None


def describe(mode: str | None, enabled: bool = True) -> str:
    """The row's ``info.compile``: how the timed steps ran."""
    if not enabled:
        return "eager (no torch.compile)"
    return (
        f"torch.compile (inductor, mode {mode or 'default'}); the first call (compilation) is timed apart "
        "and excluded from warm-up and windows"
    )


# Compiled variants of one frame: every method's model in a paired group (cpu-all: about 20), each
# with an evaluation and a training graph, and each of those compiled again once its lazy tables exist.
RECOMPILE_LIMIT = 256


def compile_module(module, mode: str | None = None):
    """``torch.compile(module)``, lazy: it compiles at the first call."""
    # Every model's forward is one code object, so a paired group's methods share one frame's
    # cache: past dynamo's default limit of 8 the ninth variant would run eagerly without a word.
    # The limit is raised, and hitting it made an error, so a compiled row never timed eager code.
    import torch
    import torch._dynamo.config as dynamo_config

    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, RECOMPILE_LIMIT)
    dynamo_config.accumulated_recompile_limit = max(dynamo_config.accumulated_recompile_limit, 4 * RECOMPILE_LIMIT)
    dynamo_config.fail_on_recompile_limit_hit = True
    return torch.compile(module, mode=mode)


def reason(exc: BaseException) -> str:
    """The compiler's reason in one line: the first line of ``exc`` and, in brackets, that of the
    root of its chain (dynamo wraps the real error); cut to ``REASON_CHARS``."""

    def first(e: BaseException) -> str:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__

    root, seen = exc, {id(exc)}
    while True:
        nxt = getattr(root, "inner_exception", None) or root.__cause__ or root.__context__
        if not isinstance(nxt, BaseException) or id(nxt) in seen:
            break
        root = nxt
        seen.add(id(root))
    text = first(exc) if root is exc else f"{first(exc)} ({first(root)})"
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 3] + "..."


def is_compiler_error(exc: BaseException) -> bool:
    """Whether ``exc`` came from the compiler (dynamo, AOTAutograd or a backend), not the model."""
    from torch._dynamo.exc import TorchDynamoException

    return isinstance(exc, TorchDynamoException)


def first_call(fn: Callable[[], Any], what: str, clock: Callable[[Callable[[], Any]], float] | None = None) -> float:
    """Seconds of ``fn()``, the call that compiles, timed by ``clock(fn)`` (default perf_counter);
    a compiler failure raises ``Unavailable("torch.compile failed for <what>: <reason>")``."""
    try:
        if clock is not None:
            return clock(fn)
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    except Exception as exc:
        if not is_compiler_error(exc):
            raise
        raise Unavailable(f"torch.compile failed for {what}: {reason(exc)}") from exc


def compiles() -> int:
    """Graphs dynamo has compiled in this process so far."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


SETTLE_CALLS = 4  # first calls at most until one compiles nothing new


def settle(fn: Callable[[], Any], what: str, clock: Callable[[Callable[[], Any]], float] | None = None) -> tuple[float, int]:
    """``first_call`` until a call compiles no new graph, at most ``SETTLE_CALLS``: (seconds, calls)."""
    # One call is not enough: the first fills lazily built tables (positions' arange, a cached
    # bias) and the graph guarded on them empty compiles again; a decode step recompiles once
    # with a dynamic cache length.
    total, calls = 0.0, 0
    while calls < SETTLE_CALLS:
        before = compiles()
        total += first_call(fn, what, clock)
        calls += 1
        if compiles() == before:
            break
    return total, calls


def no_recompile(on: bool = True):
    """A context where a compiled function that would recompile raises instead (nothing when
    ``on`` is False, or on a torch without ``set_stance``)."""
    import torch

    set_stance = getattr(torch.compiler, "set_stance", None)
    if not on or set_stance is None:
        return contextlib.nullcontext()
    return set_stance("fail_on_recompile")


def graph_breaks() -> int:
    """Graph breaks dynamo has counted in this process so far (take a difference around a compile)."""
    from torch._dynamo.utils import counters

    return int(sum(counters["graph_break"].values()))
