"""Every method that runs on a CPU computes exactly what it computed when the reference was written:
logits and the gradient of every parameter, float32 and bfloat16, for training at a length that
attends by blocks (520 queries) and at one that attends with the masked bias (37), evaluation,
KV-cache decoding (a prefill, then single tokens) and interpolated (float) positions.

Where the machine matches the fingerprint stored with the reference (torch version, CPU model and
flags, torch's CPU flash op with a mask), every (method, dtype, mode) must match its SHA-256 bit
for bit; elsewhere its float64 sums and sampled entries must agree within a tight tolerance of
each tensor's scale (``fallback_problems``). Subnormals are not flushed here (the reference was
written so); flushing them changes none of these bits on the reference's CPU.

Regenerate the reference only at a commit where behaviour is meant to change (and say so there):
    PYTHONPATH=. python tests/core/test_bit_identity.py
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import platform
import sys
from pathlib import Path

import pytest
import torch

from posbench.attention import blocked
from posbench.core import registry
from posbench.core.method import ModelConfig
from posbench.core.model import TransformerLM, build_model, lm_loss
from posbench.triton_kernels import FusedKernelMethod
from tests.helpers.bias_plugins import PLUGINS

REFERENCE = Path(__file__).with_name("bit_identity.json")
LONG, SHORT = 520, 37  # >= 512 queries: the blocked CPU plans; fewer: the masked bias
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
RTOL = {"float32": 1e-5, "bfloat16": 2e-2}  # the summaries' tolerance on another machine
# A method parameter's gradient, judged against the scale of the method's gradients: a sum over
# B x H x L x L scores that cancels, to nothing at all for FIRE's b2 (a per-head constant shifts no
# softmax), keeps few digits of its own. On an AMD EPYC that reproduces every reference bit, run
# with torch's AVX2 or scalar kernels instead of AVX-512 (ATEN_CPU_CAPABILITY, DNNL_MAX_CPU_ISA,
# MKL_ENABLE_INSTRUCTIONS), the largest change was 8e-5 (AVX2) and 7e-4 (scalar) of that scale in
# float32 (FOX's gate bias), 3e-4 and 5e-3 in bfloat16 (FIRE's c and b2); FIRE's b1 gradient 10%
# off moves its sum of magnitudes by 5x this tolerance (the planted changes below).
PARAM_RTOL = {"float32": 2e-3, "bfloat16": 2e-2}
SAMPLES = 8  # entries of the logits and of the gradients kept per (method, dtype, mode)


def fingerprint() -> dict:
    """What must be equal for bit-identical floats: torch, the CPU and its flash op with a mask."""
    cpu = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "flags") and key.strip() not in cpu:
                cpu[key.strip()] = value.strip()
    try:
        op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
        flash = "attn_mask" in str(op.default._schema)
    except (AttributeError, RuntimeError):
        flash = False
    return {
        "torch": torch.__version__,
        "machine": platform.machine(),
        "cpu": cpu.get("model name", platform.processor()),
        "flags": hashlib.sha256(cpu.get("flags", "").encode()).hexdigest()[:16],
        "capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_flash_with_mask": flash,
    }


def methods() -> list[str]:
    """Every registered method but the fused Triton ones (CUDA kernels), and the two plugins."""
    names = [n for n in registry.names() if not issubclass(registry.get(n), FusedKernelMethod)]
    return names + list(PLUGINS)


def build(name: str) -> TransformerLM:
    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=64, n_layers=2, d_model=32, n_heads=4, d_ff=64, method=name))
    with torch.no_grad():  # position parameters large enough that a dropped bias would show
        for p in model.method.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return model


def tokens(b: int, t: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 64, (b, t), generator=torch.Generator().manual_seed(seed))


def train(model, dtype, length: int, batch: int, pos=None) -> dict[str, torch.Tensor]:
    model.train()
    idx = tokens(batch, length + 1, length)
    torch.manual_seed(1)  # a method that draws positions in training (randomized)
    with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
        logits = model(idx[:, :-1], pos)
        loss = lm_loss(logits, idx[:, 1:])
    loss.backward()
    out = {"logits": logits.detach()}
    out.update({f"grad/{n}": p.grad for n, p in sorted(model.named_parameters()) if p.grad is not None})
    return out


def evaluate(model, dtype, length: int, pos=None) -> dict[str, torch.Tensor]:
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
        return {"logits": model(tokens(2, length, length + 7), pos)}


def decode(model, dtype, prefill: int, steps: int = 3) -> dict[str, torch.Tensor]:
    """A prefill of ``prefill`` tokens, then ``steps`` single tokens, in ``dtype`` weights (serving)."""
    model.eval().to(dtype)
    idx = tokens(1, prefill + steps, prefill + 11)
    cache = model.new_cache()
    with torch.no_grad():
        out = [model(idx[:, :prefill], cache=cache)]
        out += [model(idx[:, t : t + 1], cache=cache) for t in range(prefill, prefill + steps)]
    return {"logits": torch.cat(out, 1)}


MODES = {
    "train_long": lambda m, d: train(m, d, LONG, 2),
    "train_short": lambda m, d: train(m, d, SHORT, 2),
    "eval_long": lambda m, d: evaluate(m, d, LONG),
    "eval_short": lambda m, d: evaluate(m, d, SHORT),
    "decode_long": lambda m, d: decode(m, d, LONG),
    "decode_short": lambda m, d: decode(m, d, SHORT),
    "interp_train": lambda m, d: train(m, d, LONG, 1, torch.arange(LONG) * 0.5),
    "interp_eval": lambda m, d: evaluate(m, d, SHORT, torch.arange(SHORT) * 0.25),
}


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.detach().double().reshape(-1)


def record(out: dict[str, torch.Tensor]) -> dict:
    """The SHA-256 of every tensor's bytes (names, shapes, dtypes included) and robust summaries:
    per tensor its float64 sum and sum of magnitudes, and entries sampled from the logits and from
    all gradients end to end."""
    h = hashlib.sha256()
    for name in sorted(out):
        t = out[name].detach().contiguous().cpu()
        h.update(f"{name}{tuple(t.shape)}{t.dtype}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes())
    grads = [n for n in sorted(out) if n.startswith("grad/")]
    # Summed: the logits, all gradients end to end, and each of the method's own parameters.
    parts = {"logits": _flat(out["logits"])}
    if grads:
        parts["grads"] = torch.cat([_flat(out[n]) for n in grads])
    parts.update({n: _flat(out[n]) for n in grads if n.startswith("grad/method.")})
    sums = {k: [float(f.sum()), float(f.abs().sum()), f.numel()] for k, f in parts.items()}
    samples = {}
    for key in ("logits", "grads")[: len(parts)]:
        at = torch.linspace(0, parts[key].numel() - 1, SAMPLES).long()
        samples[key] = [float(x) for x in parts[key][at]]
    return {"sha256": h.hexdigest(), "sums": sums, "samples": samples}


def measure(name: str, dtype: str, mode: str) -> dict:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one summation order
    torch.set_flush_denormal(False)  # as the reference was written (tests/conftest.py restores it)
    try:
        return record(MODES[mode](build(name), DTYPES[dtype]))
    finally:
        torch.set_num_threads(threads)


@contextlib.contextmanager
def plugins_registered():
    added = [registry.register(cls) for cls in PLUGINS.values() if cls.name not in registry.names()]
    try:
        yield
    finally:
        for cls in added:
            registry.unregister(cls.name)


def _reference() -> dict:
    return json.loads(REFERENCE.read_text())


CASES = [(n, d, m) for n in methods() for d in DTYPES for m in MODES] if REFERENCE.is_file() else []


def _close(got: float, want: float, scale: float, rtol: float) -> bool:
    return abs(got - want) <= rtol * (abs(want) + scale) + 1e-30


def fallback_problems(got: dict, want: dict, dtype: str) -> list:
    """What differs beyond rounding between two ``record``s of one case on different machines
    (empty: the same numbers). The logits and all gradients end to end: each sum against the sum
    of magnitudes, each sampled entry against the mean magnitude. A method parameter's gradient:
    its sum and sum of magnitudes against ``PARAM_RTOL`` of its size times the largest mean
    magnitude among the method's parameters' gradients (its own may be rounding noise)."""
    rtol, problems = RTOL[dtype], []
    if set(got["sums"]) != set(want["sums"]):
        return [("tensors", sorted(got["sums"]), sorted(want["sums"]))]
    params = {k: v for k, v in want["sums"].items() if k.startswith("grad/method.")}
    group = max((a / n for _s, a, n in params.values()), default=0.0)  # mean |element| of the largest
    for key, (s, a, n) in want["sums"].items():
        gs, ga, gn = got["sums"][key]
        if key in params:
            tol = PARAM_RTOL[dtype] * n * group
            ok = abs(gs - s) <= tol and abs(ga - a) <= tol
        else:
            ok = _close(gs, s, a, rtol) and _close(ga, a, 0.0, rtol)
        if gn != n or not ok:
            problems.append((key, got["sums"][key], want["sums"][key]))
    for key, values in want["samples"].items():
        _, total, n = want["sums"][key]
        scale = total / n  # the mean magnitude
        if not all(_close(g, w, scale, 10 * rtol) for g, w in zip(got["samples"][key], values)):
            problems.append((key, got["samples"][key], values))
    return problems


def test_the_reference_covers_every_cpu_method():
    with plugins_registered():
        want = {f"{n}/{d}/{m}" for n in methods() for d in DTYPES for m in MODES}
    assert set(_reference()["cases"]) == want


@pytest.mark.parametrize("name, dtype, mode", CASES)
def test_outputs_and_gradients_are_bit_identical(name, dtype, mode):
    ref = _reference()
    want = ref["cases"][f"{name}/{dtype}/{mode}"]
    with plugins_registered():
        got = measure(name, dtype, mode)
    if ref["fingerprint"] == fingerprint():
        assert got["sha256"] == want["sha256"], f"{name} {dtype} {mode}: the bytes changed"
        return
    # Another machine or torch: the same numbers up to rounding.
    assert not fallback_problems(got, want, dtype), f"{name} {dtype} {mode}"


def _slopes_off_by_3_percent(monkeypatch):
    alibi = sys.modules[registry.get("alibi").__module__]
    real = alibi.slopes_tensor
    monkeypatch.setattr(alibi, "slopes_tensor", lambda n_heads: real(n_heads) * 1.03)


def _rows_not_reversed(monkeypatch):
    """The blocked plans' tiles assume each block's rows reversed: a plan that forgot it."""
    monkeypatch.setattr(blocked, "block_reversal", lambda tq, rows, device: torch.arange(tq, device=device))


def _b1_gradient_off_by_a_tenth(monkeypatch):
    """A backward that loses a tenth of one parameter's gradient (FIRE's b1 of 6 parameters)."""

    real = build

    def build_hooked(name):
        model = real(name)
        model.method.b1.register_hook(lambda g: g * 0.9)
        return model

    monkeypatch.setattr(sys.modules[__name__], "build", build_hooked)


PLANTED = {
    "alibi slopes 3% off": (_slopes_off_by_3_percent, "alibi", "float32", "train_long"),
    "blocked rows not reversed": (_rows_not_reversed, "t5_bias", "bfloat16", "train_long"),
    "fire's b1 gradient 10% off": (_b1_gradient_off_by_a_tenth, "fire", "float32", "train_long"),
}


@pytest.mark.parametrize("plant", PLANTED)
def test_the_fallback_still_catches_a_change_that_moves_values(plant, monkeypatch):
    """The tolerance that lets another CPU pass is no blindfold: on this one, compared as another
    CPU is, the case passes unchanged and fails with a planted change. (A block size alone only
    reorders sums: 1e-10 of the gradients' scale, below what CPUs differ by; the SHA-256 catches it.)"""
    apply, name, dtype, mode = PLANTED[plant]
    want = _reference()["cases"][f"{name}/{dtype}/{mode}"]
    assert not fallback_problems(measure(name, dtype, mode), want, dtype)
    apply(monkeypatch)
    assert fallback_problems(measure(name, dtype, mode), want, dtype)


def write_reference() -> None:
    with plugins_registered():
        cases = {f"{n}/{d}/{m}": measure(n, d, m) for n in methods() for d in DTYPES for m in MODES}
    lines = ",\n".join(f" {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(cases.items()))
    REFERENCE.write_text(f'{{"fingerprint": {json.dumps(fingerprint(), sort_keys=True)},\n"cases": {{\n{lines}\n}}}}\n')
    print(f"wrote {REFERENCE} ({len(cases)} cases)")


if __name__ == "__main__":
    write_reference()
