"""Every method that runs on a CPU computes exactly what it computed when the reference was written:
logits and the gradient of every parameter, float32 and bfloat16, for training at a length that
attends by blocks (520 queries) and at one that attends with the masked bias (37), evaluation,
KV-cache decoding (a prefill, then single tokens) and interpolated (float) positions.

Where the machine matches the fingerprint stored with the reference (torch version, CPU model and
flags, torch's CPU flash op with a mask), every (method, dtype, mode) must match its SHA-256 bit
for bit; elsewhere its float64 sums and sampled entries must agree within a tight tolerance.

Regenerate the reference only at a commit where behaviour is meant to change (and say so there):
    PYTHONPATH=. python tests/core/test_bit_identity.py
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import platform
from pathlib import Path

import pytest
import torch

from posbench.core import discovery, registry
from posbench.core.method import ModelConfig
from posbench.core.model import TransformerLM, lm_loss
from posbench.triton_kernels import FusedKernelMethod
from tests.helpers.bias_plugins import PLUGINS

REFERENCE = Path(__file__).with_name("bit_identity.json")
LONG, SHORT = 520, 37  # >= 512 queries: the blocked CPU plans; fewer: the masked bias
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
RTOL = {"float32": 1e-5, "bfloat16": 2e-2}  # the summaries' tolerance on another machine
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
    names = [n for n in discovery.names() if not issubclass(discovery.get(n), FusedKernelMethod)]
    return names + list(PLUGINS)


def build(name: str) -> TransformerLM:
    torch.manual_seed(0)
    model = TransformerLM(ModelConfig(vocab_size=64, n_layers=2, d_model=32, n_heads=4, d_ff=64, method=name))
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
    try:
        return record(MODES[mode](build(name), DTYPES[dtype]))
    finally:
        torch.set_num_threads(threads)


@contextlib.contextmanager
def plugins_registered():
    added = [registry.register(cls) for cls in PLUGINS.values() if cls.name not in discovery.names()]
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
    rtol = RTOL[dtype]
    assert set(got["sums"]) == set(want["sums"])
    for key, (s, a, n) in want["sums"].items():
        gs, ga, gn = got["sums"][key]
        assert gn == n and _close(gs, s, a, rtol) and _close(ga, a, 0.0, rtol), (key, got["sums"][key], want["sums"][key])
    for key, values in want["samples"].items():
        _, total, n = want["sums"][key]
        scale = total / n  # the mean magnitude
        for g, w in zip(got["samples"][key], values):
            assert _close(g, w, scale, 10 * rtol), (key, got["samples"][key], values)


def write_reference() -> None:
    with plugins_registered():
        cases = {f"{n}/{d}/{m}": measure(n, d, m) for n in methods() for d in DTYPES for m in MODES}
    lines = ",\n".join(f" {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(cases.items()))
    REFERENCE.write_text(f'{{"fingerprint": {json.dumps(fingerprint(), sort_keys=True)},\n"cases": {{\n{lines}\n}}}}\n')
    print(f"wrote {REFERENCE} ({len(cases)} cases)")


if __name__ == "__main__":
    write_reference()
