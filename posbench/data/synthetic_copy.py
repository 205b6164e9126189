"""The ``synthetic-copy`` source: a sparse order-1 Markov chain mixed with copies from d back.

A pure chain needs no positions, so every fair method scores the same on it; here, with
probability c, x_t copies x_{t-d} (d ~ w over 1..min(D, t); ``distance`` "decay": w_d ∝
decay^(d-1), "log-uniform": w_d ∝ log(1 + 1/d), the floor of a log-uniform draw on [1, D + 1)),
which a model that knows distances can exploit. The true predictive probability is known in
closed form on every split (one stream from t = 0), and so is every token's copy distance
(``sample_with_distances``); the process and its formula are in docs/data.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from posbench.data import markov
from posbench.data.synthetic_options import COPY_DEFAULTS as DEFAULTS
from posbench.data.synthetic_options import DISTANCES


@dataclass(frozen=True)
class CopySource:
    """A chain plus the copy rule; build one with :func:`make_source`."""

    chain: markov.MarkovChain  # order 1
    copy_prob: float  # c
    weights: np.ndarray  # (D,) float64 w_1..w_D, sums to 1

    @property
    def vocab(self) -> int:
        return self.chain.vocab

    @property
    def max_distance(self) -> int:
        return len(self.weights)

    def sample(self, n_streams: int, length: int, seed: int) -> np.ndarray:
        """(n_streams, length) int64 independent streams, each from its own t = 0; all randomness
        is drawn up front from ``seed``, the loop over time only looks tokens up."""
        return self.sample_with_distances(n_streams, length, seed)[0]

    def sample_with_distances(self, n_streams: int, length: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """``sample``'s streams (the same for the same seed) and, beside them, (n_streams, length)
        int64 copy distances: d where x_t was copied from x_{t-d}, 0 where the chain drew it."""
        rng = np.random.default_rng(seed)
        S, T, D = n_streams, length, self.max_distance
        x = np.zeros((S, T), dtype=np.int64)
        dist = np.zeros((S, T), dtype=np.int64)
        if T == 0:
            return x, dist
        x[:, 0] = rng.choice(self.vocab, size=S, p=self.chain.stationary())
        copy = rng.random((S, T)) < self.copy_prob
        u_copy = rng.random((S, T))  # picks the distance by inverse cdf of w restricted to 1..min(D, t)
        u_succ = rng.random((S, T))  # picks the chain's favourite successor
        jumped = rng.random((S, T)) < self.chain.jump
        jump_to = rng.integers(0, self.vocab, size=(S, T))
        cdf_w = np.cumsum(self.weights)  # (D,)
        cdf_succ = np.cumsum(self.chain.weight, axis=1)  # (V, b)
        cdf_succ[:, -1] = 1.0  # rounding must not leave the last successor below u
        rows = np.arange(S)
        for t in range(1, T):
            m = min(D, t)
            # d - 1 = number of cdf entries <= u * W_t: inverse cdf of the renormalised w.
            d = 1 + np.searchsorted(cdf_w[:m], u_copy[:, t] * cdf_w[m - 1], side="right")
            d = np.minimum(d, m)  # u * W_t == W_t by rounding
            prev = x[:, t - 1]
            pick = (u_succ[:, t, None] > cdf_succ[prev]).sum(axis=1)
            step = np.where(jumped[:, t], jump_to[:, t], self.chain.succ[prev, pick])
            x[:, t] = np.where(copy[:, t], x[rows, t - d], step)
            dist[:, t] = np.where(copy[:, t], d, 0)
        return x, dist

    def token_loss(self, x) -> np.ndarray:
        """float64 -log p(x_t | x_<t) (the closed form) for every token of one stream (1-D) or of
        each row (2-D), the first token being t = 0; NaN at t = 0, which has no past."""
        x = np.asarray(x, dtype=np.int64)
        one = x.ndim == 1
        x = np.atleast_2d(x)  # (S, T)
        S, T = x.shape
        out = np.full((S, T), np.nan)
        if T < 2:
            return out[0] if one else out
        D = self.max_distance
        copy_mass = np.zeros((S, T))  # sum_d w_d [x_{t-d} = x_t], before renormalising
        for d in range(1, min(D, T - 1) + 1):
            copy_mass[:, d:] += self.weights[d - 1] * (x[:, d:] == x[:, :-d])
        t = np.arange(1, T)
        W = np.cumsum(self.weights)[np.minimum(t, D) - 1]  # (T-1,) mass of the distances that exist
        chain_p = self.chain.probs()[x[:, :-1], x[:, 1:]]  # (S, T-1)
        p = (1.0 - self.copy_prob) * chain_p + self.copy_prob * copy_mass[:, 1:] / W
        out[:, 1:] = -np.log(p)
        return out[0] if one else out

    def log_loss(self, x) -> float:
        """Mean of :meth:`token_loss` over every scored token (all but each stream's first)."""
        return float(np.nanmean(self.token_loss(x)))


def distance_weights(max_distance: int, decay: float, distance: str = "decay") -> np.ndarray:
    """(D,) float64 w_d, d = 1..D: proportional to decay ** (d - 1) ("decay"), or to log(1 + 1/d)
    ("log-uniform": as many copies from 1-2 back as from 512-1024 back, for each doubling alike)."""
    d = np.arange(1, max_distance + 1, dtype=np.float64)
    w = np.log1p(1.0 / d) if distance == "log-uniform" else float(decay) ** (d - 1)
    return w / w.sum()


def make_source(*, seed: int, **options) -> CopySource:
    """The source drawn deterministically from ``seed`` (the chain; w is fixed by the options).
    ``options`` are ``DEFAULTS``' keys, each given but ``distance`` ("decay" when not): the chain's
    vocab, branching and jump, the copies' copy_prob, max_distance, decay and distance."""
    options = {"distance": "decay", **options}
    if set(options) != set(DEFAULTS):
        raise TypeError(f"synthetic-copy: options must be {', '.join(DEFAULTS)}; got {', '.join(options)}")
    copy_prob, max_distance, decay, distance = (options[k] for k in ("copy_prob", "max_distance", "decay", "distance"))
    if not 0.0 <= copy_prob < 1.0 or max_distance < 1 or not 0.0 < decay <= 1.0 or distance not in DISTANCES:
        raise ValueError(
            f"synthetic-copy: need 0 <= copy_prob < 1, max_distance >= 1, 0 < decay <= 1, distance one of "
            f"{', '.join(DISTANCES)}; got copy_prob={copy_prob}, max_distance={max_distance}, decay={decay}, distance={distance!r}"
        )
    chain = markov.random_chain(vocab=options["vocab"], order=1, branching=options["branching"], jump=options["jump"], seed=seed)
    return CopySource(chain, float(copy_prob), distance_weights(int(max_distance), decay, distance))
