"""The model's shape (``ModelConfig``, the presets, ``model_config(preset, ...)``) and the retrieval
probes' (``ProbeConfig``).

Plain dataclasses without torch, so that validating a suite (which checks a preset name and
``model_overrides`` keys) stays fast; ``posbench.core.method`` and ``posbench.core.model`` re-export them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass
class ModelConfig:
    """Shape of the language model; a method reads what it needs (heads, head_dim, d_model)."""

    vocab_size: int = 256
    n_layers: int = 2
    d_model: int = 128
    n_heads: int = 4
    # grouped-query attention: the key/value heads, each shared by n_heads / n_kv_heads query
    # heads (1: multi-query); None: as many as the query heads (plain multi-head attention)
    n_kv_heads: int | None = None
    # sliding-window attention: query i sees keys j with i - window < j <= i (None: every earlier
    # key); window_layers: the indices of the windowed layers (None: every layer), e.g. every layer
    # but each 4th, [0, 1, 2, 4, 5, 6] of 8
    window: int | None = None
    window_layers: list[int] | None = None
    d_ff: int = 512
    dropout: float = 0.0
    # Token embeddings are multiplied by this; None means sqrt(d_model), fairseq's transformer_lm
    # (the ALiBi paper's base model), with embedding init std d_model^-0.5, so tokens enter the
    # network at unit scale and a sinusoidal table (amplitude 1) does not drown them.
    embed_scale: float | None = None
    method: str = "sinusoidal"
    method_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        for key in ("vocab_size", "n_layers", "d_model", "n_heads", "d_ff"):
            value = getattr(self, key)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"model config: {key} must be a positive integer, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"model config: d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.n_kv_heads is not None and not (
            isinstance(self.n_kv_heads, int)
            and not isinstance(self.n_kv_heads, bool)
            and self.n_kv_heads >= 1
            and self.n_heads % self.n_kv_heads == 0
        ):
            raise ValueError(
                f"model config: n_kv_heads ({self.n_kv_heads!r}) must be a positive integer dividing "
                f"n_heads ({self.n_heads}); allowed: a divisor of n_heads (1 = multi-query) or null"
            )
        if self.window is not None and not (
            isinstance(self.window, int) and not isinstance(self.window, bool) and self.window >= 1
        ):
            raise ValueError(
                f"model config: window ({self.window!r}) must be a positive integer; allowed: an "
                "integer >= 1 (the keys a query sees, itself included) or null"
            )
        if self.window_layers is not None:
            layers = self.window_layers
            if not (
                isinstance(layers, (list, tuple))
                and all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < self.n_layers for i in layers)
                and len(set(layers)) == len(layers)
            ):
                raise ValueError(
                    f"model config: window_layers ({layers!r}) must list distinct layer indices; "
                    f"allowed: a list of integers in 0..{self.n_layers - 1} (n_layers {self.n_layers}) "
                    "or null (every layer)"
                )
            if self.window is None:
                raise ValueError(
                    "model config: window_layers is set without a window; allowed: window_layers with a window (an integer >= 1)"
                )
        if self.embed_scale is not None and not (isinstance(self.embed_scale, (int, float)) and self.embed_scale > 0):
            raise ValueError(f"model config: embed_scale must be a positive number or null, got {self.embed_scale!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model config: dropout must be in [0, 1), got {self.dropout!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        """The key/value heads (``n_kv_heads`` resolved)."""
        return self.n_kv_heads or self.n_heads

    def layer_window(self, layer: int) -> int | None:
        """The sliding window of layer ``layer`` (None: the layer attends to every earlier key)."""
        if self.window is None or (self.window_layers is not None and layer not in self.window_layers):
            return None
        return self.window

    @property
    def token_scale(self) -> float:
        """The factor token embeddings are multiplied by (``embed_scale`` resolved)."""
        return math.sqrt(self.d_model) if self.embed_scale is None else float(self.embed_scale)


# Presets. tiny: about 1M parameters, for CPU runs. wt103 and cc100-1.3b: the ALiBi paper's models
# (Press et al. 2022, section 4). The paper's WikiText-103 vocabulary is about 267k words; presets
# leave vocab_size to the corpus.
PRESETS: dict[str, dict] = {
    "tiny": dict(n_layers=4, d_model=128, n_heads=4, d_ff=512, vocab_size=256),
    "small": dict(n_layers=6, d_model=384, n_heads=6, d_ff=1536, vocab_size=256),
    "wt103": dict(n_layers=16, d_model=1024, n_heads=8, d_ff=4096, vocab_size=267744),
    "cc100-1.3b": dict(n_layers=25, d_model=2048, n_heads=16, d_ff=8192, vocab_size=50265),
}


def model_config(preset: str, method: str = "sinusoidal", **overrides) -> ModelConfig:
    """A ``ModelConfig`` from a preset name with keyword overrides; unknown names are one line."""
    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; allowed: {', '.join(PRESETS)}")
    allowed = {f.name for f in fields(ModelConfig)}
    unknown = sorted(set(overrides) - allowed)
    if unknown:
        raise ValueError(f"unknown model option(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
    return ModelConfig(**{**PRESETS[preset], "method": method, **overrides})


# ---------------------------------------------------------------------------------------------
# Retrieval probe shapes (posbench.protocols.probing.probes builds the examples; the retrieval task's settings
# check their consistency with this class when a suite is validated, without numpy)

PROBES = ("passkey", "mqar", "copy", "reverse")


@dataclass(frozen=True)
class ProbeConfig:
    n_symbols: int = 16  # value alphabet: passkey digits, copy segments, mqar values
    key_len: int = 5  # passkey: symbols in the key
    n_pairs: int = 8  # mqar: key-value pairs
    n_queries: int = 4  # mqar: queried keys (distinct, <= n_pairs)
    segment_len: int = 8  # copy / reverse: symbols in the segment
    filler_len: int = 5  # tokens in the repeated filler phrase
    # mqar keys come from an alphabet of their own, disjoint from the values (Zoology's MQAR): with
    # one shared alphabet a queried key also appeared as a value in 40% of rows
    n_keys: int = 16
    # RULER's probes (posbench.protocols.probing.ruler): multikey needles, variable tracking, aggregation
    n_needles: int = 4  # multikey: needles, the queried one among distractors
    n_values: int = 2  # multikey: values per key, all of them the answer
    absent_prob: float = 0.2  # multikey: share of queries for a key no needle holds (answer: END)
    hops: int = 2  # vartrack: longest chain x1 = v, x2 = x1, ... (the answer's length); hops 1..hops are the axis
    n_chains: int = 2  # vartrack: chains, the queried one and distractors
    n_top: int = 1  # aggregate, common_words, frequent_words: the words asked for
    needles: str = "separate"  # multikey: one needle per value (RULER) or "packed" (a key's values in one)

    def __post_init__(self):
        if self.n_symbols < 2 or self.key_len < 1 or self.segment_len < 1 or self.filler_len < 1:
            raise ValueError("probes: need n_symbols >= 2 and key_len, segment_len, filler_len >= 1")
        if not 1 <= self.n_queries <= self.n_pairs <= self.n_keys:
            raise ValueError(
                f"probes: need 1 <= n_queries <= n_pairs <= n_keys, got n_queries={self.n_queries}, "
                f"n_pairs={self.n_pairs}, n_keys={self.n_keys}"
            )
        if min(self.n_needles, self.n_values, self.hops, self.n_chains, self.n_top) < 1 or not 0.0 <= self.absent_prob <= 1.0:
            raise ValueError(
                "probes: need n_needles, n_values, hops, n_chains, n_top >= 1 and 0 <= absent_prob <= 1 (what they must "
                "fit in is checked where a RULER probe is drawn)"
            )
        if self.needles not in ("separate", "packed"):
            raise ValueError(f"probes: needles {self.needles!r} is not known; allowed: separate, packed")

    def ruler_misfit(self, probe: str) -> tuple[str, str, str] | None:
        """(setting, problem, allowed) when RULER probe ``probe``'s shapes do not fit its alphabets,
        else None (a probe that is not RULER's too): checked where a suite is validated, for the
        probes it draws, and where the probe is drawn (``posbench.protocols.probing.ruler``)."""
        if probe == "multikey" and self.n_needles >= self.n_keys:
            problem = f"multikey: n_needles {self.n_needles} must be below n_keys {self.n_keys} (an absent key must remain)"
            return "n_needles", problem, f"n_needles < n_keys ({self.n_keys})"
        if probe == "vartrack" and self.n_chains > self.n_symbols:
            problem = f"vartrack: n_chains {self.n_chains} is above n_symbols {self.n_symbols} (a value per chain)"
            return "n_chains", problem, f"n_chains <= n_symbols ({self.n_symbols})"
        if probe == "vartrack" and self.n_chains * self.hops > self.n_keys:
            problem = (
                f"vartrack: n_chains * hops = {self.n_chains} * {self.hops} is above n_keys {self.n_keys} (a name per variable)"
            )
            return "hops", problem, f"n_chains * hops <= n_keys ({self.n_keys})"
        if probe in ("aggregate", "common_words", "frequent_words") and self.n_top >= self.n_symbols:
            return (
                "n_top",
                f"{probe}: n_top {self.n_top} must be below n_symbols {self.n_symbols}",
                f"n_top < n_symbols ({self.n_symbols})",
            )
        return None
