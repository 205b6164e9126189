"""Causal attention with a learnt per-key bias (the flash op's forward, the blocked GEMM backward)
against the plain float64 reference: values and every gradient, float32 and float64, odd lengths,
lengths across several backward blocks, one row."""

import pytest
import torch

from posbench.core import key_bias
from posbench.core.cpu_flash import CPU_FLASH_WITH_MASK
from tests.helpers.attention import qkv, reference_attention

pytestmark = pytest.mark.skipif(CPU_FLASH_WITH_MASK is None, reason="torch's CPU flash op takes no attn_mask")


def case(t, dtype, seed):
    q, k, v = (x.to(dtype).requires_grad_() for x in qkv(t, t, h=3, d=16, seed=seed))
    g = torch.Generator().manual_seed(seed + 1)
    c = (torch.randn(2, 3, t, generator=g) * 4).to(dtype).requires_grad_()  # one bias per key, batch and head
    dout = torch.randn(2, 3, t, 16, generator=g).to(dtype)
    return (q, k, v, c), dout


def reference(q, k, v, c):
    return reference_attention(q, k, v, c[..., None, :])


@pytest.mark.parametrize("t", [1, 7, 64, 65, 150])
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 2e-5)])
@pytest.mark.parametrize("seed", [0, 1])
def test_key_bias_attention_equals_the_reference_in_values_and_gradients(t, dtype, tol, seed):
    inputs, dout = case(t, dtype, seed)
    got = key_bias.key_bias_attention(*inputs)
    assert got.dtype == dtype and got.shape == inputs[0].shape
    grads = torch.autograd.grad(got, inputs, dout)
    want = reference(*inputs)
    want_grads = torch.autograd.grad(want, inputs, dout.double())
    torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol)
    for name, g, w in zip("qkvc", grads, want_grads):
        assert g.dtype == dtype, name
        torch.testing.assert_close(g.double(), w.double(), atol=tol, rtol=tol, msg=f"gradient of {name}")


@pytest.mark.parametrize("rows", [1, 8, 64])
def test_key_bias_backward_blocks_change_nothing(rows):
    """Any block height gives the same gradients (the diagonal block's causal mask, a last short block)."""
    (q, k, v, c), dout = case(37, torch.float64, 3)
    with torch.no_grad():
        out, lse = key_bias.key_bias_forward(q, k, v, c)
        got = key_bias.key_bias_backward(dout, (q, k, v, c, out, lse), rows)
    want = torch.autograd.grad(reference(q, k, v, c), (q, k, v, c), dout)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-10, rtol=1e-10)


def test_key_bias_gradient_ignores_future_keys_with_a_huge_bias():
    """A future key whose bias would overflow exp stays out of every gradient (no inf, no nan)."""
    (q, k, v, c), dout = case(20, torch.float32, 4)
    big = c.detach().clone()
    big[..., 10:] += 80.0  # exp2(log2(e) x 80 + ...) overflows float32 for the rows before key 10
    big.requires_grad_()
    grads = torch.autograd.grad(key_bias.key_bias_attention(q, k, v, big), (q, k, v, big), dout)
    want = torch.autograd.grad(reference(q, k, v, big), (q, k, v, big), dout.double())
    for g, w in zip(grads, want):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g.double(), w.double(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 2e-5)])
def test_values_narrower_than_the_keys_are_padded_for_the_forward_only(dtype, tol):
    """v (hv < hd): the flash op gets them padded with zeros, the output and dv come back at hv."""
    (q, k, _, c), _ = case(70, dtype, 5)
    v = torch.randn(2, 3, 70, 8, generator=torch.Generator().manual_seed(6)).to(dtype).requires_grad_()
    dout = torch.randn(2, 3, 70, 8, generator=torch.Generator().manual_seed(7)).to(dtype)
    got = key_bias.key_bias_attention(q, k, v, c)
    assert got.shape == v.shape
    grads = torch.autograd.grad(got, (q, k, v, c), dout)
    want = reference(q, k, v, c)
    want_grads = torch.autograd.grad(want, (q, k, v, c), dout.double())
    torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol)
    for g, w in zip(grads, want_grads):
        assert g.shape == w.shape
        torch.testing.assert_close(g.double(), w.double(), atol=tol, rtol=tol)
