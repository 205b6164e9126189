"""Greedy decoding with a KV cache: the steps the decode task times (``run``)
and that tests/tasks/test_decode_run.py checks against the full forward."""

from __future__ import annotations

import contextlib

import torch

from posbench.core.model import KVCache, TransformerLM


@contextlib.contextmanager
def last_position_only(model: TransformerLM):
    """Within the block, ``model(...)`` returns (B, 1, V) logits of the last position only.

    ``TransformerLM.forward`` has no switch for it, so a forward hook on the final LayerNorm keeps
    the last position and the tied output projection runs on that row alone.
    """
    handle = model.ln_f.register_forward_hook(lambda module, inputs, out: out[:, -1:])
    try:
        yield
    finally:
        handle.remove()


def prefill(model: TransformerLM, prompt: torch.Tensor, capacity: int = 0) -> tuple[KVCache, torch.Tensor]:
    """A new cache holding ``prompt`` (B, C); returns it and the (B, V) logits of its last position.
    ``capacity``: slots to allocate (prompt + tokens to come), so decoding never grows the cache."""
    cache = model.new_cache(capacity)
    logits = model(prompt, cache=cache)  # (B, C or 1, V)
    return cache, logits[:, -1]


def decode_step(model: TransformerLM, cache: KVCache, token: torch.Tensor) -> torch.Tensor:
    """Feed ``token`` (B, 1) at the next position; the cache grows by one; returns (B, V) logits."""
    return model(token, cache=cache)[:, -1]


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """(B, V) -> (B, 1) token ids: the argmax, kept on the device (no host synchronisation)."""
    return logits.argmax(dim=-1, keepdim=True)


def generate(model: TransformerLM, prompt: torch.Tensor, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decoding of ``steps`` tokens after ``prompt`` (B, C).

    Returns the tokens (B, steps) and the logits (B, steps, V) each was chosen from: the first
    from the prefill, the others from decode steps whose input is the token before them.
    """
    cache, logits = prefill(model, prompt, capacity=prompt.shape[1] + steps)
    tokens, all_logits = [greedy(logits)], [logits]
    for _ in range(steps - 1):
        logits = decode_step(model, cache, tokens[-1])
        tokens.append(greedy(logits))
        all_logits.append(logits)
    return torch.cat(tokens, dim=1), torch.stack(all_logits, dim=1)


def kv_cache_bytes(cache: KVCache) -> int:
    """Bytes of the keys and values held for every layer (spare capacity and the position tensor
    are not counted)."""
    return cache.nbytes()
