"""The decode task: KV-cache decoding equals the full forward for every method at the suite's
lengths, bias methods build one (H, 1, C) row per decode step (elements counted, not seconds),
and the task's metrics are computed from its timings as documented."""

import statistics
import weakref
from pathlib import Path

import pytest
import torch
import yaml
from torch.utils._python_dispatch import TorchDispatchMode

import posbench.engine.timing
from posbench import tasks as _registry  # noqa: E402
from posbench.attention.routes import BLOCKED_MIN_ROWS
from posbench.core import conformance as testing
from posbench.core import registry
from posbench.core.model import TransformerLM, build_model, model_config
from posbench.protocols import generation as decoding
from posbench.tasks import find as find_task
from posbench.tasks.decode import task as decode
from tests.helpers.cases import make_case
from tests.helpers.marks import SLOW_WHEN_INTERPRETED, interpreted

# The tasks this installation knows, as the CLI hands them to the report.
KNOWN_TASKS = {name: _registry.get(name) for name in _registry.names(include_hidden=True)}

SUITE = yaml.safe_load((Path(__file__).resolve().parents[2] / "suites" / "decode.yaml").read_text())
CPU_CONTEXTS = SUITE["profiles"]["cpu"]["grid"]["context"]  # 256, 1024, 4096
DECODE_TOKENS = SUITE["profiles"]["cpu"]["settings"]["decode_tokens"]
METHODS = registry.names()
# The Triton interpreter runs every tile as numpy calls (32 tokens through 2 layers at C = 256
# took 4 minutes): the fused kernel decodes 8 tokens of one sequence through 1 layer, at the
# shortest suite length and an odd one.
INTERPRETED_CONTEXTS = [67, CPU_CONTEXTS[0]]
INTERPRETED_TOKENS, INTERPRETED_LAYERS = 8, 1


def tiny(method: str, dtype=torch.float32, n_layers: int = 2, seed: int = 0) -> TransformerLM:
    """The cpu profile's model (4 heads of 32) with fewer layers; learned position parameters are
    scaled up as in the conformance kit, so a decode path that dropped them would show."""
    torch.manual_seed(seed)
    model = build_model(model_config("tiny", method, n_layers=n_layers))
    with torch.no_grad():
        for p in model.method.parameters():
            p.normal_(0, 0.5)
    return model.to(dtype=dtype).eval()


def _interpreted(method: str) -> bool:
    # The fused-kernel methods (alibi_triton, t5_triton): on a CPU they run only under
    # TRITON_INTERPRET=1 (tests/conftest.py), at numpy speed.
    return registry.origin(method).endswith("_triton.py")


def _decode_cases():
    cases = []
    for method in METHODS:
        contexts = INTERPRETED_CONTEXTS if _interpreted(method) else [67] + CPU_CONTEXTS
        # `slow` (left out by `make test-fast`): an interpreted kernel, or a long context (1024, 4096).
        slow = SLOW_WHEN_INTERPRETED if interpreted(method) else []
        for c in contexts:
            marks = slow + ([pytest.mark.slow] if c >= 1024 and not slow else [])
            cases.append(pytest.param(method, c, torch.float32, id=f"{method}-C{c}-float32", marks=marks))
        cases.append(
            pytest.param(method, CPU_CONTEXTS[0], torch.bfloat16, id=f"{method}-C{CPU_CONTEXTS[0]}-bfloat16", marks=slow)
        )
    return cases


# --- decode equals the full forward ------------------------------------------------------------


