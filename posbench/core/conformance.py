"""Conformance kit: the checks every registered position method must pass.

``tests/core/test_conformance.py`` runs every check on every method the registry finds, so a plugin
dropped into ``methods/`` is tested the moment it exists. A check raises ``ConformanceError``
with a message that names the method and what went wrong; use ``run_all`` outside pytest, or
``python bench.py check METHOD``, which prints its outcome one line per check.

The kit's model has 3 heads of dimension 32: an odd head count catches slope and reshape
mistakes, and 32 is the smallest head dimension fused kernels must support.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator

import torch

from posbench.core import method as method_contract
from posbench.core import registry
from posbench.core.method import ModelConfig
from posbench.core.model import TransformerLM, build_model, lm_loss
from posbench.core.outcome import Unavailable

TRAIN_LEN = 16  # the "training length" of the kit; long checks run at 4x
BATCH = 2
# KV-cache decode vs full forward: float32 differs only by summation order; bfloat16 by rounding
# of every activation, so its bound is relative to the logits' scale.
DECODE_TOL = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 1e-2}


class ConformanceError(AssertionError):
    pass


def kit_config(method: str, **layout) -> ModelConfig:
    shape = {**dict(vocab_size=64, n_layers=2, d_model=96, n_heads=3, d_ff=128, dropout=0.0), **layout}
    return ModelConfig(method=method, **shape)


# Grouped-query attention in the kit: 4 query heads of dimension 32 sharing 2 key/value heads.
GQA = dict(d_model=128, n_heads=4, n_kv_heads=2)


def build(method: str, dtype=torch.float32, device="cpu", seed: int = 0, **layout) -> TransformerLM:
    torch.manual_seed(seed)
    model = build_model(kit_config(method, **layout))
    # Learned position parameters start at 0.02-scale noise; make them large enough that a check
    # comparing outputs would notice if the method's contribution were dropped.
    for p in model.method.parameters():
        with torch.no_grad():
            p.normal_(0, 0.5)
    return model.to(device=device, dtype=dtype).eval()


def tokens(length: int, device="cpu", seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 64, (BATCH, length), generator=g).to(device)


def _fail(method: str, what: str) -> None:
    raise ConformanceError(f"{method}: {what}")


def unavailable(method: str, dtype, device="cpu") -> str | None:
    return registry.get(method).unavailable(torch.device(device), dtype)


def interface_problem(method: str) -> str | None:
    """The one line naming the hook of ``method`` the model cannot call, or None (also for a
    method that does not load: the checks say why). Asked once, before the checks."""
    try:
        cls = registry.get(method)
    except Exception:
        return None
    return method_contract.interface_problem(cls)


# --- the checks ------------------------------------------------------------------------------


def check_shapes(method, dtype, device):
    """Logits are (B, T, V); attend returns q's shape for square and for Tq < Tk."""
    model = build(method, dtype, device)
    idx = tokens(TRAIN_LEN, device)
    with torch.no_grad():
        logits = model(idx)
    if logits.shape != (BATCH, TRAIN_LEN, 64):
        _fail(method, f"logits shape {tuple(logits.shape)}, expected {(BATCH, TRAIN_LEN, 64)}")
    hd = model.cfg.head_dim
    for tq, tk in ((7, 7), (3, 11), (1, 5)):
        q = torch.randn(BATCH, 3, tq, hd, dtype=dtype, device=device)
        k = torch.randn(BATCH, 3, tk, hd, dtype=dtype, device=device)
        pos = torch.arange(tk, device=device)
        with torch.no_grad():
            o = model.method.attend(q, k, k.clone(), pos[-tq:], pos, 0)
        if o.shape != q.shape:
            _fail(method, f"attend returned {tuple(o.shape)} for q {tuple(q.shape)} and k length {tk}")
        if o.dtype != dtype:
            _fail(method, f"attend returned dtype {o.dtype} for {dtype} inputs")


def check_causal(method, dtype, device):
    """Changing token t never changes the outputs before t."""
    model = build(method, dtype, device)
    idx = tokens(TRAIN_LEN, device)
    t = TRAIN_LEN // 2
    changed = idx.clone()
    changed[:, t:] = (changed[:, t:] + 1) % 64
    with torch.no_grad():
        a, b = model(idx), model(changed)
    if not torch.equal(a[:, :t], b[:, :t]):
        diff = (a[:, :t] - b[:, :t]).abs().max().item()
        _fail(method, f"outputs before position {t} changed by {diff:.3g} when tokens from {t} on changed")
    if torch.equal(a[:, t:], b[:, t:]):
        _fail(method, "outputs did not change at all when the tokens changed")


