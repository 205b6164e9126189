"""PaTH and PaTH-FoX (methods/path.py) against scores computed by hand from their papers'
equations."""

import math

import pytest
import torch

from tests.helpers.attention import method, qkv
from tests.helpers.methods import module_of, one_head


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
    m = one_head("path")
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
    m = one_head("path_fox")
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
