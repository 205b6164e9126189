"""Stick-breaking attention and PaTH (methods/stickbreaking.py, methods/path.py) against weights
computed by hand from their papers' equations."""

import math
import sys

import pytest
import torch

from posbench.core import registry
from posbench.core.method import ModelConfig
from tests.helpers.attention import method, qkv


def module_of(name):
    registry.get(name)  # imports the method file
    return next(m for n, m in sys.modules.items() if n.startswith(f"posbench_methods_{name}_"))


def test_stick_breaking_weights_nearest_first_with_the_remainder_on_the_query():
    # hd 1, q = 1. Query 2: z_21 = 0 (beta 1/2), z_20 = ln 3 (beta 3/4): A_21 = 1/2,
    # A_20 = 3/4 (1 - 1/2) = 3/8, remainder 1/8 to v_2. Query 1: A_10 = 3/4, remainder 1/4. Query 0: v_0.
    sb = module_of("stickbreaking").stick_breaking
    q = torch.ones(1, 1, 3, 1)
    k = torch.tensor([math.log(3), 0.0, 0.0]).view(1, 1, 3, 1)
    v = torch.eye(3).view(1, 1, 3, 3)
    out = sb(q, k, v)[0, 0]
    torch.testing.assert_close(out, torch.tensor([[1.0, 0, 0], [3 / 4, 1 / 4, 0], [3 / 8, 1 / 2, 1 / 8]]))
    # the query's own key too (attend_current): A_22 = 1/2, A_21 = 1/4, A_20 = 3/16, remainder 1/16
    torch.testing.assert_close(sb(q, k, v, attend_current=True)[0, 0, 2], torch.tensor([3 / 16, 1 / 4, 9 / 16]))
    # window 2: query 2 sees key 1 only: A_21 = 1/2, remainder 1/2
    torch.testing.assert_close(sb(q, k, v, window=2)[0, 0, 2], torch.tensor([0.0, 1 / 2, 1 / 2]))
    # a decode step (Tq 1) is row 2; rows in chunks of 1 change nothing
    torch.testing.assert_close(sb(q[:, :, 2:], k, v)[0, 0, 0], out[2])
    torch.testing.assert_close(sb(q, k, v, chunk=1)[0, 0], out)


def test_stick_breaking_chunks_equal_one_block_in_float64():
    sb = module_of("stickbreaking").stick_breaking
    q, k, v = (x.double() for x in qkv(37, 41))
    torch.testing.assert_close(sb(q, k, v, chunk=8), sb(q, k, v, chunk=64))
    # the weights, from the product formula directly (no log space)
    z = torch.sigmoid(q @ k.transpose(-1, -2) / 4.0)  # (B, H, Tq, Tk), hd 16
    i, row = 36, 40  # the last query sits at key index 40 (Tk - Tq = 4)
    want = torch.zeros_like(v[:, :, 0])
    rest = torch.ones_like(z[:, :, i, 0])
    for j in range(row - 1, -1, -1):
        want += (z[:, :, i, j] * rest)[..., None] * v[:, :, j]
        rest = rest * (1 - z[:, :, i, j])
    want += rest[..., None] * v[:, :, row]
    torch.testing.assert_close(sb(q, k, v)[:, :, i], want)


def tiny(name, **options):
    """One layer, one head of dimension 2."""
    return registry.build(ModelConfig(d_model=2, n_heads=1, n_layers=1, method=name, method_options=options))


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
    m = tiny("path")
    hand_path(m)
    w, beta = m.transforms(K, 0)
    torch.testing.assert_close(beta, torch.full((1, 1, 3), 1.5))
    q = torch.zeros(1, 1, 3, 2)
    q[0, 0, 2] = Q2
    scores = module_of("path").path_scores(q / math.sqrt(2), K, w, beta)
    torch.testing.assert_close(scores[0, 0, 2], SCORES_2)
    v = torch.eye(3)[:, :2].reshape(1, 1, 3, 2)
    pos = torch.arange(3)
    torch.testing.assert_close(m.attend(q, K, v, pos, pos, 0)[0, 0, 2], SCORES_2.softmax(-1) @ v[0, 0])
    # a decode step from the cache's encoded keys gives the same row
    state = m.prepare(pos, pos, torch.float32)
    _, cached = m.encode_qk(q, K, 0, state)
    torch.testing.assert_close(m.attend(q[:, :, 2:], cached, v, pos[2:], pos, 0, state)[0, 0, 0], SCORES_2.softmax(-1) @ v[0, 0])


def test_path_fox_adds_the_forget_gates_sum_between_key_and_query():
    # gate w = 0, b = 0: log f = ln 1/2 per token, F_j = j ln 1/2 (F_0 = 0): score_2j += (2 - j) ln 1/2
    m = tiny("path_fox")
    hand_path(m)
    with torch.no_grad():
        m.gate_w.zero_()
        m.gate_b.zero_()
    q = torch.zeros(1, 1, 3, 2)
    q[0, 0, 2] = Q2
    v = torch.eye(3)[:, :2].reshape(1, 1, 3, 2)
    pos = torch.arange(3)
    scores = SCORES_2 + torch.tensor([2.0, 1.0, 0.0]) * math.log(0.5)
    torch.testing.assert_close(m.attend(q, K, v, pos, pos, 0)[0, 0, 2], scores.softmax(-1) @ v[0, 0])


def test_path_with_identity_transforms_is_plain_attention():
    # beta -> 0 (b = -30): every H_t = I, so the scores are q . k: nope's attention
    m, nope = method("path", beta_bias=-30.0), method("nope")
    q, k, v = qkv(6, 9)
    pos = torch.arange(9)
    torch.testing.assert_close(m.attend(q, k, v, pos[3:], pos, 1), nope.attend(q, k, v, pos[3:], pos, 1), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "name,options,message",
    [
        ("stickbreaking", {"chunk": 0}, "stickbreaking: chunk must be a positive integer"),
        ("stickbreaking", {"attend_current": 1}, "stickbreaking: attend_current must be true or false"),
        ("path_fox", {"beta_bias": "x"}, "path_fox: beta_bias must be a number"),
        ("path", {"block": 0}, "path: block must be a positive integer"),
    ],
)
def test_bad_options_are_one_line(name, options, message):
    with pytest.raises(ValueError, match=message):
        method(name, **options)


@pytest.mark.parametrize("length,block", [(37, 8), (130, 16), (5, 8), (16, 16)])
def test_path_by_blocks_equals_the_scan(length, block):
    path = module_of("path")
    g = torch.Generator().manual_seed(length)
    q, k = (torch.randn(2, 3, length, 6, generator=g, dtype=torch.float64) for _ in range(2))
    w = torch.nn.functional.normalize(torch.randn(2, 3, length, 6, generator=g, dtype=torch.float64), dim=-1)
    beta = 2 * torch.rand(2, 3, length, generator=g, dtype=torch.float64)
    seen = torch.ones(length, length, dtype=torch.bool).tril()
    want = path.path_scores(q, k, w, beta)[..., seen]
    torch.testing.assert_close(path.path_scores_blocked(q, k, w, beta, block)[..., seen], want, rtol=1e-12, atol=1e-12)
