"""The RoPE/NoPE hybrid (methods/rope_nope_hybrid.py): which layers rotate, against float64 references."""

import pytest
import torch

from posbench.attention import windows
from tests.helpers.attention import method, qkv, reference_attention, rotate_reference
from tests.helpers.methods import module_of


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


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("tq,tk", [(301, 301), (290, 333)])
def test_windowed_rope_layers_by_blocks_equal_the_masked_reference(tq, tk, dtype, monkeypatch):
    # swan's layout with window 16: a model forward (q, k rotated by encode_qk) at 301 queries
    # takes posbench.attention.windows' blocks; attend without state (raw q, k) the (L, L) mask.
    # Odd lengths, decode rows (Tq < Tk), GQA-expanded keys, values and gradients.
    from posbench.core.model import model_config
    from posbench.core.registry import build

    m = build(model_config("tiny", "swan", method_options={"window": 16}))
    hybrid = module_of("rope_nope_hybrid")
    calls = []
    monkeypatch.setattr(hybrid, "window_attention", lambda *a: calls.append(1) or windows.window_attention(*a))
    g = torch.Generator().manual_seed(tq)
    q = torch.randn(2, 4, tq, 32, generator=g, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(2, 2, tk, 32, generator=g, dtype=dtype).repeat_interleave(2, 1).requires_grad_(True) for _ in range(2))
    pos = torch.arange(tk)
    state = m.prepare(pos[tk - tq :], pos, dtype)
    q_enc, _ = m.encode_qk(q, q[:, :, :1], 0, state)  # the queries at q_pos
    _, k_enc = m.encode_qk(k[:, :, :1], k, 0, m.prepare(pos, pos, dtype))  # every key at k_pos
    got = m.attend(q_enc, k_enc, v, pos[tk - tq :], pos, 0, state)
    want = m.attend(q, k, v, pos[tk - tq :], pos, 0)
    assert calls == [1]  # the model forward's call took the blocks, the reference the mask
    tol = dict(atol=1e-12, rtol=1e-12) if dtype == torch.float64 else dict(atol=2e-6, rtol=2e-5)
    torch.testing.assert_close(got, want, **tol)
    grad = torch.randn(got.shape, generator=g, dtype=dtype)
    grads = torch.autograd.grad((got * grad).sum(), (q, k, v))
    for a, b in zip(grads, torch.autograd.grad((want * grad).sum(), (q, k, v))):
        torch.testing.assert_close(a, b, **tol)