@pytest.mark.parametrize("method,context,dtype", _decode_cases())
def test_decode_equals_full_forward(method, context, dtype):
    reason = testing.unavailable(method, dtype)
    if reason:
        pytest.skip(f"{method} unavailable in {dtype} on cpu: {reason}")
    batch = 1 if context >= 4096 or _interpreted(method) else 2
    steps, layers = (INTERPRETED_TOKENS, INTERPRETED_LAYERS) if _interpreted(method) else (DECODE_TOKENS, 2)
    model = tiny(method, dtype, n_layers=layers)
    g = torch.Generator().manual_seed(context)
    prompt = torch.randint(0, model.cfg.vocab_size, (batch, context), generator=g)
    with torch.inference_mode():
        with decoding.last_position_only(model):  # the task's path: prefill keeps the last row only
            tokens, logits = decoding.generate(model, prompt, steps)  # (B, n), (B, n, V)
        # The full forward over the prompt and every generated token but the last one.
        full = model(torch.cat([prompt, tokens[:, :-1]], dim=1))[:, context - 1 :].float()  # (B, n, V)
    assert tokens.shape == (batch, steps) and logits.shape == full.shape
    assert torch.equal(tokens, logits.argmax(-1))  # greedy
    tol = testing.DECODE_TOL[dtype] * max(1.0, full.abs().max().item())
    err = (logits.float() - full).abs().max().item()
    assert err <= tol, f"{method} C={context} {dtype}: decode differs from the full forward by {err:.3g} (tol {tol:.3g})"


def test_last_position_only_gives_the_last_row_and_is_removed():
    model = tiny("alibi")
    idx = torch.randint(0, 256, (2, 21))
    with torch.no_grad():
        full = model(idx)
        with decoding.last_position_only(model):
            last = model(idx)
        again = model(idx)
    assert last.shape == (2, 1, 256) and torch.allclose(last[:, 0], full[:, -1], atol=1e-5)
    assert again.shape == full.shape  # the hook is gone after the block


def test_kv_cache_bytes_counts_keys_and_values_of_every_layer():
    model = tiny("rotary", torch.bfloat16, n_layers=3)
    with torch.inference_mode():
        cache, _ = decoding.prefill(model, torch.randint(0, 256, (5, 37)))
    # layers x (k, v) x B x H x C x head_dim x 2 bytes
    assert decoding.kv_cache_bytes(cache) == 3 * 2 * 5 * 4 * 37 * 32 * 2


# --- bias work per decode step: linear in C, once per step --------------------------------------


class ElementsBuilt(TorchDispatchMode):
    """Counts the elements of every tensor an operation creates (views and no-op casts, which
    share an input's storage, create nothing)."""

    def __init__(self):
        super().__init__()
        self.elements = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in _tensors((args, kwargs))}
        for t in _tensors(out):
            if t.untyped_storage().data_ptr() not in inputs:
                self.elements += t.numel()
        return out


