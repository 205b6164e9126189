"""One kernels case: the variant's timings at one shape (``variants.run_kernel_point``), and what
can be decided before a worker starts without running a kernel (``unavailable``); what shows
only by trying becomes an ``unavailable`` row in the worker. docs/tasks/kernels.md.
"""

from __future__ import annotations

from posbench.core.task import Unavailable

# torch and the kernels (posbench.tasks.kernels.timed_points) are imported inside the functions:
# validating a suite imports this module (through the task's declaration), and must not wait for torch.


def _point_args(case, seq_len=None) -> dict:
    import torch

    s, p = case.settings, case.params
    get = (lambda k: s[k]) if isinstance(s, dict) else (lambda k: getattr(s, k))
    params = p if isinstance(p, dict) else p.model_dump()
    return dict(
        batch=get("batch"),
        heads=get("heads"),
        seq_len=seq_len or params["seq_len"],
        head_dim=params["head_dim"],
        dtype=getattr(torch, get("dtype")),
        device=case.device,
        allow_interpreter=get("allow_interpreter"),
    )


def unavailable(case) -> str | None:
    """Decided before a worker starts, without running a kernel (see the module docstring)."""
    from posbench.tasks.kernels.timed_points import static_reason

    args = _point_args(case)
    return static_reason(case.method, args["device"], args["dtype"], args["allow_interpreter"])


def run(case) -> dict:
    from posbench.tasks.kernels.timed_points import run_kernel_point

    args = _point_args(case)
    row = run_kernel_point(case.method, **args, warmup=case.settings.warmup, reps=case.settings.reps)
    if row.get("status") == "unavailable":
        raise Unavailable(row["reason"])
    metrics = {k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    info = {k: v for k, v in row.items() if isinstance(v, str)}
    return {"metrics": metrics, "series": {}, "info": info}  # info: backend, kernel config (strings)
