"""What the graph-break tests share: the method groups, a fresh dynamo per test, the threshold of the
blocked plans lowered through their own knobs, the break counter, and the tiny model after one
training forward."""

import pytest
import torch
import torch._dynamo
from torch._dynamo.backends.debugging import ExplainWithBackend

from posbench.attention import routes
from posbench.core.model import TransformerLM, build_model, model_config
from posbench.triton_kernels import FusedKernelMethod

MISSION = ["sinusoidal", "rotary", "t5_bias", "alibi"]
BIAS = ["t5_bias", "alibi", "kerple_log", "fire"]

# With ``short_blocks`` a bias method attends by blocks of 32 rows from 64 queries on, so L 128 (4
# blocks), 50 (the masked bias) and 69 (a short last block) cross the paths that L 1024, 300 and 517
# cross at the defaults (512 queries, 64 rows): dynamo unrolls the block loop, and a fire layer's
# blocks cost seconds each to trace.
SHORT_MIN_ROWS, SHORT_BLOCK_ROWS = 64, 32
LENGTHS = (128, 50, 69)  # with short_blocks: blocks, the masked bias, blocks with a short last one
L_TRAIN = 64  # the scaled rotary rows' training length: LENGTHS are below, just beyond and twice beyond it


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


def trained_tiny_model(name: str, length: int = L_TRAIN, **options) -> TransformerLM:
    """The tiny model (2 layers) after one eager training forward of ``length`` tokens: a scaled
    rotary row records L_train there. A method unavailable on a CPU skips."""
    torch.manual_seed(0)
    model = build_model(model_config("tiny", name, n_layers=2, method_options=options))
    why = model.method.unavailable(torch.device("cpu"), torch.float32)
    if why is None and isinstance(model.method, FusedKernelMethod):  # TRITON_INTERPRET=1 (tests/conftest.py)
        why = "on a CPU its Triton kernels run under the interpreter (numpy), which dynamo cannot trace"
    if why:
        pytest.skip(f"{name}: {why}")
    with torch.no_grad():
        model.train()(torch.randint(0, 256, (1, length)))
    return model


def fullgraph(fn, backend="eager"):
    """``fn`` compiled as one graph (a break is an error) on ``backend``."""
    return torch.compile(fn, backend=backend, fullgraph=True)
