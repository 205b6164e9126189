"""A sparse random Markov chain: the ``synthetic`` corpus, with an exactly known best perplexity.

A state is the last k symbols as a base-V number in [0, V^k); each has ``branching`` favourite
successors, and with probability ``jump`` the next symbol is uniform (irreducible, aperiodic).
The entropy rate comes exactly from the stationary distribution (docs/data.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MarkovChain:
    """Transition table of the chain; build one with :func:`random_chain`."""

    vocab: int
    order: int
    jump: float
    succ: np.ndarray  # (S, b) int64: favourite next symbols of each state, S = vocab**order
    weight: np.ndarray  # (S, b) float64: their Dirichlet weights, rows sum to 1

    @property
    def n_states(self) -> int:
        return self.vocab**self.order

    def next_state(self, state: np.ndarray, symbol: np.ndarray) -> np.ndarray:
        """State after emitting ``symbol``: drop the oldest symbol, append the new one."""
        return (state % (self.vocab ** (self.order - 1))) * self.vocab + symbol

    def probs(self) -> np.ndarray:
        """(S, V) float64 full conditional distributions P(next symbol | state)."""
        p = np.full((self.n_states, self.vocab), self.jump / self.vocab)
        rows = np.arange(self.n_states)[:, None]
        p[rows, self.succ] += (1.0 - self.jump) * self.weight
        return p

    def stationary(self, tol: float = 1e-13, max_iter: int = 100_000) -> np.ndarray:
        """(S,) stationary distribution over states, by power iteration from uniform."""
        S, V = self.n_states, self.vocab
        p = self.probs()  # (S, V)
        # The state reached from s by symbol c, for every (s, c): (S, V).
        nxt = self.next_state(np.arange(S)[:, None], np.arange(V)[None, :])
        pi = np.full(S, 1.0 / S)
        for _ in range(max_iter):
            new = np.bincount(nxt.ravel(), weights=(pi[:, None] * p).ravel(), minlength=S)
            new /= new.sum()
            if np.abs(new - pi).sum() < tol:
                return new
            pi = new
        raise RuntimeError("markov chain: stationary distribution did not converge")

    def entropy_rate(self) -> float:
        """Exact entropy rate in nats per symbol: sum_s pi(s) * H(P(. | s))."""
        p = self.probs()
        h = -(p * np.log(p)).sum(axis=1)  # (S,); every entry is > 0 because jump > 0
        return float(self.stationary() @ h)

    def sample(self, n: int, seed: int, n_streams: int = 64) -> np.ndarray:
        """(n,) int64 symbols: ``n_streams`` independent stationary runs, concatenated."""
        # Side-by-side streams vectorise the loop; a seam is one token in n/n_streams, too rare to
        # move the measured perplexity.
        rng = np.random.default_rng(seed)
        streams = max(1, min(n_streams, n))
        steps = -(-n // streams)
        cdf = np.cumsum(self.weight, axis=1)  # (S, b)
        cdf[:, -1] = 1.0  # guard against rounding leaving the last edge below u
        # Start each stream in a stationary state, so every emitted symbol is stationary.
        state = rng.choice(self.n_states, size=streams, p=self.stationary())
        out = np.empty((streams, steps), dtype=np.int64)
        for t in range(steps):
            u = rng.random(streams)
            pick = (u[:, None] > cdf[state]).sum(axis=1)  # which favourite successor
            sym = self.succ[state, pick]
            jumped = rng.random(streams) < self.jump
            sym = np.where(jumped, rng.integers(0, self.vocab, size=streams), sym)
            out[:, t] = sym
            state = self.next_state(state, sym)
        return out.reshape(-1)[:n]

    def token_loss(self, symbols: np.ndarray) -> np.ndarray:
        """(n,) float64 -log P(x_t | previous k symbols); NaN for t < k, which have no full state."""
        x = np.asarray(symbols, dtype=np.int64)
        k, V = self.order, self.vocab
        out = np.full(len(x), np.nan)
        if len(x) <= k:
            return out
        state = np.zeros(len(x) - k, dtype=np.int64)
        for i in range(k):
            state = state * V + x[i : len(x) - k + i]
        out[k:] = -np.log(self.probs()[state, x[k:]])
        return out

    def log_loss(self, symbols: np.ndarray) -> float:
        """Mean -log P(x_t | previous k symbols) over t >= k: the true model's loss on a sample."""
        return float(self.token_loss(symbols)[self.order :].mean())


def random_chain(vocab: int, order: int, branching: int, jump: float, seed: int) -> MarkovChain:
    """A chain drawn deterministically from ``seed``; see the module docstring for its shape."""
    if vocab < 2 or order < 1 or not 1 <= branching <= vocab or not 0.0 < jump <= 1.0:
        raise ValueError(
            f"markov chain: need vocab >= 2, order >= 1, 1 <= branching <= vocab, 0 < jump <= 1; "
            f"got vocab={vocab}, order={order}, branching={branching}, jump={jump}"
        )
    if vocab**order > 1 << 22:
        raise ValueError(f"markov chain: vocab**order = {vocab**order} states is too many")
    rng = np.random.default_rng(seed)
    S = vocab**order
    # b distinct successors per state: the b smallest of V random keys.
    succ = np.argpartition(rng.random((S, vocab)), branching - 1, axis=1)[:, :branching]
    weight = rng.dirichlet(np.ones(branching), size=S)
    return MarkovChain(vocab, order, float(jump), succ.astype(np.int64), weight)


def empirical_conditional_entropy(symbols: np.ndarray, vocab: int, order: int) -> float:
    """Plug-in estimate of H(X_t | previous ``order`` symbols) in nats from n-gram counts; biased
    low by about (non-empty cells - states) / (2n), so n must be well above vocab**(order+1)."""
    x = np.asarray(symbols, dtype=np.int64)
    ctx = np.zeros(len(x) - order, dtype=np.int64)
    for i in range(order):
        ctx = ctx * vocab + x[i : len(x) - order + i]
    joint = np.bincount(ctx * vocab + x[order:], minlength=vocab ** (order + 1)).astype(np.float64)
    joint = joint.reshape(-1, vocab)
    n = joint.sum()
    marg = joint.sum(axis=1, keepdims=True)
    nz = joint > 0
    return float(-(joint[nz] * np.log(joint[nz] / np.broadcast_to(marg, joint.shape)[nz])).sum() / n)


def best_ppl(rate: float) -> float:
    """Perplexity of a model that knows the chain: exp(entropy rate)."""
    return math.exp(rate)
