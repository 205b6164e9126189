"""The options of the synthetic corpora (``corpus.synthetic`` of a suite), their defaults and
bounds, checked without numpy: validating a suite reads them (``CorpusSettings``), so an option
that no machine can draw a corpus from is one line before anything runs, not an error row per
case. The sources keep their own guards for direct callers (``markov.random_chain``,
``synthetic_copy.make_source``); these bounds are theirs.
"""

from __future__ import annotations

# kind synthetic: 64 symbols, each 2-symbol context has 4 likely successors
MARKOV_DEFAULTS = dict(vocab=64, order=2, branching=4, jump=0.05)
# kind synthetic-copy: the defaults of the extrapolation cpu profile (tiny model, L_train 64)
COPY_DEFAULTS = dict(vocab=64, branching=4, jump=0.05, copy_prob=0.5, max_distance=8, decay=1.0, distance="decay")
DISTANCES = ("decay", "log-uniform")
MAX_STATES = 1 << 22  # vocab ** order: the chain's transition table


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _problems(options: dict) -> list[tuple[str, bool, str]]:
    """(option, whether its value is allowed, what is allowed) for each option given a value."""
    o = options
    vocab_ok = _integer(o.get("vocab")) and o["vocab"] >= 2
    rules = {
        "vocab": (vocab_ok, "an integer >= 2"),
        "order": (_integer(o.get("order")) and o["order"] >= 1, "an integer >= 1"),
        "branching": (
            _integer(o.get("branching")) and 1 <= o["branching"] <= (o["vocab"] if vocab_ok else o["branching"]),
            "an integer in [1, vocab]",
        ),
        "jump": (_number(o.get("jump")) and 0.0 < o["jump"] <= 1.0, "a number in (0, 1]"),
        "copy_prob": (_number(o.get("copy_prob")) and 0.0 <= o["copy_prob"] < 1.0, "a number in [0, 1)"),
        "max_distance": (_integer(o.get("max_distance")) and o["max_distance"] >= 1, "an integer >= 1"),
        "decay": (_number(o.get("decay")) and 0.0 < o["decay"] <= 1.0, "a number in (0, 1]"),
        "distance": (o.get("distance") in DISTANCES, ", ".join(DISTANCES)),
    }
    return [(key, *rules[key]) for key in options]


def check(kind: str, options: dict) -> None:
    """A one-line ``ValueError`` (``<kind>: <problem>; allowed: <what is>``) for the first option
    of ``kind`` (synthetic or synthetic-copy) that is unknown or out of its bounds, the defaults
    filling in those not given."""
    defaults = MARKOV_DEFAULTS if kind == "synthetic" else COPY_DEFAULTS
    unknown = [key for key in options if key not in defaults]
    if unknown:
        raise ValueError(f"{kind}: unknown option {unknown[0]!r}; allowed: {', '.join(defaults)}")
    merged = {**defaults, **options}
    for key, ok, allowed in _problems(merged):
        if not ok:
            raise ValueError(f"{kind}: {key} {merged[key]!r} is out of bounds; allowed: {key} {allowed}")
    # order > 22 is too many with any vocab >= 2; below it the power is quick to compute exactly
    if kind == "synthetic" and (merged["order"] > 22 or merged["vocab"] ** merged["order"] > MAX_STATES):
        raise ValueError(
            f"{kind}: vocab ** order (vocab {merged['vocab']}, order {merged['order']}) is too many states; "
            f"allowed: at most {MAX_STATES} (a smaller vocab or order)"
        )
