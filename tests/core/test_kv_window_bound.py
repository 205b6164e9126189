"""Hardening round 5 (issue 56): a windowed layer's KV cache never reserves more than the capacity
asked for: ``model_overrides.window=100000000`` on a 64-token context holds 64 slots, not 2 x 10^8
(an oom row asking for 102 GB), and decodes what the full cache decodes."""

import torch

from posbench.core.model import KVCache


def test_a_window_longer_than_the_context_reserves_only_the_capacity():
    torch.manual_seed(0)
    k, v = torch.randn(2, 3, 60, 4), torch.randn(2, 3, 60, 4)
    huge, plain = KVCache(1, capacity=64, windows=[100_000_000]), KVCache(1, capacity=64)
    with torch.no_grad():
        for start in range(0, 60, 20):
            got = huge.append(0, k[:, :, start : start + 20], v[:, :, start : start + 20], start)
            want = plain.append(0, k[:, :, start : start + 20], v[:, :, start : start + 20], start)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert huge._k[0].shape[2] == 64


def test_a_short_window_still_gets_twice_its_length():
    cache = KVCache(1, capacity=64, windows=[8])
    with torch.no_grad():
        cache.append(0, torch.zeros(1, 1, 4, 2), torch.zeros(1, 1, 4, 2), 0)
    assert cache._k[0].shape[2] == 16
