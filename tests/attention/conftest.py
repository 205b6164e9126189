"""Fixtures shared by the attention tests."""

import pytest

from posbench.core import cpu_flash


@pytest.fixture(params=["cpu flash op", "plain ops"])
def block_kernel(request, monkeypatch):
    """Runs a blocked-attention test twice: each block through PyTorch's CPU flash op with the bias
    tile as its mask (what a CPU takes), and through the plain-ops softmax (every other device,
    and a torch without that op)."""
    if request.param == "plain ops":
        monkeypatch.setattr(cpu_flash, "CPU_FLASH_WITH_MASK", None)
    else:
        assert cpu_flash.CPU_FLASH_WITH_MASK is not None, "torch's CPU flash op takes no attn_mask"
    return request.param
