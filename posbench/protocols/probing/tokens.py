"""The probes' own tokens and their examples: ``ProbeVocab`` (the probe token ids, numbered after
the LM vocabulary) and ``ProbeBatch`` (examples of one probe with their answer spans). The probe
generators of ``probes`` and ``ruler`` both make them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from posbench.core.config import ProbeConfig


class ProbeVocab:
    """Token ids of the probes, starting at ``base`` (the LM vocabulary's size).

    Layout: filler phrase (filler_len), BOS, MARK, END, ASK, COPY, REVERSE, QUERY, the value
    symbols (n_symbols: passkey digits, segments, mqar values), then the mqar keys (n_keys).
    """

    SPECIALS = ("BOS", "MARK", "END", "ASK", "COPY", "REVERSE", "QUERY")

    def __init__(self, base: int, cfg: ProbeConfig):
        self.base, self.cfg = base, cfg
        self.filler = np.arange(cfg.filler_len, dtype=np.int64) + base  # (filler_len,)
        for i, name in enumerate(self.SPECIALS):
            setattr(self, name, base + cfg.filler_len + i)
        self.first_symbol = base + cfg.filler_len + len(self.SPECIALS)
        self.first_key = self.first_symbol + cfg.n_symbols
        self.size = cfg.filler_len + len(self.SPECIALS) + cfg.n_symbols + cfg.n_keys  # probe tokens added

    @property
    def vocab_size(self) -> int:
        """LM vocabulary plus probe tokens: the model's vocabulary."""
        return self.base + self.size

    def is_symbol(self, ids: np.ndarray) -> np.ndarray:
        return (ids >= self.first_symbol) & (ids < self.first_symbol + self.cfg.n_symbols)

    def is_draw(self, ids: np.ndarray) -> np.ndarray:
        """Whether each id is a random draw (a value symbol or an mqar key): outside an answer such
        a token cannot be predicted, and its loss only teaches the draw's statistics."""
        return (ids >= self.first_symbol) & (ids < self.first_key + self.cfg.n_keys)


@dataclass
class ProbeBatch:
    tokens: np.ndarray  # (n, length) int64: prompt and answers, the whole sequence
    spans: list[tuple[int, int]]  # answer spans [start, end), the same for every row, in order
    depth: np.ndarray  # (n,) float: where the needle sits in the filler, 0 = start, 1 = end (mqar: 0)
    distance: np.ndarray  # (n, n_spans) int: tokens from the information to its question
    # (n, n_spans, answer length) int: the reference items RULER's scoring looks for in an answer,
    # -1 where none (vartrack's END padding); None: the probe is scored by exact match only
    items: np.ndarray | None = None
