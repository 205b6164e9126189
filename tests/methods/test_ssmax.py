"""ssmax (Scalable-Softmax) as a modifier: hand-computed weights, the query scale under every
method it composes with, the composed names in the registry, suites and ``bench.py list``."""

import math

import pytest
import torch

from posbench.core import conformance as testing
from posbench.core import registry
from posbench.core.method import ModelConfig
from posbench.run import isolated
from posbench.run import suite as suitemod
from posbench.run.schedule import with_methods
from tests.helpers.attention import method, qkv, reference_attention

COMPOSED = ["rotary+ssmax", "alibi+ssmax", "nope+ssmax"]


def tiny(name, s):
    m = registry.build(ModelConfig(d_model=2, n_heads=1, n_layers=1, method=name))
    with torch.no_grad():
        m.ssmax_s.fill_(s)
    return m


def test_nope_ssmax_scales_each_querys_logits_by_s_log_n():
    # s = 1 / ln 2. q = [sqrt 2, 0] and k_j = [x_j, 0]: q . k_j / sqrt(2) = x_j, x = [0, ln 2, 0, 0].
    # Query 3 sees n = 4 keys: scale ln 4 / ln 2 = 2, weights exp(2 x) = [1, 4, 1, 1] / 7.
    # Query 1 sees n = 2: scale 1, weights [1, 2] / 3. Query 0 sees one key (scale ln 1 = 0): [1].
    m = tiny("nope+ssmax", 1 / math.log(2))
    q = torch.tensor([math.sqrt(2), 0.0]).expand(1, 1, 4, 2)
    k = torch.tensor([[[[0.0, 0.0], [math.log(2), 0.0], [0.0, 0.0], [0.0, 0.0]]]])
    v = torch.tensor([[[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]]]])
    pos = torch.arange(4)
    out = m.attend(q, k, v, pos, pos, 0)[0, 0]
    torch.testing.assert_close(out[3], torch.tensor([1 / 7, 4 / 7]))
    torch.testing.assert_close(out[1], torch.tensor([1 / 3, 2 / 3]))
    torch.testing.assert_close(out[0], torch.tensor([1.0, 0.0]))
    # A decode step at position 3 (Tq 1, Tk 4) sees n = 4 keys too.
    torch.testing.assert_close(m.attend(q[:, :, 3:], k, v, pos[3:], pos, 0)[0, 0, 0], out[3])


def test_key_counts_are_bottom_right_aligned():
    ssmax = registry.get("rotary+ssmax")  # imports methods/ssmax.py
    import sys

    counts = next(mod for name, mod in sys.modules.items() if name.startswith("posbench_methods_ssmax")).log_key_counts
    torch.testing.assert_close(counts(3, 5, "cpu"), torch.tensor([3.0, 4.0, 5.0]).log())
    torch.testing.assert_close(counts(1, 9, "cpu"), torch.tensor([9.0]).log())
    assert ssmax.name == "rotary+ssmax"


@pytest.mark.parametrize("base", ["alibi", "rotary", "fox"])
def test_composed_method_is_its_base_with_scaled_queries(base):
    """METHOD+ssmax == METHOD attending with q_i * s_h log n_i (a bias is left unscaled)."""
    composed, plain = method(f"{base}+ssmax"), method(base)
    plain.load_state_dict({k: v for k, v in composed.state_dict().items() if k != "ssmax_s"})
    with torch.no_grad():
        composed.ssmax_s.normal_(0.5, 0.1)
    q, k, v = qkv(5, 8)
    pos = torch.arange(8)
    scale = composed.ssmax_s[2][:, None] * torch.arange(4, 9).float().log()  # (H, Tq), layer 2
    want = plain.attend(q * scale[None, :, :, None], k, v, pos[3:], pos, 2)
    torch.testing.assert_close(composed.attend(q, k, v, pos[3:], pos, 2), want)


def test_alibi_ssmax_leaves_the_bias_unscaled():
    m = method("alibi+ssmax")
    q, k, v = qkv(6, 6)
    pos = torch.arange(6)
    scale = m.ssmax_s[0][:, None] * torch.arange(1, 7).float().log()
    bias = -m.slopes[:, None, None] * (pos[:, None] - pos[None, :]).float()
    want = reference_attention(q * scale[None, :, :, None], k, v, bias)
    torch.testing.assert_close(m.attend(q, k, v, pos, pos, 0).double(), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "dtype", [pytest.param(torch.float32, id="float32"), pytest.param(torch.bfloat16, id="bfloat16", marks=pytest.mark.slow)]
)
@pytest.mark.parametrize("name", COMPOSED)
def test_composed_methods_pass_the_conformance_kit(name, dtype):
    for fn in testing.CHECKS.values():
        fn(name, dtype, "cpu")


def test_composed_method_takes_its_base_options_and_s_init():
    m = method("alibi+ssmax", bias_dtype="compute", s_init=0.25)
    assert m.bias_dtype == "compute" and torch.equal(m.ssmax_s, torch.full((4, 4), 0.25))
    with pytest.raises(registry.RegistryError, match=r"'alibi\+ssmax': unknown option\(s\) slope; allowed: bias_dtype, s_init"):
        method("alibi+ssmax", slope=1)
    assert "+ ssmax query scale" in method("rotary+ssmax").attn_backend("cpu", torch.float32)


@pytest.mark.parametrize(
    "name,message",
    [
        ("ssmax", "unknown method 'ssmax': 'ssmax' is a modifier, not a method; allowed: METHOD+ssmax (e.g. rotary+ssmax)"),
        (
            "rotary+ssmx",
            "unknown method 'rotary+ssmx': 'ssmx' is not a modifier (did you mean 'ssmax'?); allowed: "
            "METHOD+MODIFIER with a modifier from: gate, qknorm, sink, ssmax",
        ),
        (
            "rotery+ssmax",
            "unknown method 'rotery+ssmax': unknown method 'rotery' (did you mean 'rotary'?); allowed: "
            "METHOD+ssmax with a registered METHOD (bench.py list)",
        ),
        ("+ssmax", "unknown method '+ssmax': unknown method ''"),
    ],
)
def test_an_unknown_composed_name_is_one_line(name, message):
    for ask in (registry.require, registry.get):
        with pytest.raises(registry.RegistryError) as exc:
            ask(name)
        assert str(exc.value).startswith(message) and "\n" not in str(exc.value)


def test_modifiers_are_listed_apart_from_methods():
    mods = registry.modifiers()
    assert list(mods) == ["gate", "qknorm", "sink", "ssmax"] and mods["ssmax"].endswith("methods/ssmax.py")
    assert "ssmax" not in registry.names() and not any("+" in n for n in registry.names())
    assert isolated.listing()["modifiers"] == mods  # what `bench.py list` prints in its header


def test_suites_and_methods_flag_take_composed_names():
    suite = suitemod.load("extrapolation")
    for name in ("extrapolation", "efficiency"):  # the new methods join cpu-all through `all`
        assert {"fox", "sandwich", "cope"} <= set(suitemod.resolve(suitemod.load(name), "cpu-all").methods)
    cpu_all = suitemod.resolve(suite, "cpu-all")
    assert with_methods(cpu_all, ["rotary+ssmax"]).methods == cpu_all.methods + ["rotary+ssmax"]
    cpu = suitemod.resolve(suite, "cpu")
    assert with_methods(cpu, ["alibi+ssmax"]).methods[-1] == "alibi+ssmax"
    with pytest.raises(registry.RegistryError, match="'ssmx' is not a modifier"):
        with_methods(cpu, ["alibi+ssmx"])
