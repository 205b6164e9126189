"""Algorithmic length-generalisation tasks (Ruoss et al. 2023; Kazemnejad et al. 2023) as rows
``BOS x SEP y`` for a decoder-only LM, the loss on the answer ``y`` alone; tasks and format are in
docs/tasks/lengthgen.md. A batch is a pure function of (task, n, rows, seed), drawn from
``default_rng([seed, task index, n])``; evaluation seeds start at ``EVAL_SEED``, above training's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

BOS, SEP, FIRST_SYMBOL = 0, 1, 2
EVAL_SEED = 2**31  # evaluation seeds start here; training seeds stay below


@dataclass(frozen=True)
class Batch:
    tokens: np.ndarray  # (B, T) int64: BOS, input, SEP, answer
    answer: slice  # the answer's columns of tokens, the same for every row

    @property
    def answer_mask(self) -> np.ndarray:
        """(T - 1,) bool over the next-token targets ``tokens[:, 1:]``: True where the target is
        an answer token (the positions the loss and the score read)."""
        mask = np.zeros(self.tokens.shape[1] - 1, dtype=bool)
        mask[self.answer.start - 1 : self.answer.stop - 1] = True
        return mask


# A task's generator: (rng, rows, n) -> (inputs (B, k), answers (B, m)), symbol indices from 0.
Make = Callable[[np.random.Generator, int, int], "tuple[np.ndarray, np.ndarray]"]


@dataclass(frozen=True)
class AlgoTask:
    name: str
    source: str  # the paper it comes from
    n_symbols: int  # symbols of inputs and answers together (ids FIRST_SYMBOL ..)
    answer_symbols: int  # how many of them an answer token can be (chance)
    answer_len: Callable[[int], int]  # n -> answer tokens
    input_len: Callable[[int], int]  # n -> input tokens
    make: Make
    doc: str

    @property
    def vocab_size(self) -> int:
        return FIRST_SYMBOL + self.n_symbols

    def seq_len(self, n: int) -> int:
        """Tokens of one example of length n: BOS, input, SEP, answer."""
        return 2 + self.input_len(n) + self.answer_len(n)

    def chance(self, n: int) -> float:
        """Exact-match accuracy of guessing every answer token uniformly among its possible values."""
        return float(self.answer_symbols) ** -self.answer_len(n)


# -- the generators -----------------------------------------------------------------------------
# Each returns symbol indices (0 .. n_symbols-1); ``generate`` shifts them past BOS and SEP.


def _bits(rng, rows, n):
    return rng.integers(0, 2, size=(rows, n))


def _reverse(rng, rows, n):
    x = _bits(rng, rows, n)
    return x, x[:, ::-1]


def _duplicate(rng, rows, n):
    x = _bits(rng, rows, n)
    return x, np.concatenate([x, x], axis=1)


def _parity(rng, rows, n):
    x = _bits(rng, rows, n)
    return x, x.sum(axis=1, keepdims=True) % 2


MOD = 5
PLUS, MINUS, TIMES = MOD, MOD + 1, MOD + 2  # operator symbols after the residues 0..4


def _modular_arithmetic(rng, rows, n):
    """n operands mod 5 joined by n-1 operators from + - *; * binds tighter (Ruoss et al.'s
    ``modular_arithmetic``: the reduced value of the expression)."""
    values = rng.integers(0, MOD, size=(rows, n))
    ops = rng.integers(0, 3, size=(rows, max(n - 1, 0))) + PLUS  # (B, n-1)
    x = np.empty((rows, 2 * n - 1), dtype=np.int64)
    x[:, 0::2], x[:, 1::2] = values, ops
    total = np.zeros(rows, dtype=np.int64)
    term = values[:, 0].copy()  # the running product of the current additive term
    sign = np.ones(rows, dtype=np.int64)
    for i in range(n - 1):
        op, v = ops[:, i], values[:, i + 1]
        times = op == TIMES
        total = np.where(times, total, (total + sign * term) % MOD)
        sign = np.where(times, sign, np.where(op == PLUS, 1, -1))
        term = np.where(times, (term * v) % MOD, v)
    total = (total + sign * term) % MOD
    return x, total[:, None]


HIDDEN = 2  # missing_duplicate: the placeholder symbol of the hidden bit


def _missing_duplicate(rng, rows, n):
    """A binary string s of n bits written twice, one of the 2n bits replaced by a placeholder;
    the answer is that bit (Ruoss et al.'s ``missing_duplicate_string``, length = n)."""
    s = _bits(rng, rows, n)
    x = np.concatenate([s, s], axis=1)
    where = rng.integers(0, 2 * n, size=rows)
    r = np.arange(rows)
    answer = x[r, where].copy()
    x[r, where] = HIDDEN
    return x, answer[:, None]


def _copy(rng, rows, n):
    x = rng.integers(0, 16, size=(rows, n))
    return x, x.copy()


ADD = 10  # addition: the '+' symbol after the digits 0..9


def _addition(rng, rows, n):
    """a + b for two n-digit numbers (leading zeros allowed), digits most significant first; the
    answer is the sum's n + 1 digits, zero-padded (Kazemnejad et al.'s format)."""
    a, b = rng.integers(0, 10, size=(rows, n)), rng.integers(0, 10, size=(rows, n))
    out = np.zeros((rows, n + 1), dtype=np.int64)
    carry = np.zeros(rows, dtype=np.int64)
    for i in range(n - 1, -1, -1):  # schoolbook, least significant digit first
        s = a[:, i] + b[:, i] + carry
        out[:, i + 1], carry = s % 10, s // 10
    out[:, 0] = carry
    return np.concatenate([a, np.full((rows, 1), ADD), b], axis=1), out


def _sort(rng, rows, n):
    x = rng.integers(0, 10, size=(rows, n))
    return x, np.sort(x, axis=1)


RUOSS = "Ruoss et al. 2023"
KAZEMNEJAD = "Kazemnejad et al. 2023"
_same = lambda n: n  # noqa: E731
_one = lambda n: 1  # noqa: E731

TASKS: dict[str, AlgoTask] = {
    t.name: t
    for t in (
        AlgoTask("reverse", RUOSS, 2, 2, _same, _same, _reverse, "reverse a binary string"),
        AlgoTask("duplicate", RUOSS, 2, 2, lambda n: 2 * n, _same, _duplicate, "write a binary string twice"),
        AlgoTask("parity", RUOSS, 2, 2, _one, _same, _parity, "parity of the ones of a binary string"),
        AlgoTask(
            "modular_arithmetic",
            RUOSS,
            MOD + 3,
            MOD,
            _one,
            lambda n: 2 * n - 1,
            _modular_arithmetic,
            "value mod 5 of n operands joined by + - * (with precedence)",
        ),
        AlgoTask(
            "missing_duplicate",
            RUOSS,
            3,
            2,
            _one,
            lambda n: 2 * n,
            _missing_duplicate,
            "the hidden bit of a binary string written twice",
        ),
        AlgoTask("copy", KAZEMNEJAD, 16, 16, _same, _same, _copy, "copy a string of 16 symbols"),
        AlgoTask(
            "addition",
            KAZEMNEJAD,
            11,
            10,
            lambda n: n + 1,
            lambda n: 2 * n + 1,
            _addition,
            "sum of two n-digit decimal numbers, most significant digit first",
        ),
        AlgoTask("sort", KAZEMNEJAD, 10, 10, _same, _same, _sort, "sort decimal digits ascending"),
    )
}


def get(name: str) -> AlgoTask:
    if name not in TASKS:
        raise ValueError(f"unknown algorithmic task {name!r}; allowed: {', '.join(TASKS)}")
    return TASKS[name]


def generate(name: str, n: int, rows: int, seed: int) -> Batch:
    """``rows`` examples of task ``name`` at length ``n``; deterministic in its arguments."""
    task = get(name)
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"{name}: length must be a positive integer, got {n!r}")
    if rows < 1:
        raise ValueError(f"{name}: rows must be >= 1, got {rows}")
    rng = np.random.default_rng([seed, list(TASKS).index(name), n])
    x, y = task.make(rng, rows, n)
    k, m = x.shape[1], y.shape[1]
    tokens = np.empty((rows, 2 + k + m), dtype=np.int64)
    tokens[:, 0], tokens[:, 1 + k] = BOS, SEP
    tokens[:, 1 : 1 + k] = x + FIRST_SYMBOL
    tokens[:, 2 + k :] = y + FIRST_SYMBOL
    return Batch(tokens, slice(2 + k, 2 + k + m))


def training_batches(name: str, max_len: int, rows: int, seed: int):
    """Endless training batches: each draws one length n uniformly from 1 .. ``max_len`` (Ruoss
    et al.'s uniform curriculum; Kazemnejad et al.'s U(1, L)) and ``rows`` examples of it."""
    if max_len < 1:
        raise ValueError(f"{name}: the training length must be >= 1, got {max_len}")
    get(name)
    rng = np.random.default_rng([seed, 11])
    while True:
        n = int(rng.integers(1, max_len + 1))
        yield generate(name, n, rows, int(rng.integers(0, EVAL_SEED)))
