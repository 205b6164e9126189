"""The gate modifier (methods/gate.py): output gates computed by hand."""

import math

import torch

from tests.helpers.methods import one_head


def test_gate_scales_each_querys_output_by_the_sigmoid_of_its_own_values():
    # q = 0: uniform weights. w = [1, 0], b = 0; v_0 = [ln 3, 0], v_1 = 0.
    # Query 0: o = v_0, gate sigmoid(ln 3) = 3/4. Query 1: o = v_0 / 2, gate sigmoid(0) = 1/2.
    m = one_head("nope+gate")
    with torch.no_grad():
        m.out_gate_w.copy_(torch.tensor([[[1.0, 0.0]]]))
        m.out_gate_b.zero_()
    q, k = torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2)
    v = torch.tensor([[[[math.log(3), 0.0], [0.0, 0.0]]]])
    pos = torch.arange(2)
    out = m.attend(q, k, v, pos, pos, 0)[0, 0]
    torch.testing.assert_close(out, torch.tensor([[0.75 * math.log(3), 0.0], [0.25 * math.log(3), 0.0]]))
    # a decode step: the query's values are the cache's last row
    torch.testing.assert_close(m.attend(q[:, :, 1:], k, v, pos[1:], pos, 0)[0, 0, 0], out[1])
