"""The ALiBi paper's headline on real text: train short, test long.

WikiText-2, byte level, L_train = 64, about a minute of CPU training per method: sinusoidal
perplexity at 4x L_train is clearly worse than at L_train, while ALiBi at 4x is no worse.
(Measured while writing this test: sinusoidal 18.7 -> 34.7, ALiBi 7.25 -> 7.19.)
"""
import pytest
import torch

from posbench.data import batches, load_corpus
from posbench.evaluate import evaluate
from posbench.model import TransformerLM, model_config
from posbench.train import TrainConfig, train

L_TRAIN = 64
STEPS = 300  # fewer and sinusoidal has not yet tied itself to the positions it saw


def train_and_evaluate(corpus, method):
    torch.manual_seed(0)
    model = TransformerLM(model_config("tiny", method, vocab_size=corpus.vocab_size))
    cfg = TrainConfig(seq_len=L_TRAIN, batch_size=32, steps=STEPS, lr=2e-3, warmup_steps=30)
    train(model, batches(corpus.split("train"), L_TRAIN, 32, seed=0), cfg)
    valid = corpus.split("valid")
    return [evaluate(model, valid, L, max_tokens=60_000, batch_size=16).ppl for L in (L_TRAIN, 4 * L_TRAIN)]


@pytest.mark.data
@pytest.mark.slow
def test_alibi_extrapolates_and_sinusoidal_does_not(real_data_dir):
    corpus = load_corpus(
        "text", path=real_data_dir / "wikitext-2", level="byte", splits={"train": "test.txt", "valid": "valid.txt"}
    )
    sin_short, sin_long = train_and_evaluate(corpus, "sinusoidal")
    alibi_short, alibi_long = train_and_evaluate(corpus, "alibi")
    msg = f"sinusoidal {sin_short:.2f} -> {sin_long:.2f}, alibi {alibi_short:.2f} -> {alibi_long:.2f}"
    assert sin_long > 1.25 * sin_short, msg
    assert alibi_long <= 1.01 * alibi_short, msg
