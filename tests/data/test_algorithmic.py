"""The algorithmic tasks' generators (posbench.data.algorithmic): exact answers recomputed in plain
Python, row layout and lengths, determinism by seed, and training lengths disjoint from the
lengths tested beyond L_train."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from posbench.data import algorithmic as A


def _split(batch: A.Batch, task: A.AlgoTask, n: int):
    """(inputs, answers) as lists of symbol indices, per row; checks the frame tokens."""
    k = task.input_len(n)
    t = batch.tokens
    assert (t[:, 0] == A.BOS).all() and (t[:, 1 + k] == A.SEP).all()
    assert batch.answer == slice(2 + k, 2 + k + task.answer_len(n))
    return [list(r[1 : 1 + k] - A.FIRST_SYMBOL) for r in t], [list(r[batch.answer] - A.FIRST_SYMBOL) for r in t]


def _modular(expr: list[int]) -> int:
    """The expression (operators 5 +, 6 -, 7 *) evaluated over the integers as written on paper:
    split into signed terms at + and -, each term a product; then reduced mod 5."""
    terms, sign, product = [], 1, expr[0]
    for op, value in zip(expr[1::2], expr[2::2]):
        if op == 7:
            product *= value
        else:
            terms.append(sign * product)
            sign, product = (1 if op == 5 else -1), value
    terms.append(sign * product)
    return sum(terms) % 5


def _reference(name: str, x: list[int]) -> list[int]:
    if name == "reverse":
        return x[::-1]
    if name == "duplicate":
        return x + x
    if name == "parity":
        return [sum(x) % 2]
    if name == "modular_arithmetic":
        return [_modular(x)]
    if name == "missing_duplicate":
        (hole,) = [i for i, s in enumerate(x) if s == A.HIDDEN]
        n = len(x) // 2
        return [x[hole + n] if hole < n else x[hole - n]]
    if name == "copy":
        return x
    if name == "addition":
        n = (len(x) - 1) // 2
        assert x[n] == A.ADD
        total = int("".join(map(str, x[:n]))) + int("".join(map(str, x[n + 1 :])))
        return [int(c) for c in str(total).zfill(n + 1)]
    if name == "sort":
        return sorted(x)
    raise AssertionError(name)


@pytest.mark.parametrize("name", list(A.TASKS))
@pytest.mark.parametrize("n", [1, 2, 7])
def test_answers_are_exact(name, n):
    task = A.get(name)
    batch = A.generate(name, n, 64, seed=3)
    xs, ys = _split(batch, task, n)
    assert batch.tokens.shape == (64, task.seq_len(n))
    assert batch.tokens.min() >= 0 and batch.tokens.max() < task.vocab_size
    for x, y in zip(xs, ys):
        assert y == _reference(name, x)
    mask = batch.answer_mask  # over tokens[:, 1:]: the answer's targets only
    assert mask.sum() == task.answer_len(n) and mask[-1] and not mask[: -task.answer_len(n)].any()


def test_known_examples():
    # 2 * 3 + 4 - 1 * 2 = 8 = 3 (mod 5); missing bit of 01|01 hidden at 2 is 0; 57 + 68 = 125
    assert _reference("modular_arithmetic", [2, 7, 3, 5, 4, 6, 1, 7, 2]) == [3]
    assert _reference("missing_duplicate", [0, 1, A.HIDDEN, 1]) == [0]
    assert _reference("addition", [5, 7, A.ADD, 6, 8]) == [1, 2, 5]
    rng = np.random.default_rng(0)
    assert A._modular_arithmetic(rng, 1, 1)[0].shape == (1, 1)  # one operand: the answer is itself
    x, y = A._modular_arithmetic(np.random.default_rng(1), 200, 6)
    assert [_modular(list(r)) for r in x] == list(y[:, 0])
    # the answers vary: a generator stuck on one value would pass exact checks on few rows
    assert len(set(y[:, 0])) == 5


@pytest.mark.parametrize("name", ["reverse", "addition"])
def test_deterministic_by_seed(name):
    a, b = A.generate(name, 5, 8, seed=1), A.generate(name, 5, 8, seed=1)
    assert np.array_equal(a.tokens, b.tokens)
    assert not np.array_equal(a.tokens, A.generate(name, 5, 8, seed=2).tokens)
    t1 = [b.tokens for b in itertools.islice(A.training_batches(name, 6, 4, seed=0), 5)]
    t2 = [b.tokens for b in itertools.islice(A.training_batches(name, 6, 4, seed=0), 5)]
    assert all(np.array_equal(u, v) for u, v in zip(t1, t2))


def test_training_lengths_stay_within_L_train_and_cover_it():
    task = A.get("reverse")
    seen = {(b.tokens.shape[1] - 2) // 2 for b in itertools.islice(A.training_batches("reverse", 6, 2, 0), 300)}
    assert seen == set(range(1, 7))  # every length 1..L_train, none beyond: test lengths > 6 are unseen
    assert task.seq_len(6) == 14


def test_evaluation_draws_are_not_training_draws():
    # training seeds are drawn below EVAL_SEED; evaluation uses EVAL_SEED + seed, so no batch of one
    # stream is a batch of the other
    rng_seeds = []
    gen = A.training_batches("copy", 3, 2, seed=0)
    for _ in range(50):
        rng_seeds.append(next(gen))
    assert A.EVAL_SEED == 2**31
    evaluation = A.generate("copy", 3, 2, A.EVAL_SEED)
    assert not any(np.array_equal(b.tokens, evaluation.tokens) for b in rng_seeds)


def test_bad_input_is_one_line():
    with pytest.raises(ValueError, match="unknown algorithmic task 'revers'; allowed: reverse, duplicate"):
        A.generate("revers", 3, 2, 0)
    with pytest.raises(ValueError, match="length must be a positive integer, got 0"):
        A.generate("reverse", 0, 2, 0)
    with pytest.raises(ValueError, match="training length must be >= 1"):
        next(A.training_batches("reverse", 0, 2, 0))


def test_chance_is_over_the_answer_values():
    assert A.get("parity").chance(9) == 0.5
    assert A.get("modular_arithmetic").chance(4) == 0.2
    assert A.get("reverse").chance(3) == 2.0**-3