def check_gradients(method, dtype, device):
    """A training step's loss sends a finite, non-zero gradient to every trainable parameter."""
    model = build(method, dtype, device).train()
    idx = tokens(TRAIN_LEN + 1, device)
    loss = lm_loss(model(idx[:, :-1]), idx[:, 1:])
    loss.backward()
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.grad is None:
            _fail(method, f"no gradient reached parameter {name}")
        if not torch.isfinite(p.grad).all():
            _fail(method, f"non-finite gradient in parameter {name}")
        if not p.grad.abs().sum() > 0:
            _fail(method, f"gradient of parameter {name} is all zero")


def check_deterministic(method, dtype, device):
    """Two models built from the same seed are identical and give identical outputs."""
    a, b = build(method, dtype, device, seed=3), build(method, dtype, device, seed=3)
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values()):
        if not torch.equal(pa, pb):
            _fail(method, f"parameter {name} differs between two builds with the same seed")
    idx = tokens(TRAIN_LEN, device)
    with torch.no_grad():
        if not torch.equal(a(idx), b(idx)) or not torch.equal(a(idx), a(idx)):
            _fail(method, "the same input gave different outputs under the same seed")


def check_long(method, dtype, device):
    """Evaluation at 4x the training length runs and gives finite outputs everywhere."""
    model = build(method, dtype, device)
    idx = tokens(4 * TRAIN_LEN, device)
    with torch.no_grad():
        logits = model(idx)
    if logits.shape != (BATCH, 4 * TRAIN_LEN, 64) or not torch.isfinite(logits).all():
        _fail(method, f"evaluation at {4 * TRAIN_LEN} tokens gave a wrong shape or non-finite logits")
    # Interpolated (float) positions must work too: positions scaled by L_train / L_eval.
    pos = torch.arange(4 * TRAIN_LEN, device=device) * 0.25
    with torch.no_grad():
        interp = model(idx, pos=pos)
    if not torch.isfinite(interp).all():
        _fail(method, "evaluation with interpolated (float) positions gave non-finite logits")


def check_kv_decode(method, dtype, device):
    """Prefill then one token at a time with a KV cache equals the full forward."""
    model = build(method, dtype, device)
    idx = tokens(2 * TRAIN_LEN + 3, device)
    with torch.no_grad():
        full = model(idx).float()
    _decode_matches(method, model, idx, full, dtype, "")


def _decode_matches(method, model, idx, full, dtype, layout: str, prefill: int = 5):
    """Prefill ``prefill`` tokens of idx (B, T), then one at a time with a KV cache: the logits
    equal ``full`` (B, T, V) within the dtype's tolerance. Returns the cache."""
    with torch.no_grad():
        cache = model.new_cache()
        parts = [model(idx[:, :prefill], cache=cache)]
        parts += [model(idx[:, t : t + 1], cache=cache) for t in range(prefill, idx.shape[1])]
    inc = torch.cat(parts, dim=1).float()
    tol = DECODE_TOL.get(dtype, 1e-2) * max(1.0, full.abs().max().item())
    err = (full - inc).abs().max().item()
    if not err <= tol:
        _fail(method, f"{layout}KV-cache decode differs from the full forward by {err:.3g} (tolerance {tol:.3g})")
    return cache


def check_gqa(method, dtype, device):
    """Grouped-query attention (``n_kv_heads`` 2 of 4 heads): causal, the KV cache holds 2 heads,
    and decoding with it equals the full forward. A method that cannot take the layout raises
    ``Unavailable`` with its reason when built (reported as unavailable, never ignored)."""
    model = build(method, dtype, device, **GQA)
    length = 2 * TRAIN_LEN + 3
    idx = tokens(length, device)
    with torch.no_grad():
        full = model(idx).float()
        changed = idx.clone()
        changed[:, -1] = (changed[:, -1] + 1) % 64
        if not torch.equal(model(changed).float()[:, :-1], full[:, :-1]):
            _fail(method, "with grouped-query attention a later token changed earlier logits")
    cache = _decode_matches(method, model, idx, full, dtype, "with grouped-query attention ")
    heads = {k.shape[1] for k, _ in cache.layers()}
    if heads != {GQA["n_kv_heads"]}:
        _fail(method, f"with n_kv_heads {GQA['n_kv_heads']} the KV cache holds {sorted(heads)} heads")


# Sliding-window attention in the kit: each query sees its last 16 keys (itself included).
WINDOW = 16


def check_window(method, dtype, device):
    """Sliding-window attention (``window`` 16 on every layer) at 2 x 16 + 3 tokens: token 0
    changes no output beyond every layer's window (the window is honoured; within rounding, as a
    data-dependent bias may sum over it), each layer's KV cache holds its last 16 keys, and
    decoding with it equals the full forward. A method that cannot take a window raises
    ``Unavailable`` when built."""
    _windowed(method, dtype, device, dict(window=WINDOW), "with window 16", prefill=5)


