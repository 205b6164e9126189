"""PaTH and PaTH-FoX (methods/path.py) against scores computed by hand from their papers'
equations, and against the exact scan assembled from the method's own transforms."""

import math

import pytest
import torch

from posbench.attention.householder import path_scores
from posbench.core import registry
from posbench.core.method import ModelConfig
from posbench.core.outcome import Unavailable
from tests.helpers.attention import method, qkv
from tests.helpers.methods import module_of, one_head

FIRST = dict(w_source="key", short_conv=False)  # posbench's first form: the head's own key, no convolution


def hand_path(m):
    """W = I, u = 0, b = ln 3: w_t = k_t / |k_t|, beta = 2 sigmoid(ln 3) = 3/2."""
    with torch.no_grad():
        m.w_proj.copy_(torch.eye(2)[None, None])
        m.beta_u.zero_()
        m.beta_b.fill_(math.log(3))


# k_0 = [1, 0], k_1 = [0, 1], k_2 = [1, 1]; q_2 = [2, 0]; H_t = I - 3/2 w_t w_t^T.
# H_1 k_0 = k_0 (w_1 is orthogonal to it); H_2 k_0 = [1, 0] - 3/4 [1, 1] = [1/4, -3/4]: score 1/2.
# H_2 k_1 = [0, 1] - 3/4 [1, 1] = [-3/4, 1/4]: score -3/2. q_2 . k_2 = 2. All / sqrt 2.
K = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]).view(1, 1, 3, 2)
Q2 = torch.tensor([2.0, 0.0])
SCORES_2 = torch.tensor([0.5, -1.5, 2.0]) / math.sqrt(2)


def test_path_scores_carry_the_key_through_the_transforms_between():
    m = one_head("path", **FIRST)
    hand_path(m)
    w, beta = m.transforms(K, 0)
    w = m.directions(w, 0)
    torch.testing.assert_close(beta, torch.full((1, 1, 3), 1.5))
    q = torch.zeros(1, 1, 3, 2)
    q[0, 0, 2] = Q2
    scores = path_scores(q / math.sqrt(2), K, w, beta)
    torch.testing.assert_close(scores[0, 0, 2], SCORES_2)
    v = torch.eye(3)[:, :2].reshape(1, 1, 3, 2)
    pos = torch.arange(3)
    torch.testing.assert_close(m.attend(q, K, v, pos, pos, 0)[0, 0, 2], SCORES_2.softmax(-1) @ v[0, 0])
    # a decode step from the cache's encoded keys gives the same row
    state = m.prepare(pos, pos, torch.float32)
    _, cached = m.encode_qk(q, K, 0, state)
    torch.testing.assert_close(m.attend(q[:, :, 2:], cached, v, pos[2:], pos, 0, state)[0, 0, 0], SCORES_2.softmax(-1) @ v[0, 0])


def hand_fox(**options):
    # gate w = 0, b = 0: log f = ln 1/2 per token, F_j = j ln 1/2 (F_0 = 0): score_2j += (2 - j) ln 1/2 (x scale)
    m = one_head("path_fox", **FIRST, **options)
    hand_path(m)
    with torch.no_grad():
        m.gate_w.zero_()
        m.gate_b.zero_()
    q = torch.zeros(1, 1, 3, 2)
    q[0, 0, 2] = Q2
    v = torch.eye(3)[:, :2].reshape(1, 1, 3, 2)
    pos = torch.arange(3)
    return m.attend(q, K, v, pos, pos, 0)[0, 0, 2], v


def test_path_fox_adds_the_forget_gates_sum_between_key_and_query():
    out, v = hand_fox(gate_scale="none")  # FoX's convention: unscaled
    scores = SCORES_2 + torch.tensor([2.0, 1.0, 0.0]) * math.log(0.5)
    torch.testing.assert_close(out, scores.softmax(-1) @ v[0, 0])


