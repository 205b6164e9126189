"""Rotary's scalings (``methods/rotary.py``, ``rotary_llama3.py``, ``rotary_longrope.py``) against
the published formulas, written out again here in float64, and against Hugging Face's values.

The Hugging Face constants are what transformers' ``modeling_rope_utils.ROPE_INIT_FUNCTIONS``
("linear", "dynamic", "yarn", "llama3", "longrope"; the static "ntk" of earlier releases) return,
computed by a throwaway transcription of those functions (float32, as HF computes them; no
transformers dependency) at the setting of issue 29: head dim 64, base 10000, original length
L0 = 512 (posbench's L_train); Llama 3.1's own setting for llama3 (head dim 128, base 500000,
factor 8, low 1, high 4, original 8192). HF computes in float32, posbench in float64: they agree
to a relative 2e-6.

Also: rotary's scores in closed form (a function of the relative position alone), its fused
rotation against the textbook one (outputs and gradients, float32 and bfloat16), and the scaled
rows under torch.compile, which read L_train and the evaluation length as Python ints (issue 45).
"""

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from posbench.core import registry
from posbench.core.method import ModelConfig
from posbench.core.model import build_model, model_config
from tests.helpers.attention import method, qkv, reference_attention, rotate_reference
from tests.helpers.fast_paths import (
    DTYPES,
    TOL,
    assert_same_gradients,
    fast_path_method,
    fast_path_qkv,
    float64_attention,
    grads,
)
from tests.helpers.graph_breaks import L_TRAIN, fresh_dynamo, fullgraph, trained_tiny_model  # noqa: F401  (autouse fixture)
from tests.helpers.methods import model_method

HD = 16
THETA = 10000.0 ** (-torch.arange(0, HD, 2, dtype=torch.float64) / HD)
ROWS = ["rotary_pi", "rotary_ntk", "rotary_dynamic_ntk", "rotary_yarn", "rotary_llama3", "rotary_longrope"]