def check_gqa_window(method, dtype, device):
    """``window`` 16 on layer 0 only, with grouped-query attention: the windowed layer's KV cache
    holds 16 keys, the global one every key, and decoding (after a prefill longer than the
    window) equals the full forward."""
    _windowed(
        method,
        dtype,
        device,
        dict(GQA, window=WINDOW, window_layers=[0]),
        "with window 16 on layer 0 and grouped-query attention",
        prefill=WINDOW + 4,
    )


def _windowed(method, dtype, device, layout: dict, what: str, prefill: int):
    model = build(method, dtype, device, **layout)
    length = 2 * WINDOW + 3
    idx = tokens(length, device)
    with torch.no_grad():
        full = model(idx).float()
        if "window_layers" not in layout:
            reach = model.cfg.n_layers * (WINDOW - 1)  # a token reaches window - 1 positions further per layer
            changed = idx.clone()
            changed[:, 0] = (changed[:, 0] + 1) % 64
            err = (model(changed).float()[:, reach + 1 :] - full[:, reach + 1 :]).abs().max().item()
            tol = DECODE_TOL.get(dtype, 1e-2) * max(1.0, full.abs().max().item())
            if not err <= tol:
                _fail(
                    method,
                    f"{what} token 0 changed the outputs from position {reach + 1} on by {err:.3g}, beyond "
                    f"every layer's window (tolerance {tol:.3g})",
                )
    cache = _decode_matches(method, model, idx, full, dtype, what + " ", prefill)
    held = [k.shape[2] for k, _ in cache.layers()]
    want = [WINDOW if model.cfg.layer_window(i) else length for i in range(model.cfg.n_layers)]
    if held != want:
        _fail(method, f"{what} the KV cache holds {held} keys per layer; expected {want}")


def check_prepared_attend(method, dtype, device):
    """The model's pipeline (``prepare`` once, ``encode_qk`` on each chunk's q and k, the keys
    kept as encoded, then ``attend`` with the state) equals ``attend`` on raw q and k without a
    state, for a square chunk and for a chunk after cached keys (Tq < Tk)."""
    m = build(method, dtype, device).method
    hd, g = kit_config(method).head_dim, torch.Generator().manual_seed(13)
    for past, tq in ((0, 9), (11, 5), (20, 1)):
        tk = past + tq
        q, k, v = (torch.randn(BATCH, 3, n, hd, generator=g).to(device=device, dtype=dtype) for n in (tq, tk, tk))
        k_pos = torch.arange(tk, device=device)
        q_pos = k_pos[past:]
        with torch.no_grad():
            want = m.attend(q, k, v, q_pos, k_pos, 1)
            keys = []
            if past:  # the earlier chunk, as the KV cache holds it
                state = m.prepare(k_pos[:past], k_pos[:past], dtype)
                keys.append(m.encode_qk(q.new_zeros(BATCH, 3, past, hd), k[:, :, :past], 1, state)[1])
            state = m.prepare(q_pos, k_pos, dtype)
            q_enc, k_new = m.encode_qk(q, k[:, :, past:], 1, state)
            got = m.attend(q_enc, torch.cat(keys + [k_new], dim=2), v, q_pos, k_pos, 1, state)
        err = (got.double() - want.double()).abs().max().item()
        tol = DECODE_TOL.get(dtype, 1e-2) * max(1.0, want.abs().max().item())
        if not err <= tol:
            _fail(
                method,
                f"prepare/encode_qk/attend with Tq={tq}, Tk={tk} differ from attend on raw q, k "
                f"(state None) by {err:.3g} (tolerance {tol:.3g})",
            )


def check_state_dict(method, dtype, device):
    """state_dict -> bytes -> a fresh model (other seed) reproduces the outputs exactly."""
    a = build(method, dtype, device, seed=5)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = build(method, dtype, device, seed=6)
    b.load_state_dict(torch.load(buf))
    idx = tokens(TRAIN_LEN, device)
    with torch.no_grad():
        if not torch.equal(a(idx), b(idx)):
            _fail(method, "a model restored from state_dict gives different outputs")


# Positions near 16384 (the wt103 model's longest evaluation): a method cast to bfloat16 must
# still compute its position-dependent output from float32 tables. Relative to the output's
# scale, a correct method differs from its float64 twin by the compute dtype's rounding only
# (float32: an angle near 16384 rad is itself rounded to 2^-9 rad, so up to ~1e-3; bfloat16: the
# activations' rounding, up to ~1e-2); a table rounded to bfloat16 puts a rotation angle at 16384
# off by tens of radians and the output off by O(1). The README states these tolerances.
FAR_POSITION = 16384
FAR_TOL = {torch.float32: 2e-3, torch.bfloat16: 3e-2, torch.float16: 1e-2}