def test_path_fox_scales_the_gate_with_the_scores_by_default():
    # fla's naive_path_attn and parallel_path_fwd: (s + F_i - F_j) / sqrt(hd), hd = 2 here
    out, v = hand_fox()
    scores = SCORES_2 + torch.tensor([2.0, 1.0, 0.0]) * math.log(0.5) / math.sqrt(2)
    torch.testing.assert_close(out, scores.softmax(-1) @ v[0, 0])


@pytest.mark.parametrize("gate_scale,decay", [(None, 0.5 ** (1 / math.sqrt(32))), ("none", 0.5)])
def test_path_fox_decays_per_token_at_initialisation_as_fla_does(gate_scale, decay):
    # zero keys and queries at the built parameters: every score 0, every gate logit its bias 0,
    # so attention is exp(scale (F_i - F_j)): 0.885 per token back at head dim 32 (fla), 0.5 unscaled
    m = one_head("path_fox", hd=32, **({"gate_scale": gate_scale} if gate_scale else {}))
    tk = 10
    q, k = torch.zeros(1, 1, tk, 32), torch.zeros(1, 1, tk, 32)
    v = torch.eye(32)[:tk].view(1, 1, tk, 32)  # row i of the output: query i's probabilities
    probs = m.attend(q, k, v, torch.arange(tk), torch.arange(tk), 0)[0, 0, -1, :tk]
    torch.testing.assert_close(probs[:-1] / probs[1:], torch.full((tk - 1,), decay))
    if gate_scale is None:
        assert round(decay, 3) == 0.885


def test_path_with_identity_transforms_is_plain_attention():
    # beta -> 0 (b = -30): every H_t = I, so the scores are q . k: nope's attention
    m, nope = method("path", beta_bias=-30.0), method("nope")
    q, k, v = qkv(6, 9)
    pos = torch.arange(9)
    torch.testing.assert_close(m.attend(q, k, v, pos[3:], pos, 1), nope.attend(q, k, v, pos[3:], pos, 1), atol=1e-5, rtol=1e-5)


def test_short_conv_gives_token_t_a_direction_from_tokens_t_minus_2_to_t():
    m = method("path")
    k = torch.randn(2, 4, 12, 16)
    w = m.directions(m.transforms(k, 0)[0], 0)
    k2 = k.clone()
    k2[:, :, 5] += 1.0
    changed = (m.directions(m.transforms(k2, 0)[0], 0) - w).abs().amax((0, 1, 3)) > 0
    assert changed.tolist() == [t in (5, 6, 7) for t in range(12)]
    plain = method("path", short_conv=False)
    changed = (plain.directions(plain.transforms(k2, 0)[0], 0) - plain.directions(plain.transforms(k, 0)[0], 0)).abs().amax(
        (0, 1, 3)
    ) > 0
    assert changed.tolist() == [t == 5 for t in range(12)]


@pytest.mark.parametrize("w_source,reads_other_heads", [("input", True), ("key", False)])
def test_w_source_input_reads_every_key_head_and_key_its_own(w_source, reads_other_heads):
    m = method("path", w_source=w_source, short_conv=False)
    k = torch.randn(2, 4, 5, 16)
    k2 = k.clone()
    k2[:, 1] += 1.0  # key head 1 only
    (w, beta), (w2, beta2) = m.transforms(k, 0), m.transforms(k2, 0)
    assert (not torch.equal(w[:, 0], w2[:, 0])) == reads_other_heads
    assert (not torch.equal(beta[:, 0], beta2[:, 0])) == reads_other_heads


