"""Stick-breaking attention (methods/stickbreaking.py) against weights computed by hand from its
paper's equations, and its remainder options against the authors' layers."""

import math

import pytest
import torch

from tests.helpers.attention import method, qkv
from tests.helpers.methods import module_of


def self_remainder(q, k, v, **options):
    """The reference with the remainder on the query's own value (the authors' test reference)."""
    sb = module_of("stickbreaking")
    o, rest = sb.stick_breaking(q, k, v, **options)
    return o + rest[..., None] * sb.own_values(v, q.shape[-2])


def test_stick_breaking_weights_nearest_first_with_the_remainder_on_the_query():
    # hd 1, q = 1. Query 2: z_21 = 0 (beta 1/2), z_20 = ln 3 (beta 3/4): A_21 = 1/2,
    # A_20 = 3/4 (1 - 1/2) = 3/8, remainder 1/8 to v_2. Query 1: A_10 = 3/4, remainder 1/4. Query 0: v_0.
    sb = self_remainder
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
    sb = self_remainder
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


def test_remainder_none_by_default_learned_and_self_as_options():
    # Same example as above (hd 1): query 2's weights 3/8, 1/2 and rest 1/8; query 0 sees no key.
    q = torch.ones(1, 1, 3, 1)
    k = torch.tensor([math.log(3), 0.0, 0.0]).view(1, 1, 3, 1)
    v = torch.eye(3).view(1, 1, 3, 3)
    pos = torch.arange(3)

    def attend(**options):
        m = method("stickbreaking", **options)  # 4 heads of 16: one head's worth used, hd 1 here
        return m, m.attend(q, k, v, pos, pos, 1)[0, 0]

    m, out = attend()
    assert m.remainder == "none"  # fla's layer and dolomite-engine's SBAttention drop the rest
    torch.testing.assert_close(out, torch.tensor([[0.0, 0, 0], [3 / 4, 0, 0], [3 / 8, 1 / 2, 0]]))
    _, out = attend(remainder="self")
    torch.testing.assert_close(out[2], torch.tensor([3 / 8, 1 / 2, 1 / 8]))
    # learned: o + rest * b_h (dolomite-engine's head_bias), zeros at start, one vector per layer and head
    m = method("stickbreaking", remainder="learned")
    assert m.head_bias.shape == (4, 4, 16) and not m.head_bias.any()
    q4, k4, v4 = (x.expand(1, 4, 3, -1) for x in (q, k, torch.eye(3)[:, :1].view(1, 1, 3, 1)))
    with torch.no_grad():
        m.head_bias[1, :, 0] = torch.tensor([10.0, 20.0, 30.0, 40.0])
    got = m.attend(q4, k4, v4, pos, pos, 1)[0, :, :, 0]  # (H, Tq): v = [1, 0, 0], the bias' first channel
    rest = torch.tensor([1.0, 1 / 4, 1 / 8])
    want = torch.tensor([0.0, 3 / 4, 3 / 8])[None] + rest[None] * torch.tensor([10.0, 20.0, 30.0, 40.0])[:, None]
    torch.testing.assert_close(got, want)
    got.sum().backward()
    assert m.head_bias.grad[1, :, 0].eq(rest.sum()).all() and not m.head_bias.grad[0].any()


@pytest.mark.parametrize(
    "name,options,message",
    [
        pytest.param(
            "stickbreaking",
            {"chunk": 0},
            "stickbreaking: chunk must be a positive integer",
            id="stickbreaking-options0-stickbreaking: chunk must be a positive integer",
        ),
        pytest.param(
            "stickbreaking",
            {"attend_current": 1},
            "stickbreaking: attend_current must be true or false",
            id="stickbreaking-options1-stickbreaking: attend_current must be true or false",
        ),
        pytest.param(
            "stickbreaking",
            {"remainder": "value"},
            "stickbreaking: remainder must be one of none, learned, self, got 'value'",
            id="stickbreaking-remainder",
        ),
    ],
)
def test_bad_options_are_one_line(name, options, message):
    with pytest.raises(ValueError, match=message):
        method(name, **options)