def check_far_positions(method, dtype, device):
    """After ``model.to(dtype)``, embed and attend at positions near 16384 match a float64 copy."""
    import copy

    base = build(method, torch.float32, device, seed=7)
    ref64 = copy.deepcopy(base).to(torch.float64).method
    ref32 = copy.deepcopy(base).method
    model = base.to(dtype)
    for name, buf in model.method.named_buffers():
        if name in model.method._position_buffers and buf.dtype != torch.float32:
            _fail(method, f"position buffer {name} became {buf.dtype} after model.to({dtype})")
    m = model.method
    tk, tq, hd = 80, 16, model.cfg.head_dim
    k_pos = torch.arange(FAR_POSITION - tk + tq, FAR_POSITION + tq, device=device)  # (Tk,), ends past 16384
    q_pos = k_pos[-tq:]
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(1, 3, n, hd, generator=g).to(device=device, dtype=dtype) for n in (tq, tk, tk))
    x = (torch.randn(1, tk, model.cfg.d_model, generator=g) * 0.1).to(device=device, dtype=dtype)

    def reference(fn_name, *tensors):
        # float64 where the method computes in float64; a method whose kernels take no float64
        # (Triton) is compared with its own float32 copy, whose tables are float32 too.
        try:
            return getattr(ref64, fn_name)(*(t.double() for t in tensors), *extra[fn_name])
        except (TypeError, ValueError, RuntimeError, NotImplementedError):
            return getattr(ref32, fn_name)(*(t.float() for t in tensors), *extra[fn_name]).double()

    extra = {"embed": (k_pos,), "attend": (q_pos, k_pos, 0)}
    with torch.no_grad():
        pairs = {
            "embed": (m.embed(x, k_pos), reference("embed", x)),
            "attend": (m.attend(q, k, v, q_pos, k_pos, 0), reference("attend", q, k, v)),
        }
    for what, (out, want) in pairs.items():
        err = (out.double() - want).abs().max().item() / max(1.0, want.abs().max().item())
        tol = FAR_TOL.get(dtype, 3e-2)
        if not err <= tol:
            _fail(
                method,
                f"{what} at positions near {FAR_POSITION} in {str(dtype).removeprefix('torch.')} differs "
                f"from float64 by {err:.3g} of its scale (tolerance {tol:g}): a position table lost precision?",
            )


CHECKS: dict[str, Callable] = {
    "shapes": check_shapes,
    "causal": check_causal,
    "gradients": check_gradients,
    "deterministic": check_deterministic,
    "long": check_long,
    "kv_decode": check_kv_decode,
    "gqa": check_gqa,
    "window": check_window,
    "gqa_window": check_gqa_window,
    "prepared_attend": check_prepared_attend,
    "state_dict": check_state_dict,
    "far_positions": check_far_positions,
}
DTYPES = (torch.float32, torch.bfloat16)


UNAVAILABLE = "unavailable: "  # how run_all marks a check the method cannot run here
INTERFACE = "interface"  # run_all's only key when the method's hooks cannot be called


def run_all(method: str, device="cpu", dtypes=DTYPES) -> dict[str, str | None]:
    """Every check in every dtype, never raising: ``{"causal/float32": outcome}``, the outcome
    None (passed), ``"unavailable: <reason>"`` or the failure in one line (whatever the plugin
    raises is ``"<ExcType>: <message>"``). A hook the model cannot call is the only entry,
    ``{"interface": "<the line>"}``."""
    return dict(run_each(method, device, dtypes))


def run_each(method: str, device="cpu", dtypes=DTYPES) -> Iterator[tuple[str, str | None]]:
    """``run_all``'s (key, outcome) pairs, each as soon as its check is done (a caller under a
    time limit, such as ``make gpu-check``, shows what passed before it ran out)."""
    problem = interface_problem(method)
    if problem:
        yield INTERFACE, f"{method}: {problem}"
        return
    for dtype in dtypes:
        dname = str(dtype).removeprefix("torch.")
        try:
            reason = unavailable(method, dtype, device)
            broken = None
        except Exception as exc:  # e.g. the method file does not import
            reason, broken = None, _one_line(exc)
        for name, fn in CHECKS.items():
            key = f"{name}/{dname}"
            if broken:
                yield key, broken
            elif reason:
                yield key, UNAVAILABLE + reason
            else:
                yield key, _outcome(fn, method, dtype, device)


def _outcome(fn: Callable, method: str, dtype, device) -> str | None:
    try:
        fn(method, dtype, device)
        return None
    except ConformanceError as exc:
        return str(exc)
    except Unavailable as exc:  # a layout the method declines, with its reason
        return UNAVAILABLE + str(exc)
    except Exception as exc:  # a plugin that raises fails the check; the other checks still run
        return f"{method}: {_one_line(exc)}"


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
