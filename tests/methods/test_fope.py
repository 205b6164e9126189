"""FoPE (methods/fope.py): the authors' form (the default) against their released code's arithmetic
written inline, and the paper's form (``coefficients: paper``) against values computed by hand."""

import math

import pytest
import torch

from posbench.core.method import ModelConfig
from posbench.core.registry import build
from tests.helpers.attention import method, qkv, reference_attention
from tests.helpers.methods import encode, one_head


def test_fope_pair_is_a_fourier_series_over_the_kept_frequencies():
    # hd 4, base 4: w = [1, 1/2]; train_len 16 keeps both (2 pi / 16 = 0.39). a[0, 1] = 0.5,
    # a[1, 0] = -0.25: S_0(n) = e^{in} + 0.5 e^{in/2}, S_1(n) = e^{in/2} - 0.25 e^{in}.
    m = one_head("fope", 4, base=4.0, train_len=16, coefficients="paper")
    with torch.no_grad():
        m.fourier_coef.copy_(torch.tensor([[[0.0, 0.5], [-0.25, 0.0]]]))
    pos = torch.tensor([2])
    q, _ = encode(m, torch.tensor([1.0, 0.0, 0.0, 0.0]).view(1, 1, 1, 4), pos)  # pair 0 = (channel 0, channel 2)
    torch.testing.assert_close(q[0, 0, 0], torch.tensor([math.cos(2) + 0.5 * math.cos(1), 0, math.sin(2) + 0.5 * math.sin(1), 0]))
    q, _ = encode(m, torch.tensor([0.0, 1.0, 0.0, 0.0]).view(1, 1, 1, 4), pos)  # pair 1 = (channel 1, channel 3)
    torch.testing.assert_close(
        q[0, 0, 0], torch.tensor([0, math.cos(1) - 0.25 * math.cos(2), 0, math.sin(1) - 0.25 * math.sin(2)])
    )


def test_fope_zeroes_the_frequencies_below_the_floor():
    # train_len 8: 2 pi / 8 = 0.785 > 1/2, so pair 1 has frequency 0 (left as it is) and leaves
    # pair 0's series: S_0(n) = e^{in}, whatever the coefficients.
    m = one_head("fope", 4, base=4.0, train_len=8, coefficients="paper")
    with torch.no_grad():
        m.fourier_coef.copy_(torch.tensor([[[0.0, 0.5], [-0.25, 0.0]]]))
    assert m.kept().tolist() == [True, False]
    pos = torch.tensor([3])
    q, _ = encode(m, torch.tensor([1.0, 2.0, 0.0, 5.0]).view(1, 1, 1, 4), pos)
    torch.testing.assert_close(q[0, 0, 0], torch.tensor([math.cos(3), 2.0, math.sin(3), 5.0]))


def test_fope_records_the_training_length_when_not_given():
    m = one_head("fope", 4, base=4.0)
    assert m.kept().tolist() == [True, True]  # before training: nothing zeroed
    m.train().prepare(torch.arange(8), torch.arange(8), torch.float32)
    assert int(m.trained_len) == 8 and m.kept().tolist() == [True, False]
    m.eval().prepare(torch.arange(32), torch.arange(32), torch.float32)
    assert int(m.trained_len) == 8  # evaluation never moves it


def test_fope_without_coefficients_and_floor_is_rotary():
    fope, rotary = method("fope", sigma=0.0, coefficients="paper"), method("rotary")
    q, k, v = qkv(5, 9)
    pos = torch.arange(9)
    torch.testing.assert_close(fope.attend(q, k, v, pos[4:], pos, 1), rotary.attend(q, k, v, pos[4:], pos, 1))


@pytest.mark.parametrize("name", ["fope"])
def test_bad_options_are_one_line(name):
    with pytest.raises(ValueError, match=f"{name}: base must be a number > 1"):
        method(name, base=1)
    with pytest.raises(ValueError, match=r"^fope: coefficients must be one of authors, paper, got 'mine'$"):
        method(name, coefficients="mine")


