"""Attention probabilities of any position method, read without changing it: during one forward the
method's ``attend`` is wrapped, and each layer's call is repeated with one-hot values. Attention is
linear in its values (o = P v), so values that are the unit vectors of keys c..c+hd-1 return
exactly the columns c..c+hd-1 of P, computed by the method's own path (its bias, rotation, forget
gate or kernel). The forward itself runs unchanged; only a probed forward pays the Tk / hd extra
calls per layer, so a timed or trained forward never does.

A modifier that changes P (ssmax, qknorm, sink: ``acts_on = "probabilities"``) is read through; one
that acts on the output after P v (the gate, a sigmoid of the values times P v, which one-hot values
would turn into a gate of unit vectors) is not: the probe calls the attend of the class beneath it
(``attention_attend``). A modifier that does not say where it acts, or one that changes P after an
output modifier, makes the probe refuse in one line.

``attention_stats`` turns P into the diagnostics (entropy and its ratio to log of the number of
keys, the first token's mass, mass by distance bucket). Guide: docs/long-context-measures.md.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import torch

from posbench.core.method import base_hook
from posbench.core.registry import modifier_acts_on


@contextmanager
def probed(model):
    """Within the block, every forward of ``model`` appends each layer's attention probabilities,
    (B, H, Tq, Tk) float32 on the CPU, to the yielded list, in layer order."""
    method, found = model.method, []
    own = method.__dict__.get("attend")  # an instance attribute adapt_hooks may have set
    inner = method.attend
    probe = attention_attend(method) or inner

    def attend(q, k, v, q_pos, k_pos, layer, state=None):
        out = inner(q, k, v, q_pos, k_pos, layer, state)
        found.append(probabilities(lambda values: probe(q, k, values, q_pos, k_pos, layer, state), v))
        return out

    method.attend = attend
    try:
        yield found
    finally:
        if own is None:
            del method.attend
        else:
            method.attend = own


def attention_attend(method):
    """``attend(q, k, v, q_pos, k_pos, layer, state)`` of the class beneath ``method``'s last
    modifiers that act on the output (``METHOD+sink+gate``: ``METHOD+sink``'s), whose output is P v;
    None when none does (the layer's own attend is). A ValueError of one line when a modifier does
    not say where it acts, or changes P after an output modifier."""
    mods = getattr(type(method), "modifiers", ())
    acts = [modifier_acts_on(m) for m in mods]
    for m, a in zip(mods, acts):
        if a is None:
            raise ValueError(
                f"attention diagnostics of {method.name!r}: modifier {m!r} does not say whether it changes the "
                "attention probabilities or the output after them; allowed: a modifier whose class sets acts_on "
                "to 'probabilities' or 'output' (docs/adding-a-method.md)"
            )
    kept = len(mods)
    while kept and acts[kept - 1] == "output":
        kept -= 1
    if "output" in acts[:kept]:
        before = mods[acts.index("output")]
        raise ValueError(
            f"attention diagnostics of {method.name!r}: modifier {mods[kept - 1]!r} changes the attention probabilities "
            f"after {before!r} acted on the output, so no attend returns P v; allowed: output modifiers last"
        )
    if kept == len(mods):
        return None
    beneath = next(c for c in type(method).__mro__ if getattr(c, "modifiers", ()) == mods[:kept])
    call = base_hook(beneath, "attend")
    return lambda q, k, v, q_pos, k_pos, layer, state: call(method, q, k, v, q_pos, k_pos, layer, state=state)


@torch.no_grad()
def probabilities(attend_values, v) -> torch.Tensor:
    """(B, H, Tq, Tk) float32: P of one layer, a block of hd columns per call of ``attend_values``
    (the layer's attend, its q, k, positions and state fixed) with one-hot values; v (B, Hv, Tk, hd)
    gives the values' layout (Hv: grouped key/value heads)."""
    b, hv, tk, hd = v.shape
    cols = []
    for c in range(0, tk, hd):
        basis = torch.zeros_like(v)
        n = min(hd, tk - c)
        basis[:, :, c + torch.arange(n, device=v.device), torch.arange(n, device=v.device)] = 1
        cols.append(attend_values(basis)[..., :n].float().cpu())  # (B, H, Tq, n)
    return torch.cat(cols, dim=-1)


def attention_stats(p: torch.Tensor, ranges: list[tuple[int, int]]) -> dict:
    """Per head, averaged over the batch and over queries 1..Tq-1 (query 0 has one key): ``entropy``
    (nats), ``entropy_ratio`` (entropy / log of the query's key count: 1 for uniform attention),
    ``first_mass`` (mass on key 0) and ``mass_by_distance`` (mass on distance 0, then on each
    inclusive (lo, hi) of ``ranges``). p (B, H, T, T): causal attention of T queries at T keys."""
    B, H, T, _ = p.shape
    q = p[:, :, 1:, :].double()  # (B, H, T-1, T)
    n_keys = torch.arange(2, T + 1, dtype=torch.float64)  # (T-1,) keys of query i: i + 1
    ent = -(q * torch.log(q.clamp_min(1e-30))).sum(-1)  # (B, H, T-1)
    dist = torch.arange(1, T)[:, None] - torch.arange(T)[None, :]  # (T-1, T) query minus key
    mass = {"0": (q * (dist == 0)).sum(-1)}
    for lo, hi in ranges:
        mass[f"{lo}-{hi}"] = (q * ((dist >= lo) & (dist <= hi))).sum(-1)
    mean = lambda x: x.mean(dim=(0, 2)).tolist()  # noqa: E731  (H,) over batch and queries
    return {
        "entropy": mean(ent),
        "entropy_ratio": mean(ent / torch.log(n_keys)),
        "first_mass": mean(q[..., 0]),
        "mass_by_distance": {name: mean(m) for name, m in mass.items()},
    }


def uniform_entropy(T: int) -> float:
    """Mean entropy of uniform causal attention over queries 1..T-1: the mean of log(i + 1)."""
    return sum(math.log(i + 1) for i in range(1, T)) / (T - 1)


def diagnose(model, tokens: torch.Tensor, ranges: list[tuple[int, int]]) -> list[dict]:
    """One probed forward of ``tokens`` (B, T): per layer, ``attention_stats`` of its probabilities
    with ``layer`` added."""
    with torch.no_grad(), probed(model) as found:
        model(tokens)
    return [{"layer": i, **attention_stats(p, ranges)} for i, p in enumerate(found)]
