"""The RoPE/NoPE hybrid (methods/rope_nope_hybrid.py): which layers rotate, against float64 references."""

import pytest
import torch

from tests.helpers.attention import method, qkv, reference_attention, rotate_reference


@pytest.mark.parametrize("every, nope_layers", [(4, {3}), (2, {1, 3}), (1, {0, 1, 2, 3})])
def test_rope_nope_hybrid_layers(every, nope_layers):
    m = method("rope_nope_hybrid", every=every)  # 4 layers
    q, k, v = qkv(7, 7, d=16)
    pos = torch.arange(7) + 5
    inv_freq = 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    rope = reference_attention(rotate_reference(q, pos, inv_freq), rotate_reference(k, pos, inv_freq), v)
    nope = reference_attention(q, k, v)
    for layer in range(4):
        out = m.attend(q, k, v, pos, pos, layer).double()
        torch.testing.assert_close(out, nope if layer in nope_layers else rope, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="rope_nope_hybrid: every must be a positive integer"):
        method("rope_nope_hybrid", every=0)
