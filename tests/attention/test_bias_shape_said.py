"""Issue 56 friction: a plugin whose ``bias()`` returns the wrong shape is told what came back and
what was expected, not torch's size error in every layer; shapes that broadcast still pass."""

import pytest
import torch

from posbench.attention.bias import BiasMethod
from posbench.core.config import model_config


class Shaped(BiasMethod):
    name = "shaped"
    shape = (3, 5)

    def bias(self, q_pos, k_pos, dtype):
        return torch.zeros(self.shape)


@pytest.mark.parametrize("shape", [(3, 5), (2, 7, 7), (4, 7, 6), (2, 4, 7, 7)])
def test_a_wrong_bias_shape_is_one_line_naming_both(shape):
    method = Shaped(model_config("tiny", "alibi"))
    method.shape = shape
    with pytest.raises(ValueError) as info:
        method.masked_bias(torch.arange(7), torch.arange(7), torch.float32)
    heads = method.cfg.n_heads
    assert str(info.value) == (
        f"method 'shaped': bias() returned {shape} where (H, Tq, Tk) = ({heads}, 7, 7) was expected "
        "(or a shape that broadcasts to it)"
    )


@pytest.mark.parametrize("shape", [(1, 7, 7), (7, 7), (None, 1, 7), (1, None, 7, 7)])
def test_shapes_that_broadcast_pass(shape):
    method = Shaped(model_config("tiny", "alibi"))
    method.shape = tuple(method.cfg.n_heads if n is None else n for n in shape)
    assert method.masked_bias(torch.arange(7), torch.arange(7), torch.float32).shape[-2:] == (7, 7)
