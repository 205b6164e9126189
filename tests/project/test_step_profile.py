"""benchmarks/step_profile.py, the tool behind issue 45's profiles and quick ratios: what it prints,
never how fast anything was."""

import importlib.util
import re
from pathlib import Path

import pytest
import torch

from posbench.core.model import model_config
from posbench.engine.env import subnormals_flushed

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "step_profile.py"


def _tool():
    spec = importlib.util.spec_from_file_location("step_profile", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _main(tool, argv: list[str]) -> None:
    """``tool.main(argv)``, then this process's thread count as it was (main sets one thread)."""
    threads = torch.get_num_threads()
    try:
        tool.main(argv)
    finally:
        torch.set_num_threads(threads)


def test_a_step_trains_the_model_on_batch_times_length_tokens():
    tool = _tool()
    step = tool.Step("t5_bias", 32, 64)
    assert tuple(step.x.shape) == (2, 33)
    before = step.model.method.table.weight.detach().clone()
    step.run()
    assert not torch.equal(before, step.model.method.table.weight)
    assert all(p.grad is None for p in step.model.parameters())


def test_ratio_prints_each_method_against_nope_with_its_range(capsys):
    _main(_tool(), ["ratio", "alibi", "nope", "--seq-len", "16", "24", "--tokens", "48", "--repeats", "3", "--steps", "1"])
    out = capsys.readouterr().out
    assert out.count("3 repeats of 1 steps, one thread") == 2 and "L 16, 48 tokens" in out and "L 24" in out
    lines = [ln for ln in out.splitlines() if "/ nope" in ln]
    assert len(lines) == 2 and all(ln.split()[0] == "alibi" for ln in lines)  # nope is not its own ratio
    for ln in lines:
        median, low, high = map(float, re.search(r"median ([\d.]+) \[([\d.]+)-([\d.]+)\]", ln).groups())
        assert low <= median <= high


def test_profile_prints_the_operators_by_self_time(capsys):
    _main(_tool(), ["profile", "nope", "--seq-len", "16", "--tokens", "32", "--steps", "1", "--rows", "5"])
    out = capsys.readouterr().out
    assert "nope L 16, 1 steps, one thread" in out and "Self CPU" in out and "aten::" in out


def test_attention_prints_the_blocked_path_against_sdpa_in_wall_and_cpu_time(capsys):
    _main(_tool(), ["attention", "--seq-len", "130", "--tokens", "260", "--repeats", "2", "--steps", "1"])
    out = capsys.readouterr().out
    assert "attention, L 130, batch 2, 2 repeats of 1, one thread" in out
    lines = [ln for ln in out.splitlines() if "/ sdpa" in ln]
    assert [ln.split(" / ")[0].strip() for ln in lines] == ["blocked, distance row"] * 2
    assert [("(wall)" in ln, "(cpu)" in ln) for ln in lines] == [(True, False), (False, True)]
    for ln in lines:
        median, low, high = map(float, re.search(r"median ([\d.]+) \[([\d.]+)-([\d.]+)\]", ln).groups())
        assert low <= median <= high


def test_the_tool_flushes_subnormals_as_the_workers_do_unless_told_not_to(capsys):
    """As every worker (flush_denormal: true); --keep-denormal measures what subnormals cost
    (tests/conftest.py puts this process's flush back)."""
    argv = ["profile", "nope", "--seq-len", "16", "--tokens", "32", "--steps", "1", "--rows", "1"]
    tool = _tool()
    _main(tool, argv)
    assert "subnormals flushed; CPU dispatch " in capsys.readouterr().out and subnormals_flushed()
    _main(tool, [*argv, "--keep-denormal"])
    assert "subnormals kept; CPU dispatch " in capsys.readouterr().out and not subnormals_flushed()


@pytest.mark.slow
def test_compile_profiles_the_compiled_model_and_says_so(capsys, monkeypatch):
    tool = _tool()
    # one layer, not the preset's four: inductor's time grows with the layers (a C++ build per
    # kernel), what the profile prints does not
    monkeypatch.setattr(tool, "model_config", lambda preset, method: model_config(preset, method, n_layers=1))
    step = tool.Step("alibi", 16, 32, compiled=True)
    assert step.forward is not step.model  # the step calls the compiled module
    _main(tool, ["profile", "alibi", "--seq-len", "16", "--tokens", "32", "--steps", "1", "--rows", "200", "--compile"])
    out = capsys.readouterr().out
    assert "alibi L 16, 1 steps, one thread, torch.compile" in out and "Self CPU" in out
    assert "CompiledFunction" in out  # the step ran through the compiled graph


@pytest.mark.slow
def test_attention_compile_times_both_compiled_attentions(capsys):
    _main(_tool(), ["attention", "--seq-len", "130", "--tokens", "130", "--repeats", "2", "--steps", "1", "--compile"])
    out = capsys.readouterr().out
    assert "attention, L 130, batch 1, 2 repeats of 1, one thread, torch.compile" in out
    assert len([ln for ln in out.splitlines() if ln.split(" / sdpa")[0].strip() == "blocked, distance row"]) == 2


def test_ratio_times_nope_against_itself_on_sdpa_by_the_cpu_clock(capsys, monkeypatch):
    """``nope:sdpa``: nope with the faster causal path per length switched off, inside its steps only."""
    from posbench.core import causal

    tool = _tool()
    seen = []
    rule = causal.blocked_backward_pays
    monkeypatch.setattr(tool.Step, "step", lambda self: seen.append((self.sdpa_only, causal.blocked_backward_pays(512))))
    _main(tool, ["ratio", "nope:sdpa", "--seq-len", "16", "--tokens", "32", "--repeats", "2", "--steps", "1", "--clock", "cpu"])
    out = capsys.readouterr().out
    assert "one thread, cpu clock" in out and "nope:sdpa    / nope: median" in out
    assert set(seen) == {(True, False), (False, True)}  # the rule off in nope:sdpa's steps, on in nope's
    assert causal.blocked_backward_pays is rule


def test_sdpa_only_turns_the_rule_off_for_alibis_and_the_sinks_routes_too(monkeypatch):
    """``alibi:sdpa`` and ``rotary+sink:sdpa`` time those routes without the blocked backward: both
    read ``causal.blocked_backward_pays`` when called, the switch ``sdpa_only`` flips."""
    from posbench.attention import linear, lse_sink
    from posbench.attention.modifiers import sdpa_options
    from posbench.core import cpu_flash
    from posbench.core.alibi_math import slopes_tensor

    if cpu_flash.CPU_FLASH_WITH_MASK is None:
        pytest.skip("this torch has no CPU flash op: neither route takes the rule")
    taken = []
    for module, name in ((linear, "key_bias_attention"), (lse_sink, "key_bias_backward")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, real=real, name=name, **kw: taken.append(name) or real(*a, **kw))
    q, k, v = (torch.randn(1, 2, 512, 8).requires_grad_() for _ in range(3))

    def both():
        linear.linear_bias_sdpa(q, k, v, slopes_tensor(2), torch.arange(512)).sum().backward()
        lse_sink.flash_sink_sdpa(q, k, v, torch.zeros(2), sdpa_options(is_causal=True)).sum().backward()

    with _tool().sdpa_only():
        both()
    assert taken == []
    both()
    assert taken == ["key_bias_attention", "key_bias_backward"]
