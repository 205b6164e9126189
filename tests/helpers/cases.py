"""One case of a task, built in-process as the worker would (settings and params validated), and
the tiny extrapolation settings (``TINY``: a one-layer model on a small synthetic corpus, 4 steps)
that the task tests start from."""

from __future__ import annotations

from posbench import tasks
from posbench.core.case import Case


def make_case(task_name, method, params, settings, tmp_path):
    """(the loaded task, a cpu case of suite "t") with ``settings``/``params`` validated by the
    task's own models; the case writes under tmp_path."""
    task = tasks.get(task_name)
    case = Case(
        suite="t",
        task=task_name,
        method=method,
        params=params,
        settings=settings,
        device="cpu",
        profile="cpu",
        run_id="r",
        out_dir=str(tmp_path),
    )
    case.settings = task.Settings.model_validate(settings)
    case.params = task.Params.model_validate(params)
    return task, case


TINY = {
    "model": "tiny",
    "model_overrides": {"n_layers": 1, "d_model": 32, "n_heads": 2, "d_ff": 64},
    "corpus": {"kind": "synthetic", "synthetic": {"vocab": 16, "order": 1, "branching": 2, "jump": 0.05}, "size": 20000},
    "steps": 4,
    "batch_size": 4,
    "warmup_steps": 1,
    "L_valid_factors": [1, 2],
    "modes": ["nonoverlapping", "sliding"],
    "stride": 4,
    "eval_tokens": 300,
    "eval_batch_size": 8,
    "interpolate": True,
}


# The tiny settings of the lengthgen and retrieval tests (tests/tasks).
LENGTHGEN_TINY = {
    "model": "tiny",
    "model_overrides": {"n_layers": 1, "d_model": 32, "n_heads": 2, "d_ff": 64},
    "steps": 3,
    "batch_size": 4,
    "warmup_steps": 1,
    "test_factors": [1, 2],
    "eval_samples": 6,
    "eval_batch_size": 4,
}

RETRIEVAL_TINY = {
    "model": "tiny",
    "model_overrides": {"n_layers": 1, "d_model": 32, "n_heads": 2, "d_ff": 64},
    "corpus": {"kind": "synthetic", "synthetic": {"vocab": 16, "order": 1, "branching": 2, "jump": 0.05}, "size": 20000},
    "steps": 3,
    "batch_size": 4,
    "warmup_steps": 1,
    "L_valid_factors": [1, 2],
    "eval_samples": 6,
    "eval_batch_size": 4,
    "n_symbols": 8,
    "key_len": 3,
    "n_pairs": 4,
    "n_queries": 2,
    "segment_len": 4,
    "depths": [0.0, 0.5, 1.0],
    "mix": 0.5,
}
