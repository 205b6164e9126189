"""One kernels case: the variant's timings at one point (``timed_points.run_kernel_point``), and what
can be decided before a worker starts without running a kernel (``unavailable``); what shows
only by trying becomes an ``unavailable`` row in the worker. docs/tasks/kernels.md.
"""

from __future__ import annotations

from posbench.core.task import Unavailable

# torch and the kernels (posbench.tasks.kernels.timed_points) are imported inside the functions:
# validating a suite imports this module (through the task's declaration), and must not wait for torch.


def _setting(case, key: str):
    """One settings value of ``case``: its settings may be the task's Settings or a plain dict."""
    s = case.settings
    return s[key] if isinstance(s, dict) else getattr(s, key)


def _point(case):
    """The case's ``timed_points.KernelPoint``: the settings' batch, heads and dtype, the grid's
    seq_len and head_dim, on the case's device."""
    import torch

    from posbench.tasks.kernels.timed_points import KernelPoint

    p = case.params
    params = p if isinstance(p, dict) else p.model_dump()
    return KernelPoint(
        batch=_setting(case, "batch"),
        heads=_setting(case, "heads"),
        seq_len=params["seq_len"],
        head_dim=params["head_dim"],
        dtype=getattr(torch, _setting(case, "dtype")),
        device=case.device,
    )


def unavailable(case) -> str | None:
    """Decided before a worker starts, without running a kernel (see the module docstring)."""
    from posbench.tasks.kernels.timed_points import static_reason

    point = _point(case)
    return static_reason(case.method, point.device, point.dtype, _setting(case, "allow_interpreter"))


def run(case) -> dict:
    from posbench.tasks.kernels.timed_points import run_kernel_point

    row = run_kernel_point(
        case.method,
        _point(case),
        warmup=case.settings.warmup,
        reps=case.settings.reps,
        allow_interpreter=_setting(case, "allow_interpreter"),
    )
    if row.get("status") == "unavailable":
        raise Unavailable(row["reason"])
    metrics = {k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    info = {k: v for k, v in row.items() if isinstance(v, str)}
    return {"metrics": metrics, "series": {}, "info": info}  # info: backend, kernel config (strings)
