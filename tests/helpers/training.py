"""A learnable stream and a tiny model for the training loop's tests (tests/engine)."""

import torch

from posbench.core.model import build_model, model_config


def repeating_batches(seed=0, batch=4, seq=16, vocab=16):
    """A learnable stream: each sequence counts up modulo vocab from a random start."""
    g = torch.Generator().manual_seed(seed)
    while True:
        start = torch.randint(0, vocab, (batch, 1), generator=g)
        yield (start + torch.arange(seq + 1)) % vocab


def small_model(method="alibi", seed=0):
    torch.manual_seed(seed)
    return build_model(model_config("tiny", method, n_layers=1, d_model=32, n_heads=2, d_ff=64, vocab_size=16))