def yarn_keep_reference(L0, hd=HD, base=10000.0, ramp="index", alpha=1.0, beta=32.0):
    """YaRN's g_i per pair: the authors' code (index) or the paper's eq. 18 (ratio)."""
    if ramp == "ratio":
        return [
            min(max((L0 * t / (2 * math.pi) - alpha) / (beta - alpha), 0.0), 1.0)
            for t in (base ** (-2 * i / hd) for i in range(hd // 2))
        ]

    def pair(n):  # the (fractional) pair whose wavelength fits n times in L0
        return hd * math.log(L0 / (n * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = max(math.floor(pair(beta)), 0), min(math.ceil(pair(alpha)), hd - 1)
    return [1 - min(max((i - lo) / (hi - lo), 0.0), 1.0) for i in range(hd // 2)]


def scaled_reference(scaling, s, L0, length=None, f=None, short=None, long=None):
    """(theta', mscale) from the published formulas, pair by pair."""
    theta = THETA.tolist()
    if scaling == "pi":  # Chen et al. 2023: positions m / s
        return torch.tensor([t / s for t in theta], dtype=torch.float64), 1.0
    if scaling in ("ntk", "dynamic_ntk"):  # bloc97 / emozilla: base * s^(d / (d - 2))
        if f is not None:  # HF's dynamic NTK: s = f L / L0 - (f - 1)
            s = max(1.0, f * length / L0 - (f - 1))
        base = 10000.0 * s ** (HD / (HD - 2))
        return torch.tensor([base ** (-2 * i / HD) for i in range(HD // 2)], dtype=torch.float64), 1.0
    if scaling in ("yarn", "yarn_ratio"):  # Peng et al. 2024, alpha 1, beta 32
        g = yarn_keep_reference(L0, ramp="ratio" if scaling == "yarn_ratio" else "index")
        return torch.tensor([(1 - gi) * t / s + gi * t for gi, t in zip(g, theta)]), 0.1 * math.log(s) + 1
    if scaling == "llama3":  # Llama 3.1: low 1, high 4
        out = []
        for t in theta:
            wavelen = 2 * math.pi / t
            if wavelen < L0 / 4:
                out.append(t)
            elif wavelen > L0 / 1:
                out.append(t / s)
            else:
                g = (L0 / wavelen - 1) / (4 - 1)
                out.append((1 - g) * t / s + g * t)
        return torch.tensor(out, dtype=torch.float64), 1.0
    assert scaling == "longrope"  # Phi-3: theta_i / lambda_i, sqrt(1 + ln s / ln L0)
    lam = long if length > L0 else short
    return torch.tensor([t / x for t, x in zip(theta, lam)]), math.sqrt(1 + math.log(s) / math.log(L0))


def attend_reference(m, theta, mscale, tq, tk):
    q, k, v = qkv(tq, tk, d=HD, seed=tk)
    pos = torch.arange(tk)
    expect = reference_attention(rotate_reference(q, pos[-tq:], theta) * mscale, rotate_reference(k, pos, theta) * mscale, v)
    return m.attend(q, k, v, pos[-tq:], pos, 0).double(), expect


# --- each scaling equals its formula inside the model's attention ---------------------------------


@pytest.mark.parametrize("scaling", ["pi", "ntk", "dynamic_ntk", "yarn", "yarn_ratio", "llama3"])
@pytest.mark.parametrize("tq, tk", [(20, 20), (1, 37)])
def test_scaling_equals_formula_beyond_train_len(scaling, tq, tk):
    if scaling == "llama3":
        m = method("rotary_llama3", train_len=8).eval()
    elif scaling == "yarn_ratio":
        m = method("rotary", scaling="yarn", yarn_ramp="ratio", train_len=8).eval()
    else:
        m = method("rotary", scaling=scaling, train_len=8).eval()
    theta, mscale = scaled_reference(scaling, tk / 8, 8)  # dynamic: evaluation length over L_train
    out, expect = attend_reference(m, theta, mscale, tq, tk)
    torch.testing.assert_close(out, expect, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("f, tk", [(2.0, 37), (3.5, 20), (2.0, 8)])
def test_dynamic_ntk_with_a_factor_is_hugging_faces_convention(f, tk):
    m = method("rotary_dynamic_ntk", factor=f, train_len=8).eval()
    theta, _ = scaled_reference("dynamic_ntk", None, 8, length=tk, f=f)
    out, expect = attend_reference(m, theta, 1.0, 5, tk)
    torch.testing.assert_close(out, expect, rtol=1e-4, atol=1e-4)
    assert m.scale_factor(torch.arange(tk))[0] == pytest.approx(max(1.0, f * tk / 8 - (f - 1)))


@pytest.mark.parametrize("tk", [8, 37])
def test_longrope_switches_to_long_factors_beyond_train_len(tk):
    short, long = [1.0 + 0.1 * i for i in range(HD // 2)], [1.0 + 0.5 * i for i in range(HD // 2)]
    m = method("rotary_longrope", factor=4.0, train_len=8, short_factor=short, long_factor=long).eval()
    theta, mscale = scaled_reference("longrope", 4.0, 8, length=tk, short=short, long=long)
    out, expect = attend_reference(m, theta, mscale, 3, tk)
    torch.testing.assert_close(out, expect, rtol=1e-4, atol=1e-4)


def test_longrope_defaults_are_ntk_per_pair_beyond_train_len_and_ones_within():
    m = method("rotary_longrope", train_len=8).eval()  # factor null: s = L / L_train
    theta, mscale = m.frequencies(32)
    ntk = [4.0 ** (2 * i / (HD - 2)) for i in range(HD // 2)]
    torch.testing.assert_close(theta, THETA / torch.tensor(ntk, dtype=torch.float64))
    assert mscale == pytest.approx(math.sqrt(1 + math.log(4) / math.log(8)))
    assert torch.equal(m.frequencies(8)[0], THETA) and m.frequencies(8)[1] == 1.0


# --- Hugging Face's numbers (head dim 64, base 10000, L0 512; see the module docstring) -------------

HF = {
    # (row, options, evaluation length): ({pair: inv_freq}, attention factor)
    "linear f4": (
        "rotary_pi",
        {"factor": 4.0},
        512,
        {
            0: 2.500000000e-01,
            3: 1.054241285e-01,
            4: 7.905694097e-02,
            8: 2.500000037e-02,
            15: 3.333803732e-03,
            16: 2.499999944e-03,
            20: 7.905694656e-04,
            31: 3.333803761e-05,
        },
        1.0,
    ),
    "ntk f4 (static, transformers 4.4x)": (
        "rotary_ntk",
        {"factor": 4.0},
        512,
        {
            0: 1.0,
            3: 3.687534928e-01,
            4: 2.644324899e-01,
            8: 6.992454827e-02,
            15: 6.818370894e-03,
            16: 4.889442585e-03,
            20: 1.292927540e-03,
            31: 3.333803397e-05,
        },
        1.0,
    ),
    "dynamic f2 seq_len 2048": (
        "rotary_dynamic_ntk",
        {"factor": 2.0},
        2048,
        {
            0: 1.0,
            3: 3.493142724e-01,
            4: 2.460113168e-01,
            8: 6.052156910e-02,
            15: 5.200936925e-03,
            16: 3.662860254e-03,
            20: 9.011051152e-04,
            31: 1.905030695e-05,
        },
        1.0,
    ),
    "dynamic f1 seq_len 2048 (posbench's null factor)": (
        "rotary_dynamic_ntk",
        {},
        2048,
        {
            0: 1.0,
            3: 3.687534928e-01,
            4: 2.644324899e-01,
            8: 6.992454827e-02,
            15: 6.818370894e-03,
            16: 4.889442585e-03,
            20: 1.292927540e-03,
            31: 3.333803397e-05,
        },
        1.0,
    ),
    "yarn f4": (
        "rotary_yarn",
        {"factor": 4.0},
        512,
        {
            0: 1.0,
            1: 7.498942018e-01,
            2: 5.623413324e-01,
            3: 4.216965139e-01,
            4: 2.979838550e-01,
            5: 2.097753733e-01,
            6: 1.470500231e-01,
            7: 1.025785729e-01,
            8: 7.115384191e-02,
            9: 4.903154075e-02,
            10: 3.352418914e-02,
            11: 2.270673215e-02,
            12: 1.520325802e-02,
            13: 1.003273390e-02,
            14: 6.497559138e-03,
            15: 4.103142768e-03,
            16: 2.499999944e-03,
            17: 1.874735579e-03,
            20: 7.905694656e-04,
            31: 3.333803761e-05,
        },
        1.138629436111989,
    ),
    "llama3 f4 low 1 high 4 original 512": (
        "rotary_llama3",
        {"factor": 4.0},
        512,
        {
            0: 1.0,
            10: 5.623412877e-02,
            11: 3.622680902e-02,
            12: 2.037183382e-02,
            13: 1.145592146e-02,
            14: 6.442139391e-03,
            15: 3.622681601e-03,
            16: 2.499999944e-03,
            31: 3.333803761e-05,
        },
        1.0,
    ),
    # short_factor 1 + 0.01 i, long_factor 1 + 0.25 i (i = 0..31), factor 4
    "longrope f4 seq_len 512 (short)": (
        "rotary_longrope",
        {"factor": 4.0},
        512,
        {
            0: 1.0,
            3: 4.094140828e-01,
            4: 3.040651679e-01,
            8: 9.259258956e-02,
            15: 1.159583870e-02,
            16: 8.620689623e-03,
            20: 2.635231242e-03,
            31: 1.017955365e-04,
        },
        1.1055415967851334,
    ),
    "longrope f4 seq_len 2048 (long)": (
        "rotary_longrope",
        {"factor": 4.0},
        2048,
        {
            0: 1.0,
            3: 2.409694493e-01,
            4: 1.581138819e-01,
            8: 3.333333507e-02,
            15: 2.807413694e-03,
            16: 2.000000095e-03,
            20: 5.270463298e-04,
            31: 1.524024538e-05,
        },
        1.1055415967851334,
    ),
}
LONGROPE = {"short_factor": [1.0 + 0.01 * i for i in range(32)], "long_factor": [1.0 + 0.25 * i for i in range(32)]}


def build(row, options, head_dim=64, base=10000.0, train_len=512):
    extra = LONGROPE if row == "rotary_longrope" else {}
    cfg = ModelConfig(
        d_model=head_dim, n_heads=1, method=row, method_options={"train_len": train_len, "base": base, **options, **extra}
    )
    return registry.build(cfg).eval()


@pytest.mark.parametrize("setting", sorted(HF))
def test_inverse_frequencies_and_attention_factor_equal_hugging_faces(setting):
    row, options, length, pairs, attention = HF[setting]
    theta, mscale = build(row, options).frequencies(length)
    got = {p: theta[p].item() for p in pairs}
    assert got == pytest.approx(pairs, rel=2e-6)
    assert mscale == pytest.approx(attention, rel=1e-7)


def test_llama3_at_llama_3_1s_setting_equals_hugging_faces():
    # head dim 128, base 500000, factor 8, low 1, high 4, original_max_position_embeddings 8192
    pairs = {
        0: 1.0,
        28: 3.211446106e-03,
        29: 2.166570630e-03,
        30: 1.371893683e-03,
        31: 8.567514597e-04,
        32: 5.248460220e-04,
        33: 3.126936499e-04,
        34: 1.785077911e-04,
        35: 9.556212171e-05,
        63: 3.068925878e-07,
    }
    theta, mscale = build("rotary_llama3", {"factor": 8.0}, head_dim=128, base=500000.0, train_len=8192).frequencies(8192)
    assert {p: theta[p].item() for p in pairs} == pytest.approx(pairs, rel=2e-6) and mscale == 1.0


def test_yarn_ramp_is_the_authors_by_default_and_the_papers_as_an_option():
    # Issue 29: at s 4 (head dim 64, base 10000, L0 512) pairs 4-15 keep 0.94 -> 0.31 of their
    # frequency in HF's (and the YaRN authors') ramp, 0.85 -> 0.25 in the paper's ratio ramp.
    base = 10000.0 ** (-torch.arange(0, 64, 2, dtype=torch.float64) / 64)
    index = build("rotary_yarn", {"factor": 4.0}).frequencies(512)[0] / base
    assert index[4].item() == pytest.approx(0.9423077, abs=1e-6) and index[15].item() == pytest.approx(0.3076923, abs=1e-6)
    assert index[:4].tolist() == pytest.approx([1.0] * 4) and index[16:].tolist() == pytest.approx([0.25] * 16)
    cfg = ModelConfig(
        d_model=64,
        n_heads=1,
        method="rotary",
        method_options={"scaling": "yarn", "factor": 4.0, "train_len": 512, "yarn_ramp": "ratio"},
    )
    ratio = registry.build(cfg).frequencies(512)[0] / base
    assert round(ratio[4].item(), 2) == 0.85 and round(ratio[15].item(), 2) == 0.25


def test_yarn_reference_values_from_the_paper():
    # sqrt(1/t) = 0.1 ln(s) + 1: 1.27726 at s = 16; and theta of the highest
    # frequency pair (wavelength 2 pi < L_train / 32 for L_train 4096) is kept, the lowest divided by s.
    m = method("rotary", scaling="yarn", factor=16, train_len=4096)
    theta, mscale = m.scaled_inv_freq(16.0, 4096)
    assert mscale == pytest.approx(1.27726, abs=1e-5)
    assert theta[0].item() == pytest.approx(1.0) and theta[-1].item() == pytest.approx(THETA[-1].item() / 16)


# --- what every scaled row shares -------------------------------------------------------------------


@pytest.mark.parametrize("name", [r for r in ROWS if r != "rotary_ntk"])
def test_a_null_factor_row_is_plain_rotary_within_train_len_and_in_training(name):
    plain = method("rotary").eval()
    m = method(name, train_len=32).eval()
    q, k, v = qkv(32, 32, d=HD)
    pos = torch.arange(32)
    torch.testing.assert_close(m.attend(q, k, v, pos, pos, 0), plain.attend(q, k, v, pos, pos, 0))
    long = torch.arange(64)
    q, k, v = qkv(64, 64, d=HD)
    assert not torch.allclose(m.attend(q, k, v, long, long, 0), plain.attend(q, k, v, long, long, 0))
    m.train()
    torch.testing.assert_close(m.attend(q, k, v, long, long, 0), plain.attend(q, k, v, long, long, 0))


def test_rotary_scaling_records_train_len_in_training_and_keeps_it_in_state_dict():
    model = build_model(ModelConfig(d_model=64, n_heads=4, method="rotary_pi"))
    assert model.method.trained_len.item() == 0
    model.train()(torch.randint(0, 256, (2, 24)))
    assert model.method.trained_len.item() == 24
    model(torch.randint(0, 256, (2, 10)))
    assert model.method.trained_len.item() == 24  # the longest
    fresh = build_model(ModelConfig(d_model=64, n_heads=4, method="rotary_pi"))
    fresh.load_state_dict(model.state_dict())
    assert fresh.method.scale_factor(torch.arange(96)) == (4.0, 24)
    assert method("rotary_ntk").factor == 8.0 and method("rotary_yarn").scaling == "yarn"


@pytest.mark.parametrize("name", ROWS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_scaling_kv_decode(name, dtype):
    """Static factor: decoding equals the full forward. Dynamic factor: decoding step t equals the
    full forward of the first t + 1 tokens (each step sees the factor of its own length)."""
    torch.manual_seed(0)
    model = (
        build_model(ModelConfig(vocab_size=64, n_layers=2, d_model=64, n_heads=4, method=name, method_options={"train_len": 8}))
        .to(dtype)
        .eval()
    )
    idx = torch.randint(0, 64, (2, 30))
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    with torch.no_grad():
        cache = model.new_cache()
        steps = [model(idx[:, :4], cache=cache)[:, -1]]
        steps += [model(idx[:, t : t + 1], cache=cache)[:, -1] for t in range(4, 30)]
        for t in (3, 12, 29):
            last = model(idx[:, : t + 1])[:, -1].float()
            scale = max(1.0, last.abs().max().item())
            assert (steps[t - 3].float() - last).abs().max().item() <= tol * scale
        if name == "rotary_ntk":  # static: the whole sequence, not only each prefix's last token
            full = model(idx).float()
            assert (torch.stack(steps[1:], 1).float() - full[:, 4:]).abs().max().item() <= tol * max(1.0, full.abs().max().item())


def test_rotary_scaling_bad_options_are_one_line():
    with pytest.raises(
        ValueError,
        match="^rotary: scaling must be one of none, pi, ntk, dynamic_ntk, yarn, got 'longrope' "
        r"\(Llama 3.1's and LongRoPE's scalings are the methods rotary_llama3",
    ):
        method("rotary", scaling="longrope")
    with pytest.raises(ValueError, match="rotary: factor must be a number >= 1"):
        method("rotary", scaling="pi", factor=0.5)
    with pytest.raises(ValueError, match="rotary: train_len must be a positive integer"):
        method("rotary", scaling="pi", train_len=0)
    with pytest.raises(ValueError, match="^rotary: yarn_ramp must be one of index, ratio"):
        method("rotary", scaling="yarn", yarn_ramp="linear")
    with pytest.raises(ValueError, match="^rotary_llama3: need 0 < low_freq_factor < high_freq_factor, got 4 and 1$"):
        method("rotary_llama3", low_freq_factor=4, high_freq_factor=1)
    with pytest.raises(
        ValueError,
        match=r"^rotary_longrope: long_factor must be a list of 8 positive numbers \(one per "
        r"channel pair of head_dim 16\) or null, got \[1, 2\]$",
    ):
        method("rotary_longrope", long_factor=[1, 2])
    with pytest.raises(ValueError, match="^rotary_longrope: short_factor must be a list of 8 positive numbers"):
        method("rotary_longrope", short_factor=[1.0] * 7 + [0.0])
    for name, options in (
        ("rotary", {"scaling": "yarn", "factor": 4}),
        ("rotary_llama3", {"factor": 8}),
        ("rotary_longrope", {"factor": 4}),
    ):
        m = method(name, **options).eval()
        q, k, v = qkv(4, 4, d=HD)
        with pytest.raises(ValueError, match=f"^{name}: scaling '[a-z0-9]+' needs L_train"):
            m.attend(q, k, v, torch.arange(4), torch.arange(4), 0)


# --------------------------------------------------------------------------------------------------
# Rotary's scaled variants: one literal table in methods/rotary.py, one class building each
# row, names the registry reads from the file without importing torch (``register_variants``).

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = {
    "rotary_pi": ("pi", None),
    "rotary_ntk": ("ntk", 8.0),
    "rotary_dynamic_ntk": ("dynamic_ntk", None),
    "rotary_yarn": ("yarn", None),
}


@pytest.fixture
def clean_registry():
    before = set(registry.registered())
    yield
    for name in set(registry.registered()) - before:
        registry.unregister(name)


@pytest.mark.subprocess
def test_listing_reads_the_rotary_table_without_importing_torch():
    code = (
        "import sys; from posbench.core import registry; found = registry.listing(); "
        "print(sorted(n for n in found if n.startswith('rotary')), 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.split("] ")[1].strip() == "False"
    # the table's rows, and the two scalings that subclass rotary in files of their own
    assert eval(out.split("] ")[0] + "]") == sorted(["rotary", *VARIANTS, "rotary_llama3", "rotary_longrope"])


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_variant_is_rotary_with_its_scaling_fixed(name):
    scaling, factor = VARIANTS[name]
    cls = registry.get(name)
    assert cls.name == name and issubclass(cls, registry.get("rotary"))
    assert registry.origin(name) == str(ROOT / "methods" / "rotary.py")
    m = registry.build(ModelConfig(method=name, method_options={"train_len": 64}))
    assert (m.scaling, m.factor, m.train_len, m.base) == (scaling, factor, 64, 10000.0)
    with pytest.raises(
        registry.RegistryError,
        match=rf"^method '{name}': unknown option\(s\) scaling; "
        r"allowed: factor, train_len, base$",
    ):
        registry.build(ModelConfig(method=name, method_options={"scaling": "pi"}))


def test_a_variant_equals_rotary_with_the_same_options():
    cfg = dict(d_model=64, n_heads=4)
    variant = registry.build(ModelConfig(method="rotary_ntk", **cfg)).eval()
    plain = registry.build(ModelConfig(method="rotary", method_options={"scaling": "ntk", "factor": 8.0}, **cfg)).eval()
    q, k, v = (torch.randn(1, 4, 40, 16, generator=torch.Generator().manual_seed(i)) for i in range(3))
    pos = torch.arange(40)
    assert torch.equal(variant.attend(q, k, v, pos, pos, 0), plain.attend(q, k, v, pos, pos, 0))


PLUGIN = textwrap.dedent("""
    from posbench.core.method import PositionMethod
    from posbench.core.registry import register_variants

    TABLE = {TABLE}


    def make(name, options):
        return type("V", (PositionMethod,), {{"name": name, "size": options["size"]}})


    register_variants(TABLE, make)
""")


def test_a_plugin_table_is_read_without_importing_the_file(tmp_path, monkeypatch, clean_registry):
    path = tmp_path / "fam.py"
    path.write_text(
        PLUGIN.format(TABLE='{"fam_small": {"size": 1}, "fam_big": {"size": 2}}') + "raise RuntimeError('imported')\n"
    )  # importing it would fail
    monkeypatch.setenv(registry.METHODS_ENV_PATH, str(tmp_path))
    found = registry.listing()
    assert found["fam_small"] == found["fam_big"] == str(path.resolve())
    assert not registry.is_imported(path)
    path.write_text(PLUGIN.format(TABLE='{"fam_small": {"size": 1}, "fam_big": {"size": 2}}'))
    assert registry.get("fam_big").size == 2


@pytest.mark.parametrize(
    "table", ['dict(fam_small={"size": 1})', '{"fam" + "_small": {"size": 1}}'], ids=["not-a-literal", "computed-key"]
)
def test_a_table_reading_cannot_follow_is_imported(tmp_path, monkeypatch, clean_registry, table):
    (tmp_path / "fam.py").write_text(PLUGIN.format(TABLE=table))
    monkeypatch.setenv(registry.METHODS_ENV_PATH, str(tmp_path))
    assert "fam_small" in registry.listing()
    assert registry.is_imported(tmp_path / "fam.py")


def test_a_variant_class_with_another_name_is_one_line(clean_registry):
    from posbench.core.method import PositionMethod

    def make(name, options):
        return type("V", (PositionMethod,), {"name": "other"})

    with pytest.raises(
        registry.RegistryError,
        match=r"^register_variants: make\('fam_x', \.\.\.\) made a method named "
        r"'other'; allowed: the row's name 'fam_x'$",
    ):
        registry.register_variants({"fam_x": {}}, make)


# --- rotary in closed form ----------------------------------------------------------------------


def test_rotary_scores_depend_only_on_relative_position():
    rot = model_method("rotary")
    torch.manual_seed(1)
    q = torch.randn(1, 1, 1, 16).double()
    k = torch.randn(1, 1, 1, 16).double()
    rot = rot.double()

    def score(m, n):
        cq, sq = rot._cos_sin(torch.tensor([m]), torch.float64)
        ck, sk = rot._cos_sin(torch.tensor([n]), torch.float64)
        return (rot.rotate(q, cq, sq) * rot.rotate(k, ck, sk)).sum().item()

    for m, n in [(5, 2), (105, 102), (3005, 3002), (2.5, -0.5)]:
        assert score(m, n) == pytest.approx(score(3, 0), rel=1e-9, abs=1e-9)
    assert score(7, 0) != pytest.approx(score(3, 0))
    # Rotation preserves the norm, and position 0 is the identity.
    c0, s0 = rot._cos_sin(torch.tensor([0]), torch.float64)
    torch.testing.assert_close(rot.rotate(q, c0, s0), q)


def test_rotary_angles_are_the_float32_products_at_any_position():
    # Computed for the rows asked (a decode step asks for one), equal bit for bit to what a table
    # of arange * inv_freq would hold, without reading pos.max() to size a table.
    rot = model_method("rotary")
    pos = torch.tensor([0, 1, 9, 5000, 5001, 70000])
    table = torch.arange(70001, dtype=torch.float32)[:, None] * rot.inv_freq[None]
    assert torch.equal(rot._angles(pos), table[pos])


# --- the fused rotation against the textbook one ------------------------------------------------


def _rotate_by_cos_sin(x, cos, sin):
    """The textbook rotation of channel pairs (i, i + hd/2), in float64."""
    x1, x2 = x.double().chunk(2, dim=-1)
    cos, sin = cos.double(), sin.double()
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "seed, tq, tk, floats", [(0, 7, 7, False), (1, 13, 13, False), (2, 33, 33, True), (3, 5, 19, False), (4, 1, 9, True)]
)
def test_rotary_attend_equals_reference(seed, tq, tk, floats, dtype):
    m = fast_path_method("rotary").to(dtype)
    q, k, v = fast_path_qkv(seed, 2, 3, tq, tk, 32, dtype)
    pos = torch.arange(tk) * (0.37 if floats else 1) + 3
    out = m.attend(q, k, v, pos[-tq:], pos, 0)
    assert out.dtype == dtype and out.shape == q.shape
    ang = pos.double()[:, None] * m.inv_freq.double()[None, :]
    cos, sin = ang.cos().to(dtype), ang.sin().to(dtype)  # the method rounds cos/sin to the compute dtype
    ref = float64_attention(_rotate_by_cos_sin(q, cos[-tq:], sin[-tq:]), _rotate_by_cos_sin(k, cos, sin), v, None)
    torch.testing.assert_close(out.double(), ref, **TOL[dtype])
    assert_same_gradients(out, ref, (q, k, v), seed, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_rotary_rotate_and_its_gradient_on_strided_inputs(dtype):
    rot = fast_path_method("rotary", d_model=48, n_heads=3)
    g = torch.Generator().manual_seed(7)
    base = torch.randn(2, 11, 3 * 48, generator=g).to(dtype).requires_grad_()
    x = base[..., 48:96].view(2, 11, 3, 16).transpose(1, 2)  # a strided (B, H, T, hd) view, as in the model
    cos, sin = rot._cos_sin(torch.arange(11), dtype)
    out = rot.rotate(x, cos, sin)
    ref = _rotate_by_cos_sin(x, cos, sin)
    tol = TOL.get(dtype, dict(rtol=1e-10, atol=1e-12))
    torch.testing.assert_close(out.double(), ref, **tol)
    (got,) = grads(out, (base,), 0)
    (want,) = grads(ref, (base,), 0)
    torch.testing.assert_close(got.double(), want.double(), **tol)
    assert got[..., :48].abs().max() == 0 and got[..., 96:].abs().max() == 0


# --- the scaled rotary rows under torch.compile: L_train and the evaluation length as Python ints ---


def _scaled(name: str) -> bool:
    return getattr(registry.build(model_config("tiny", name)), "scaling", "none") != "none"


SCALED = [n for n in registry.names() if _scaled(n)]


def fullgraph(fn, backend="eager"):
    return torch.compile(fn, backend=backend, fullgraph=True)


SETTINGS = [(n, {}) for n in SCALED] + [
    ("rotary_pi", {"factor": 4.0}),
    ("rotary_dynamic_ntk", {"factor": 2.0}),
    ("rotary_yarn", {"factor": 4.0}),
    ("rotary_llama3", {"factor": 8.0}),
    ("rotary_longrope", {"factor": 4.0}),
    ("rotary_yarn", {"train_len": 48}),
]


@pytest.mark.parametrize("length", [40, L_TRAIN, 100])  # below, at and beyond L_train
@pytest.mark.parametrize("name, options", SETTINGS, ids=[f"{n}{o or ''}" for n, o in SETTINGS])
def test_scaled_rotary_angles_traced_equal_eager_and_frequencies(name, options, length):
    """cos and sin as ``prepare`` hands them to the layers: eager equal to the frequencies the
    method reports (``frequencies``, what ``bench.py verify`` checks), traced equal to eager."""
    m = trained_tiny_model(name, L_TRAIN, **options).eval().method
    pos = torch.arange(length)
    eager = m.prepare(pos, pos, torch.float32)
    theta, mscale = m.frequencies(length)  # (hd/2,) float64, attention factor
    ang = pos.double()[:, None] * theta[None, :]
    assert torch.equal(eager.cos, (ang.cos() * mscale).float()) and torch.equal(eager.sin, (ang.sin() * mscale).float())
    traced = fullgraph(lambda p: m.prepare(p, p, torch.float32))(pos)
    assert torch.equal(traced.cos, eager.cos) and torch.equal(traced.sin, eager.sin)
    assert traced.in_encode == eager.in_encode


@pytest.mark.parametrize("name", [n if n == "rotary_dynamic_ntk" else pytest.param(n, marks=pytest.mark.slow) for n in SCALED])
def test_scaled_rotary_model_traced_equals_eager_beyond_train_len(name):
    model = trained_tiny_model(name, L_TRAIN).eval()
    x = torch.randint(0, 256, (2, 100))
    with torch.no_grad():
        torch.testing.assert_close(fullgraph(model)(x), model(x), rtol=1e-5, atol=1e-5)


def test_compiled_scaled_rotary_takes_key_positions_from_zero():
    model = trained_tiny_model("rotary_dynamic_ntk", L_TRAIN).eval()
    x = torch.randint(0, 256, (1, 100))
    with torch.no_grad():
        model(x, pos=torch.arange(100) + 7)  # eager reads the last position
        with pytest.raises(RuntimeError, match="compiled scaled rotary evaluation takes key positions as 0 .. L-1"):
            fullgraph(model)(x, pos=torch.arange(100) + 7)


def test_compiled_scaled_rotary_reads_trained_len_on_eval_and_on_load():
    """A graph takes L_train as read when the model entered eval mode or loaded a state dict; a
    buffer changed since is a one-line error when the graph runs, not a stale factor."""
    model = trained_tiny_model("rotary_pi", L_TRAIN).eval()
    assert model.method.trained_len_read == L_TRAIN
    compiled = fullgraph(model)
    x = torch.randint(0, 256, (1, 100))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
        model.method.trained_len.fill_(32)
        with pytest.raises(RuntimeError, match="trained_len changed after the model entered eval mode"):
            compiled(x)
        model.eval()
        assert model.method.trained_len_read == 32
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
        model.load_state_dict(trained_tiny_model("rotary_pi", 48).state_dict())
        assert model.method.trained_len_read == 48 and not model.method.training
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)


def test_rotary_training_attention_takes_the_blocked_backward_with_sdpas_gradients(monkeypatch):
    """On a CPU rotary's causal attention takes the faster path per length (posbench/core/causal.py):
    the same output and, within rounding, the same gradients as SDPA's backward, odd length, float32."""
    from posbench.core import causal

    if not causal.flash_here("cpu"):
        pytest.skip("torch's CPU flash op takes no attn_mask")
    m = method("rotary")
    pos = torch.arange(77)
    got = {}
    for blocked in (True, False):
        monkeypatch.setattr(causal, "blocked_backward_pays", lambda length, b=blocked: b)
        q, k, v = (x.requires_grad_() for x in qkv(77, 77, seed=3))
        out = m.attend(q, k, v, pos, pos, 0)
        got[blocked] = (out, *torch.autograd.grad(out, (q, k, v), torch.ones_like(out)))
    assert torch.equal(got[True][0], got[False][0])
    for a, b in zip(got[True][1:], got[False][1:]):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-5)
    assert m.attn_backend("cpu", torch.float32) == causal.BACKEND
