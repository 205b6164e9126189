"""What the graph-break tests share: the method groups, a fresh dynamo per test, the threshold of the
blocked plans lowered through their own knobs, and the break counter."""

import pytest
import torch
import torch._dynamo
from torch._dynamo.backends.debugging import ExplainWithBackend

from posbench.attention import routes

MISSION = ["sinusoidal", "rotary", "t5_bias", "alibi"]
BIAS = ["t5_bias", "alibi", "kerple_log", "fire"]

# With ``short_blocks`` a bias method attends by blocks of 32 rows from 64 queries on, so L 128 (4
# blocks), 50 (the masked bias) and 69 (a short last block) cross the paths that L 1024, 300 and 517
# cross at the defaults (512 queries, 64 rows): dynamo unrolls the block loop, and a fire layer's
# blocks cost seconds each to trace.
SHORT_MIN_ROWS, SHORT_BLOCK_ROWS = 64, 32
LENGTHS = (128, 50, 69)  # with short_blocks: blocks, the masked bias, blocks with a short last one


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Autouse in every test module that imports it: each test traces from an empty cache."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def short_blocks(monkeypatch) -> None:
    """For this test, the blocked plans' threshold and block size lowered through their own knobs."""
    monkeypatch.setattr(routes, "BLOCKED_MIN_ROWS", SHORT_MIN_ROWS)
    monkeypatch.setattr(routes, "BLOCK_ROWS", SHORT_BLOCK_ROWS)


def traced(fn, *args) -> tuple:
    """``fn(*args)`` traced by dynamo from an empty cache and run as traced (the ``eager`` backend,
    no inductor): (its output, the first line of every graph break's reason)."""
    torch._dynamo.reset()
    explain = ExplainWithBackend("eager")
    out = torch.compile(fn, backend=explain)(*args)
    explained = explain.output()
    assert explained.graph_count >= 1
    return out, [str(r.reason).splitlines()[0] for r in explained.break_reasons]


def break_reasons(fn, *args) -> list[str]:
    """The first line of every graph break's reason when dynamo traces ``fn(*args)``."""
    return traced(fn, *args)[1]
