"""What the graph-break tests share: the method groups, a fresh dynamo per test, and the break counter."""
import pytest
import torch
import torch._dynamo

MISSION = ["sinusoidal", "rotary", "t5_bias", "alibi"]
BIAS = ["t5_bias", "alibi", "kerple_log", "fire"]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Autouse in every test module that imports it: each test traces from an empty cache."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def break_reasons(fn, *args) -> list[str]:
    """The first line of every graph break's reason when dynamo traces ``fn(*args)``."""
    explained = torch._dynamo.explain(fn)(*args)
    assert explained.graph_count >= 1
    return [str(r.reason).splitlines()[0] for r in explained.break_reasons]
