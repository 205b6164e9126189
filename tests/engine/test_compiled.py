"""compile: true in the efficiency and decode tasks (posbench.engine.compiled), on inductor on this CPU.

Compiling is slow (seconds per graph), so every test compiles one tiny model (1 layer, d_model 32)
at one length; a method the compiler refuses is a test plugin whose attention calls an op with no
fake-tensor kernel (it runs eagerly, the compiler cannot trace it)."""

import pytest
import torch

from posbench.core.method import PositionMethod, causal_attention
from posbench.core.outcome import Unavailable
from posbench.engine import compiled
from posbench.report.tabulate import compile_note
from posbench.tasks.efficiency import run as efficiency
from tests.helpers.cases import make_case


@torch.library.custom_op("posbench_test::no_fake", mutates_args=())
def no_fake(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@no_fake.register_fake
def _(x):
    raise RuntimeError("posbench_test::no_fake has no fake kernel")


no_fake.register_autograd(lambda ctx, grad: grad)  # a copy: its gradient is the incoming one


class RefusesCompiler(PositionMethod):
    """Plain attention through an op the compiler cannot trace: fine eagerly, fails compiled."""

    name = "refuses_compiler"

    def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
        return causal_attention(no_fake(q), k, v)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each test starts with dynamo's caches empty, as a worker process does (the model's forward is
    one code object, so the tests' models would otherwise pile up in its cache)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


TINY_MODEL = {"model": "tiny", "model_overrides": {"n_layers": 1, "d_model": 32, "n_heads": 2, "d_ff": 64, "vocab_size": 32}}
EFFICIENCY = {**TINY_MODEL, "tokens_per_step": 16, "warmup_steps": 1, "measure_steps": 1, "windows": 2, "compile": True}


@pytest.mark.subprocess  # inductor runs g++
def test_efficiency_group_compiled_and_a_method_the_compiler_refuses(tmp_path, plugin, monkeypatch):
    """Paired windows with compile: true: sinusoidal is measured compiled, with its compile times apart;
    the refusing method gets an unavailable result with the compiler's one-line reason, and the
    other method goes on."""
    plugin(RefusesCompiler)
    task, good = make_case("efficiency", "sinusoidal", {"seq_len": 8}, EFFICIENCY, tmp_path)
    _, bad = make_case("efficiency", "refuses_compiler", {"seq_len": 8}, EFFICIENCY, tmp_path)
    monkeypatch.setattr(efficiency, "memory_probe", lambda c: {"status": "ok", "metrics": {}})
    out = task.run_group([good, bad], 1)
    ok, refused = out[good.id], out[bad.id]
    assert ok["status"] == "ok", ok["message"]
    assert ok["metrics"]["eval_compile_s"] > 0 and ok["metrics"]["train_compile_s"] > 0
    assert len(ok["series"]["train_wps_windows"]) == 2 and len(ok["series"]["eval_wps_windows"]) == 2
    assert ok["info"]["compile"].startswith("torch.compile (inductor, mode default)")
    assert ok["info"]["compile_graph_breaks"] == "0"  # every mission method traces whole (tests/core/test_model.py)
    assert refused["status"] == "unavailable"
    assert refused["message"].startswith("torch.compile failed for refuses_compiler (eval): TorchRuntimeError:")
    assert "(RuntimeError: posbench_test::no_fake has no fake kernel)" in refused["message"]
    assert "\n" not in refused["message"]


def test_efficiency_case_refused_by_the_compiler_runs_eagerly(tmp_path, plugin):
    plugin(RefusesCompiler)
    task, case = make_case("efficiency", "refuses_compiler", {"seq_len": 8}, EFFICIENCY, tmp_path)
    with pytest.raises(Unavailable, match=r"^torch.compile failed for refuses_compiler \(eval\): "):
        task.run(case)
    _, eager = make_case("efficiency", "refuses_compiler", {"seq_len": 8}, {**EFFICIENCY, "compile": False}, tmp_path)
    out = task.run(eager)
    assert out["info"]["compile"] == "eager (no torch.compile)" and "eval_compile_s" not in out["metrics"]


@pytest.mark.subprocess  # inductor runs g++
def test_decode_compiled_matches_eager_and_times_compilation_apart(tmp_path):
    from posbench.protocols.generation import generate, last_position_only

    settings = {**TINY_MODEL, "decode_tokens": 32, "warmup_repeats": 0, "repeats": 1, "compile": True}
    task, case = make_case("decode", "alibi", {"context": 8, "batch": 1}, settings, tmp_path)
    out = task.run(case)
    assert out["metrics"]["compile_s"] > 0 and len(out["series"]["tpot_ms_steps"]) == 32
    assert out["info"]["compile"].startswith("torch.compile (inductor, mode default)")  # CPU: not reduce-overhead
    # The compiled steps decode what the eager model decodes (greedy tokens and float32 logits).
    from posbench.core.model import build_model, model_config

    torch.manual_seed(0)
    model = build_model(model_config("tiny", "alibi", **TINY_MODEL["model_overrides"])).eval()
    prompt = torch.randint(0, 32, (1, 8), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode(), last_position_only(model):
        tokens, logits = generate(model, prompt, 32)
        ctokens, clogits = generate(compiled.compile_module(model), prompt, 32)
    assert torch.equal(tokens, ctokens)
    torch.testing.assert_close(clogits, logits, rtol=1e-4, atol=1e-4)


def test_mode_reason_and_no_recompile():
    assert compiled.mode_for("cuda", decode=True) == "reduce-overhead"  # CUDA graphs for decoding
    assert compiled.mode_for("cpu", decode=True) is None and compiled.mode_for("cuda", decode=False) is None
    assert "mode reduce-overhead" in compiled.describe("reduce-overhead")
    try:
        try:
            raise ValueError("the backend's own words\nmore")
        except ValueError as inner:
            raise RuntimeError("backend='inductor' raised:\nsee above") from inner
    except RuntimeError as exc:
        assert compiled.reason(exc) == "RuntimeError: backend='inductor' raised: (ValueError: the backend's own words)"
    assert len(compiled.reason(RuntimeError("x" * 1000))) == compiled.REASON_CHARS

    # The stance is dynamo's: the "eager" backend (no inductor, no compiler process) shows it.
    f = torch.compile(lambda x: x * 2 + 1, backend="eager")
    f(torch.ones(3))
    with compiled.no_recompile():
        assert f(torch.zeros(3)).tolist() == [1.0, 1.0, 1.0]  # the same graph: fine
        with pytest.raises(RuntimeError, match="fail_on_recompile"):
            f(torch.ones(3, dtype=torch.float64))  # a new dtype would recompile inside a window
    with compiled.no_recompile(False):
        assert f(torch.ones(2, dtype=torch.float64)).tolist() == [3.0, 3.0]


def test_table_captions_say_compiled_or_eager():
    class Row:
        def __init__(self, settings):
            self.settings = settings

    assert compile_note([Row({"compile": True})] * 2).startswith(" Compiled with torch.compile")
    assert compile_note([Row({"compile": False})]) == " Eager PyTorch (compile: false)."
    assert compile_note([Row({"compile": True}), Row({"compile": False})]).startswith(" Mixed:")
    assert compile_note([Row({"epochs": 1}), Row(None)]) == ""  # a task without the setting: nothing said


@pytest.mark.subprocess  # inductor runs g++
def test_efficiency_group_of_bias_methods_compiled_at_the_blocked_length(tmp_path, monkeypatch):
    """From 512 queries on a CPU the bias methods attend by blocks. Several of them compiled in one
    process (a paired group) settle, then run their windows under fail_on_recompile: every case ok,
    no graph break. Issue 45: a graph break inside the shared Block.forward made that frame a
    compiled unit of its own, and a later model's call recompiled it and crashed the group."""
    # batch 2: inductor may lay out a (B, H, T, hd) tensor as (B, T, H, hd), which a view as (B*H, T, hd)
    # refuses (it did, in the blocked backward)
    settings = {**EFFICIENCY, "tokens_per_step": 1024, "windows": 2}
    made = [make_case("efficiency", m, {"seq_len": 512}, settings, tmp_path) for m in ("t5_bias", "kerple_log")]
    task, cases = made[0][0], [c for _, c in made]
    monkeypatch.setattr(efficiency, "memory_probe", lambda c: {"status": "ok", "metrics": {}})
    out = task.run_group(cases, 1)
    for case in cases:
        row = out[case.id]
        assert row["status"] == "ok", row["message"]
        assert row["info"]["compile_graph_breaks"] == "0", case.method
        assert len(row["series"]["train_wps_windows"]) == 2
    assert out[cases[0].id]["info"]["attn_backend"].startswith("blocked float32")  # t5_bias: the blocked path