def reference_attend(m, q, k, v, layer):
    """Softmax of the scan's scores (+ the forget gate by hand) from the method's own transforms;
    q (B, H, Tq, hd), raw k and v (B, Hkv, Tk, hd)."""
    hd, group = q.shape[-1], q.shape[1] // k.shape[1]
    w, beta = m.transforms(k, layer)
    w = m.directions(w, layer)
    keys, w, beta, vals = (x.repeat_interleave(group, 1) for x in (k, w, beta, v))
    scores = path_scores(q / math.sqrt(hd), keys, w, beta)
    if m.forget:
        log_f = m.log_gate(k, layer)  # (B, Hkv, Tk, G): query head h reads key head h // G, column h % G
        log_f = torch.stack([log_f[:, h // group, :, h % group] for h in range(q.shape[1])], 1)
        big_f = torch.cat([torch.zeros_like(log_f[..., :1]), log_f[..., 1:]], -1).cumsum(-1)
        if m.gate_scale == "sqrt_dim":
            big_f = big_f / math.sqrt(hd)
        tq, tk = q.shape[-2], k.shape[-2]
        scores = scores + big_f[..., tk - tq :, None] - big_f[..., None, :]
    i = torch.arange(q.shape[-2])[:, None] + k.shape[-2] - q.shape[-2]
    scores = scores.masked_fill(torch.arange(k.shape[-2])[None, :] > i, float("-inf"))
    return scores.softmax(-1) @ vals


@pytest.mark.parametrize("options", [{}, FIRST, {"w_source": "key"}], ids=["authors", "first", "key+conv"])
@pytest.mark.parametrize("name", ["path", "path_fox"])
@pytest.mark.parametrize("tq,tk", [(37, 37), (5, 100), (1, 70)])
def test_attend_equals_the_scan_with_gqa_decode_rows_and_gradients(name, options, tq, tk):
    cfg = ModelConfig(d_model=64, n_heads=4, n_kv_heads=2, n_layers=2, method=name, method_options={**options, "block": 16})
    m = registry.build(cfg).double()
    g = torch.Generator().manual_seed(tk + tq)
    with torch.no_grad():  # parameters large enough that every part of the method shows
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3)
    q = torch.randn(2, 4, tq, 16, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 2, tk, 16, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 2, tk, 16, generator=g, dtype=torch.float64, requires_grad=True)
    pos = torch.arange(tk)
    _, cached = m.encode_qk(q, k, 1, None)  # the cache's keys, expanded to the query heads as the model does
    fast = m.attend(q, cached.repeat_interleave(2, 1), v.repeat_interleave(2, 1), pos[tk - tq :], pos, 1)
    slow = reference_attend(m, q, k, v, 1)
    torch.testing.assert_close(fast, slow, rtol=1e-10, atol=1e-10)
    leaves = [q, k, v, *m.parameters()]
    grad = torch.randn(fast.shape, generator=g, dtype=torch.float64)
    for a, b in zip(
        torch.autograd.grad(fast, leaves, grad, allow_unused=True), torch.autograd.grad(slow, leaves, grad, allow_unused=True)
    ):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize(
    "name,options,message",
    [
        pytest.param(
            "path_fox",
            {"beta_bias": "x"},
            "path_fox: beta_bias must be a number",
            id="path_fox-options2-path_fox: beta_bias must be a number",
        ),
        pytest.param(
            "path",
            {"block": 0},
            "path: block must be a positive integer",
            id="path-options3-path: block must be a positive integer",
        ),
        pytest.param("path", {"w_source": "layer"}, "path: w_source must be one of input, key, got 'layer'", id="w_source"),
        pytest.param("path", {"short_conv": "yes"}, "path: short_conv must be one of True, False, got 'yes'", id="short_conv"),
        pytest.param("path_fox", {"gate_scale": "half"}, "path_fox: gate_scale must be one of sqrt_dim, none", id="gate_scale"),
        pytest.param(
            "path", {"gate_scale": "none"}, "path: gate_scale applies to path_fox's forget gate only", id="gate_scale-path"
        ),
    ],
)
def test_bad_options_are_one_line(name, options, message):
    with pytest.raises(ValueError, match=message):
        method(name, **options)


def fake_fla(calls):
    """fla's ``parallel_path_attention`` contract in plain math: q (B, T, HQ, D), k, v, w (B, T, H, D),
    beta (B, T, H), g = log f (B, T, HQ) summed here, softmax((s + G_i - G_j) * scale) over j <= i."""

    def kernel(q, k, v, w, beta, g, scale):
        calls.append(q.shape)
        q, k, v, w, beta = (x.transpose(1, 2) for x in (q, k, v, w, beta))
        group = q.shape[1] // k.shape[1]
        k, v, w, beta = (x.repeat_interleave(group, 1) for x in (k, v, w, beta))
        scores = path_scores(q, k, w, beta)
        if g is not None:
            big_g = g.transpose(1, 2).double().cumsum(-1)
            scores = scores + big_g[..., :, None] - big_g[..., None, :]
        t = q.shape[-2]
        scores = (scores * scale).masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        return (scores.softmax(-1) @ v).transpose(1, 2), None

    return kernel


@pytest.mark.parametrize("name,options", [("path", {}), ("path_fox", {}), ("path_fox", {"gate_scale": "none"})])
def test_kernel_fla_hands_fla_its_conventions_and_decode_rows_stay_here(monkeypatch, name, options):
    calls = []
    monkeypatch.setattr(module_of("path"), "fla_kernel", lambda device: fake_fla(calls))
    cfg = dict(d_model=64, n_heads=4, n_kv_heads=2, n_layers=2, method=name)
    torch.manual_seed(0)
    fla = registry.build(ModelConfig(**cfg, method_options={**options, "kernel": "fla"})).double()
    here = registry.build(ModelConfig(**cfg, method_options={**options, "kernel": "torch"})).double()
    here.load_state_dict(fla.state_dict())
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 4, 20, 16, generator=g, dtype=torch.float64)
    k, v = (torch.randn(2, 2, 20, 16, generator=g, dtype=torch.float64) for _ in range(2))
    _, cached = fla.encode_qk(q, k, 1, None)
    pos = torch.arange(20)
    for tq in (20, 3):  # a whole sequence goes to fla; decode rows (Tq < Tk) stay on the UT path
        got = fla.attend(q[:, :, 20 - tq :], cached, v, pos[20 - tq :], pos, 1)
        torch.testing.assert_close(
            got, here.attend(q[:, :, 20 - tq :], cached, v, pos[20 - tq :], pos, 1), rtol=1e-10, atol=1e-10
        )
    assert calls == [(2, 20, 4, 16)]
    assert fla.attn_backend("cuda", torch.bfloat16).startswith("fla parallel_path_attention")


def test_kernel_fla_without_cuda_and_fla_core_is_unavailable():
    m = method("path", kernel="fla")
    q, k, v = qkv(6, 6)
    with pytest.raises(
        Unavailable, match=r"^path: kernel fla unavailable: needs CUDA and fla-core \(pip install posbench\[fla\]\)$"
    ):
        m.attend(q, k, v, torch.arange(6), torch.arange(6), 0)
    assert (
        method("path")
        .attn_backend("cpu", torch.float32)
        .endswith("(fla's path_attn kernel unavailable: needs CUDA and fla-core (pip install posbench[fla]))")
    )


@pytest.mark.parametrize("name", ["path", "path_fox"])
def test_a_model_trains_under_bfloat16_autocast_with_w_kept_in_float32(name):
    """The short convolution runs outside autocast: under bfloat16 autocast it made w bfloat16
    beside float32 keys, and the UT transform's first matmul refused the mix."""
    from posbench.core.model import build_model, lm_loss

    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=64, n_layers=2, d_model=32, n_heads=4, d_ff=64, method=name)).train()
    idx = torch.randint(0, 64, (2, 38), generator=torch.Generator().manual_seed(1))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = lm_loss(model(idx[:, :-1]), idx[:, 1:])
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.method.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
