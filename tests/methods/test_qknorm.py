"""The qknorm modifier (methods/qknorm.py): normalized scores computed by hand."""

import math

import torch

from tests.helpers.methods import one_head


def test_qknorm_normalizes_each_head_to_rms_one_times_its_gain():
    # q = [3, 4] has rms 5 / sqrt 2: normalized [3, 4] sqrt 2 / 5. k_0 = 7 [4, -3] (orthogonal to q:
    # score 0), k_1 = 0.1 [3, 4]: normalized like q, q.k / sqrt 2 = 2 / sqrt 2 = sqrt 2.
    # Query 1 weighs [1, e^sqrt2] / (1 + e^sqrt2); gains g_q = 2: the score doubles.
    m = one_head("nope+qknorm")
    q = torch.tensor([3.0, 4.0]).expand(1, 1, 2, 2)
    k = torch.tensor([[[[28.0, -21.0], [0.3, 0.4]]]])
    v = torch.eye(2)[None, None]
    pos = torch.arange(2)
    e = math.exp(math.sqrt(2))
    torch.testing.assert_close(m.attend(q, k, v, pos, pos, 0)[0, 0, 1], torch.tensor([1, e]) / (1 + e))
    with torch.no_grad():
        m.qk_gain[0, 0].fill_(2.0)
    torch.testing.assert_close(m.attend(q, k, v, pos, pos, 0)[0, 0, 1], torch.tensor([1, e * e]) / (1 + e * e))
