"""A text passkey probe (RULER's and Mohtashami & Jaggi's): a needle sentence holding a 5-digit key,
hidden at a depth in repeated filler sentences, then the question; through the checkpoint's own
tokenizer. Scored by exact match under greedy decoding, read in one forward pass: the answer's
tokens are appended and each must be the argmax after the ones before it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
NEEDLE = "The pass key is {key}. Remember it. {key} is the pass key. "
QUESTION = "What is the pass key? The pass key is"


def example(tokenizer, length: int, depth: float, key: int) -> tuple[list[int], int] | None:
    """(ids of exactly ``length`` tokens, index of the answer's first token), the needle after
    ``depth`` (0..1) of the filler; None when the needle, question and answer alone exceed ``length``."""

    def enc(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    needle, question, answer = enc(NEEDLE.format(key=key)), enc(QUESTION), enc(f" {key}")
    n_fill = length - len(needle) - len(question) - len(answer)
    if n_fill < 0:
        return None
    one = enc(FILLER)
    filler = (one * (n_fill // max(len(one), 1) + 1))[:n_fill]
    cut = int(round(depth * n_fill))
    ids = filler[:cut] + needle + filler[cut:] + question + answer
    return ids, length - len(answer)


class Probes(NamedTuple):
    """``trials`` passkey probes of ``length`` tokens through ``tokenizer``, at depths spread over
    0..1, their keys drawn from ``seed``."""

    tokenizer: object
    length: int
    trials: int
    seed: int


def passkey_accuracy(lm, probes: Probes, device, batch_size: int = 8, pos: torch.Tensor | None = None) -> dict:
    """Share of the ``probes`` answered exactly, with each probe's depth and outcome; accuracy None
    when the probe does not fit its length."""
    tokenizer, length, trials, seed = probes
    rng = np.random.default_rng([seed, length])
    depths = np.linspace(0.0, 1.0, trials) if trials > 1 else np.array([0.5])
    built = [example(tokenizer, length, float(d), int(rng.integers(10_000, 100_000))) for d in depths]
    if any(b is None for b in built):
        return {"accuracy": None, "correct": 0, "trials": trials, "message": f"the probe needs more than {length} tokens"}
    correct = []
    with torch.inference_mode():
        for i in range(0, len(built), batch_size):
            chunk = built[i : i + batch_size]
            ids = torch.tensor([b[0] for b in chunk], dtype=torch.long, device=device)  # (B, length)
            guess = lm(ids, pos).argmax(-1)  # (B, length): the token predicted after each
            for row, (_, start) in enumerate(chunk):  # keys of one length may differ in token count
                correct.append(bool((guess[row, start - 1 : length - 1] == ids[row, start:]).all()))
    return {
        "accuracy": sum(correct) / len(correct),
        "correct": int(sum(correct)),
        "trials": len(correct),
        "depths": [float(d) for d in depths],
        "hits": [bool(c) for c in correct],
    }