def authors_rotation(m, x, pos):
    """yiju-zhao/Fourier-Position-Embedding, olmo/model.py FourierEmbedding (commit 3713108), as its
    arithmetic, float64: the K kept frequencies (w >= 2 pi / L_train) into d = min(K, hd/4) pairs
    through separate sine and cosine tables (eye_xavier_norm, gain sigma), the other pairs padded
    with cos = sin = 1, then t cos + rotate_half(t) sin. x (B, Hkv, T, hd), key head h's tables."""
    hd = x.shape[-1]
    w = m.inv_freq.double()
    L = int(m.trained_len)
    kept = w >= 2 * math.pi / L if L else torch.ones_like(w, dtype=torch.bool)  # before training: all kept
    n_kept = int(kept.sum())
    d = min(n_kept, hd // 4)
    std = m.sigma * math.sqrt(2 / (n_kept * d + m.cfg.n_heads * d))  # xavier_normal_ of (H, K, d)
    eye = torch.zeros(n_kept, d, dtype=torch.float64)
    step = math.ceil(n_kept / d)
    for i in range(d):
        if i * step < n_kept:  # get_step_eye: K 5, d 4 sets rows 0, 2, 4 (not 6)
            eye[i * step, i] = 1.0
    ang = pos.double()[:, None] * w[kept][None, :]  # (T, K)
    out = []
    for h in range(x.shape[1]):
        sin_coef = m.sin_noise[h, :n_kept, :d].double() * std + eye
        cos_coef = m.cos_noise[h, :n_kept, :d].double() * std + eye
        f_sin = torch.nn.functional.pad(ang.sin() @ sin_coef, (0, hd // 2 - d), value=1.0)
        f_cos = torch.nn.functional.pad(ang.cos() @ cos_coef, (0, hd // 2 - d), value=1.0)
        f_sin, f_cos = torch.cat([f_sin, f_sin], -1), torch.cat([f_cos, f_cos], -1)
        t = x[:, h].double()
        x1, x2 = t.chunk(2, -1)
        out.append(t * f_cos + torch.cat([-x2, x1], -1) * f_sin)
    return torch.stack(out, 1)


def test_authors_spread_at_the_cpu_shape():
    # hd 32, 4 heads, L_train 64: w_m = 10000^(-m/16) >= 2 pi / 64 for m < 5: K = d = 5, std 0.063
    m = build(ModelConfig(d_model=128, n_heads=4, n_layers=1, method="fope", method_options={"train_len": 64}))
    cos_table, sin_table, used = m.authors_tables()
    assert used.tolist() == [True] * 5 + [False] * 11
    std = 0.3 * math.sqrt(2 / (5 * 5 + 4 * 5))
    assert std == pytest.approx(0.0632, abs=1e-4)
    torch.testing.assert_close(sin_table[:, :5, :5], m.sin_noise[:, :5, :5].double() * std + torch.eye(5, dtype=torch.float64))
    assert cos_table[:, 5:].abs().sum() == 0 and cos_table[:, :, 5:].abs().sum() == 0


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("kv_heads,train_len,seed", [(4, 24, 0), (2, 64, 1), (1, None, 2)])
def test_authors_form_equals_their_code(kv_heads, train_len, seed, dtype):
    # head dim 16, base 100: L_train 24 keeps 3 of 8 pairs (d 3), 64 keeps 5 (d 4: a step eye,
    # ceil(5/4) = 2), None (before training) all 8 (d 4, step 2); GQA with 2 and 1 key heads;
    # 7 decode rows of 11 keys (odd lengths)
    options = {"train_len": train_len, "base": 100.0}
    cfg = ModelConfig(d_model=64, n_heads=4, n_layers=1, n_kv_heads=kv_heads, method="fope", method_options=options)
    torch.manual_seed(seed)
    m = build(cfg)
    q, k, v = qkv(7, 11, seed=seed, dtype=dtype)
    k, v = k[:, :kv_heads], v[:, :kv_heads]
    pos = torch.arange(11)
    assert int(m.authors_tables()[2].sum()) == {24: 3, 64: 4, None: 4}[train_len]
    q.requires_grad_(True)
    k.requires_grad_(True)
    group = 4 // kv_heads
    got = m.attend(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), pos[4:], pos, 0)
    q_ref = authors_rotation(m, q.reshape(2, kv_heads, group * 7, 16).detach(), pos[4:].repeat(group)).view(2, 4, 7, 16)
    k_ref = authors_rotation(m, k.detach(), pos).repeat_interleave(group, 1)
    want = reference_attention(q_ref, k_ref, v.repeat_interleave(group, 1))
    tol = dict(atol=1e-12, rtol=1e-12) if dtype == torch.float64 else dict(atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(got.double(), want, **tol)
    # gradient: through the reference, the same
    q64, k64 = q.detach().double().requires_grad_(True), k.detach().double().requires_grad_(True)
    q_r = authors_rotation(m, q64.reshape(2, kv_heads, group * 7, 16), pos[4:].repeat(group)).view(2, 4, 7, 16)
    ref = reference_attention(q_r, authors_rotation(m, k64, pos).repeat_interleave(group, 1), v.repeat_interleave(group, 1))
    g = torch.randn(ref.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    (ref * g).sum().backward()
    (got * g.to(dtype)).sum().backward()
    torch.testing.assert_close(q.grad.double(), q64.grad, **tol)
    torch.testing.assert_close(k.grad.double(), k64.grad, **tol)