def _tensors(tree):
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, (list, tuple)):
        for item in tree:
            yield from _tensors(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            yield from _tensors(item)


def bias_work(method: str, context: int, steps: int = 3, n_layers: int = 2):
    """(elements built by the prefill's bias, [elements built per decode step], [bias calls that
    built anything, per step]) for a B=2 prompt of ``context`` tokens.

    ``bias`` is the method's bias-building function: every layer of ``alibi`` calls it (and hits
    its cache after the first), the first layer of each ``t5_bias`` forward calls it.
    """
    model = tiny(method, n_layers=n_layers)
    builder = model.method.bias
    log = []

    def counted(*args, **kwargs):
        with ElementsBuilt() as counter:
            out = builder(*args, **kwargs)
        log.append(counter.elements)
        return out

    model.method.bias = counted  # an instance attribute: attend / _shared_bias look it up there
    idx = torch.randint(0, 256, (2, context + steps))
    per_step, builds = [], []
    with torch.inference_mode():
        cache = model.new_cache()
        model(idx[:, :context], cache=cache)
        prefill = sum(log)
        for t in range(context, context + steps):
            log.clear()
            model(idx[:, t : t + 1], cache=cache)
            per_step.append(sum(log))
            builds.append(sum(1 for n in log if n))
    return prefill, per_step, builds


def check_linear_bias_work(method: str) -> None:
    """Raises AssertionError unless every decode step builds the (H, 1, Tk) bias row once, plus at
    most a few (Tk,) vectors, for contexts 100, 400 and 1600: elements = a * Tk + b exactly."""
    heads = model_config("tiny").n_heads
    work = {c: bias_work(method, c) for c in (100, 400, 1600)}
    for c, (prefill, per_step, builds) in work.items():
        # The counter sees quadratic work where there is some: the prefill's (H, C, C) bias below
        # BLOCKED_MIN_ROWS queries; from there on the prefill attends by blocks and builds one row.
        assert prefill >= heads * c * c if c < BLOCKED_MIN_ROWS else prefill <= (heads + 16) * c
        assert builds == [1, 1, 1], f"C={c}: bias built by {builds} layers per step, not once"
        for step, n in enumerate(per_step):
            keys = c + step + 1  # the step's context, its new token included
            assert heads * keys <= n <= (heads + 16) * keys, f"C={c} step {step}: {n} elements for Tk={keys}"
    points = [(c + s + 1, n) for c, (_, per_step, _) in work.items() for s, n in enumerate(per_step)]
    (k0, n0), (k1, n1) = points[0], points[-1]
    slope = (n1 - n0) / (k1 - k0)
    assert slope == int(slope) and heads <= slope <= heads + 16, f"{slope} elements per key"
    for k, n in points:
        assert n == n0 + slope * (k - k0), f"Tk={k}: {n} elements, not linear"


@pytest.mark.parametrize("method", ["alibi", "t5_bias"])
def test_bias_work_per_decode_step_is_linear_in_context(method):
    check_linear_bias_work(method)


@pytest.mark.parametrize("method", ["alibi", "t5_bias"])
def test_bias_work_per_step_does_not_grow_with_layers(method):
    _, two, _ = bias_work(method, 120, n_layers=2)
    _, four, _ = bias_work(method, 120, n_layers=4)
    assert two == four


def _broken_alibi(kind: str):
    """``alibi`` with a decode path that does too much: the whole (H, Tk, Tk) square sliced to
    its last row ("quadratic"), or the row rebuilt by every layer, ignoring the state ``prepare``
    built once ("per_layer")."""
    from posbench.core.alibi_math import alibi_bias
    from posbench.core.masked import mask_bias

    class Broken(registry.get("alibi")):
        name = f"broken_alibi_{kind}"

        def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
            return super().attend(q, k, v, q_pos, k_pos, layer, None if kind == "per_layer" else state)

        def bias(self, q_pos, k_pos, dtype):
            if kind == "per_layer":
                return mask_bias(alibi_bias(self.slopes, q_pos, k_pos))[None]

            def square_then_rows():  # cached per positions, as alibi's own
                return mask_bias(alibi_bias(self.slopes, k_pos, k_pos))[None, :, k_pos.shape[0] - q_pos.shape[0] :]

            return self._cache.get((q_pos, k_pos), square_then_rows)

    return Broken


@pytest.mark.parametrize("kind,match", [("quadratic", "elements for Tk"), ("per_layer", "layers per step")])
def test_linear_work_check_catches_wasteful_decoding(kind, match):
    cls = registry.register(_broken_alibi(kind))
    try:
        with pytest.raises(AssertionError, match=match):
            check_linear_bias_work(cls.name)
    finally:
        registry.unregister(cls.name)


def test_counter_counts_created_elements_not_views():
    with ElementsBuilt() as counter:
        x = torch.zeros(3, 5)  # 15
        x.view(15).unsqueeze(0)  # views: 0
        x.to(torch.float32)  # no-op cast: 0
        x * 2  # 15
    assert counter.elements == 30


@pytest.mark.parametrize("method,builder", [("alibi", "prepare"), ("t5_bias", "_layout")])
def test_first_decode_step_frees_the_prefill_bias(method, builder):
    """The prefill's (H, C, C) bias (alibi: masked and cached by BiasMethod.prepare) or (C, C)
    bucket layout (t5_bias) is cached for the layers of its forward; the first decode step must
    let it go, not hold it for 4 more steps."""
    model = tiny(method)
    original = getattr(model.method, builder)
    big = []

    def watch(*args, **kwargs):
        out = original(*args, **kwargs)
        first = out[0] if isinstance(out, tuple) else out
        if first.shape[-2] > 1:  # a prefill entry: Tq > 1
            big.append(weakref.ref(first))
        return out

    setattr(model.method, builder, watch)
    idx = torch.randint(0, 256, (1, 101))  # a prefill below BLOCKED_MIN_ROWS builds the square
    with torch.inference_mode():
        cache = model.new_cache()
        model(idx[:, :100], cache=cache)
        assert big and big[0]() is not None  # held by the cache after the prefill
        model(idx[:, 100:], cache=cache)
    assert big[0]() is None


# --- the task ---------------------------------------------------------------------------------

SMALL = {
    "model": "tiny",
    "model_overrides": {"n_layers": 1, "d_model": 64, "n_heads": 2, "d_ff": 64},
    "dtype": "float32",
    "decode_tokens": 32,
    "warmup_repeats": 1,
    "repeats": 2,
}


class FakeDevice:
    """Returns scripted window times; the model itself runs on the CPU."""

    kind = "cuda"

    def __init__(self, times):
        self.times = list(times)
        self.resets = 0

    def time_window(self, step, steps):
        assert steps == 1  # every prefill and decode step is its own window
        step()
        return self.times.pop(0)

    def reset_peak(self):
        self.resets += 1

    def in_use(self):
        return 1000

    def peak(self):
        return {"allocated": 5000 + self.resets, "reserved": 8000 + self.resets}


def test_task_reports_fox_kv_cache_with_one_extra_float_per_key_and_head(tmp_path, monkeypatch):
    """The decode task's kv_cache_bytes for fox: alibi's keys and values plus fox's log f, one
    float32 per cached key and head (the issue's decode line, through the task itself)."""
    n = SMALL["decode_tokens"]
    sizes = {}
    for method in ("alibi", "fox"):
        fake = FakeDevice([0.01] * 3 * (1 + n))  # 3 repeats of a prefill and n decode steps
        monkeypatch.setattr(posbench.engine.timing, "make_device", lambda kind, fake=fake: fake)
        task, case = make_case("decode", method, {"context": 24, "batch": 3}, SMALL, tmp_path / method)
        sizes[method] = task.run(case)["metrics"]["kv_cache_bytes"]
    assert sizes["alibi"] == 2 * 3 * 2 * 24 * 32 * 4  # 1 layer x (k, v) x B 3 x H 2 x C 24 x head_dim 32 x 4 bytes
    assert sizes["fox"] - sizes["alibi"] == 3 * 2 * 24 * 4  # 1 layer x B 3 x H 2 x C 24 x 4 bytes


def test_task_metrics_from_the_timings(tmp_path, monkeypatch):
    n = SMALL["decode_tokens"]
    # Per repeat: the prefill, then n decode steps. Repeat 0 is the warm-up and is not counted.
    repeats = [(9.0, [9.0] * n), (0.010, [0.001 * (i + 1) for i in range(n)]), (0.030, [0.002] * n)]
    fake = FakeDevice([t for pre, steps in repeats for t in [pre] + steps])
    monkeypatch.setattr(posbench.engine.timing, "make_device", lambda kind: fake)  # run() imports it from there
    task, case = make_case("decode", "alibi", {"context": 24, "batch": 3}, SMALL, tmp_path)
    out = task.run(case)
    m, series = out["metrics"], out["series"]
    assert not fake.times  # every scripted window was used: 3 repeats of 1 + n
    assert m["ttft_ms"] == pytest.approx(20.0) and (m["ttft_ms_min"], m["ttft_ms_max"]) == pytest.approx((10.0, 30.0))
    assert m["prefill_wps"] == pytest.approx(3 * 24 / 0.020)
    steps_ms = [1.0 * (i + 1) for i in range(n)] + [2.0] * n
    assert m["tpot_ms"] == pytest.approx(statistics.median(steps_ms))
    assert m["tpot_p90_ms"] == pytest.approx(statistics.quantiles(steps_ms, n=10, method="inclusive")[-1])
    assert (m["tpot_ms_min"], m["tpot_ms_max"]) == pytest.approx((1.0, float(n)))
    round_rates = [3 * n / sum(0.001 * (i + 1) for i in range(n)), 3 * n / (0.002 * n)]
    assert m["decode_wps"] == pytest.approx(statistics.median(round_rates))
    assert series["ttft_ms_repeats"] == pytest.approx([10.0, 30.0]) and len(series["tpot_ms_steps"]) == 2 * n
    # 1 layer x (k, v) x B 3 x H 2 x C 24 x head_dim 32 x 4 bytes
    assert m["kv_cache_bytes"] == 2 * 3 * 2 * 24 * 32 * 4
    # Two resets per round (before the prefill, after the first decode step); the last round's
    # peaks are the largest the fake reports.
    assert fake.resets == 6
    assert (m["peak_mem_prefill_bytes"], m["peak_mem_decode_bytes"]) == (5005, 5006)
    assert m["peak_mem_decode_reserved_bytes"] == 8006 and m["mem_base_bytes"] == 1000
    assert "CUDA events" in out["info"]["timing"] and "1 warm-up repeat" in out["info"]["timing"]
    assert out["info"]["compute_dtype"] == "float32"


def test_task_runs_on_cpu_and_records_perf_counter(tmp_path):
    task, case = make_case("decode", "t5_bias", {"context": 16, "batch": 2}, {**SMALL, "warmup_repeats": 0}, tmp_path)
    out = task.run(case)
    m = out["metrics"]
    assert 0 < m["tpot_ms_min"] <= m["tpot_ms"] <= m["tpot_p90_ms"] <= m["tpot_ms_max"]
    assert m["decode_wps"] > 0 and m["prefill_wps"] > 0 and m["peak_mem_decode_bytes"] > 0
    assert m["peak_mem_decode_reserved_bytes"] is None  # no reserved pool on a CPU
    assert "perf_counter" in out["info"]["timing"]
    assert set(decode.METRICS) >= set(m)


@pytest.mark.parametrize(
    "bad,match",
    [
        ({"decode_tokens": 8}, "greater than or equal to 32"),
        ({"repeats": 0}, "greater than or equal to 1"),
        ({"rounds": 0}, "greater than or equal to 1"),
        ({"model_overrides": {"n_lyers": 2}}, "unknown ModelConfig field"),
    ],
)
def test_settings_reject_bad_values(tmp_path, bad, match):
    with pytest.raises(ValueError, match=match):
        make_case("decode", "alibi", {"context": 8}, {**SMALL, **bad}, tmp_path)


def test_suite_declares_latencies_lower_is_better():
    from posbench.report.compare_cases import metric_direction

    for metric in ("ttft_ms", "tpot_ms", "tpot_p90_ms", "kv_cache_bytes", "peak_mem_decode_bytes"):
        assert metric_direction("decode", metric, KNOWN_TASKS) == -1 and "lower is better" in decode.METRICS[metric].doc
    for metric in ("prefill_wps", "decode_wps"):
        assert metric_direction("decode", metric, KNOWN_TASKS) == 1 and "higher is better" in decode.METRICS[metric].doc
    assert set(SUITE["metrics"]) <= set(decode.METRICS)


def test_report_has_decode_tables_with_ratios_to_the_baseline(tmp_path):
    from posbench.report.build import collect_tables, load_runs
    from tests.helpers.report_rows import base_row, write_run

    tpot = {"sinusoidal": 2.0, "alibi": 3.0}  # ms at C = 256; doubles at 1024
    rows = []
    for method, ms in tpot.items():
        for context in (256, 1024):
            for batch in (1, 8):
                row = base_row("decode", "decode", method, {"context": context, "batch": batch}, "run-d")
                row["metrics"] = {
                    "tpot_ms": ms * context / 256 * batch,
                    "tpot_p90_ms": 1.0,
                    "ttft_ms": 1.0,
                    "decode_wps": 1.0,
                    "kv_cache_bytes": 1e6,
                    "peak_mem_decode_bytes": 2e6,
                }
                rows.append(row)
    sections = dict(collect_tables(load_runs([write_run(tmp_path, rows)], find_task=find_task)))
    tables = [t for t in sections["Decode"] if t.metric == "tpot_ms"]
    assert sorted(t.rest["batch"] for t in tables) == [1, 8]  # one table per batch
    eight = next(t for t in tables if t.rest["batch"] == 8)
    assert eight.columns == [256, 1024] and eight.rows == ["sinusoidal", "alibi"]
    cell = eight.cells[("alibi", 1024)]
    assert cell.value == pytest.approx(96.0) and cell.ratio == pytest.approx(1.5)
    assert "(1.50x)" in cell.text
