"""The kernels task's declaration: its variants, settings, grid point, metrics and ``TASK``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from posbench.core.registry import register_task
from posbench.core.task import Metric, Task, TaskSettings
from posbench.tasks.kernels.kernel_names import VARIANTS
from posbench.tasks.kernels.report import REPORT_COLUMN, REPORT_ORDER
from posbench.tasks.kernels.run import run, unavailable

METRICS = {
    "fwdbwd_ms": Metric(
        title="Kernel forward+backward time",
        unit="ms",
        doc="forward + backward time (ms), median",
        higher_is_better=False,
        fmt="ms",
        table=True,
    ),
    "fwd_ms": Metric(
        title="Kernel forward time",
        unit="ms",
        doc="forward time (ms), median over reps",
        higher_is_better=False,
        fmt="ms",
        table=True,
    ),
    "bwd_ms": Metric(
        title="Kernel backward time", unit="ms", doc="backward time (ms), median", higher_is_better=False, fmt="ms", table=True
    ),
    "fwdbwd_tflops": Metric(
        title="Kernel forward+backward throughput",
        unit="TFLOP/s",
        doc="forward + backward TFLOP/s",
        higher_is_better=True,
        table=True,
    ),
    "fwd_tflops": Metric(
        title="Kernel forward throughput",
        unit="TFLOP/s",
        doc="forward TFLOP/s (4*B*H*L^2*d, halved for causal)",
        higher_is_better=True,
    ),
    "bwd_tflops": Metric(
        title="Kernel backward throughput", unit="TFLOP/s", doc="backward TFLOP/s (2.5x forward FLOPs)", higher_is_better=True
    ),
    "fwdbwd_peak_fraction": Metric(
        title="Kernel forward+backward share of peak",
        unit="",
        doc="forward + backward FLOP/s over the device's dense peak (posbench/engine/peaks.py); absent on an unknown device",
        higher_is_better=True,
        table=True,
        optional=True,
    ),
    "fwd_peak_fraction": Metric(
        title="Kernel forward share of peak", unit="", doc="forward FLOP/s over the dense peak", higher_is_better=True
    ),
    "bwd_peak_fraction": Metric(
        title="Kernel backward share of peak", unit="", doc="backward FLOP/s over the dense peak", higher_is_better=True
    ),
    "dense_peak_tflops": Metric(
        title="Device dense peak",
        unit="TFLOP/s",
        doc="the device's dense peak at the point's dtype (datasheet, no sparsity)",
        higher_is_better=None,
    ),
    "peak_mem_bytes": Metric(
        title="Kernel peak memory",
        unit="bytes",
        doc="measured peak memory of one forward + backward (CUDA), else null",
        higher_is_better=False,
        fmt="bytes",
        table=True,
    ),
    "predicted_bias_bytes": Metric(
        title="Materialised bias size",
        unit="bytes",
        doc="B*H*L^2*bytes: what a materialised bias would take",
        higher_is_better=None,
        fmt="bytes",
    ),
    "fwd_ms_min": Metric(
        title="Kernel forward time, fastest rep", unit="ms", doc="forward time (ms), fastest rep", higher_is_better=None, fmt="ms"
    ),
    "fwd_ms_max": Metric(
        title="Kernel forward time, slowest rep", unit="ms", doc="forward time (ms), slowest rep", higher_is_better=None, fmt="ms"
    ),
    "bwd_ms_min": Metric(
        title="Kernel backward time, fastest rep",
        unit="ms",
        doc="backward time (ms), fastest rep",
        higher_is_better=None,
        fmt="ms",
    ),
    "bwd_ms_max": Metric(
        title="Kernel backward time, slowest rep",
        unit="ms",
        doc="backward time (ms), slowest rep",
        higher_is_better=None,
        fmt="ms",
    ),
    "fwdbwd_ms_min": Metric(
        title="Kernel forward+backward time, fastest rep", unit="ms", doc="fastest rep", higher_is_better=None, fmt="ms"
    ),
    "fwdbwd_ms_max": Metric(
        title="Kernel forward+backward time, slowest rep", unit="ms", doc="slowest rep", higher_is_better=None, fmt="ms"
    ),
    "flops_fwd": Metric(
        title="Forward FLOPs", unit="FLOP", doc="4*B*H*L^2*d, halved for causal", higher_is_better=None, fmt="count"
    ),
    "batch": Metric(title="Batch", unit="", doc="batch size of the point", higher_is_better=None, fmt="int"),
    "heads": Metric(title="Heads", unit="", doc="attention heads of the point", higher_is_better=None, fmt="int"),
    "seq_len": Metric(
        title="Sequence length", unit="tokens", doc="sequence length of the point", higher_is_better=None, fmt="int"
    ),
    "head_dim": Metric(title="Head dimension", unit="", doc="head dimension of the point", higher_is_better=None, fmt="int"),
}


class Settings(TaskSettings):
    batch: int = Field(4, ge=1)
    heads: int = Field(16, ge=1)
    dtype: Literal["float32", "float16", "bfloat16"] = "bfloat16"
    warmup: int = Field(5, ge=0)
    reps: int = Field(20, ge=1)
    allow_interpreter: bool = Field(False, description="run Triton rows under TRITON_INTERPRET=1 on CPU (slow)")


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    seq_len: int = Field(ge=1)
    head_dim: Literal[32, 64, 128] = 64


# TIMED: timings compared between the variants of one shape, so a sweep over several devices keeps
# a shape's variants on one device.
TASK = register_task(
    Task(
        Settings,
        Params,
        METRICS,
        run,
        METHODS=list(VARIANTS),
        unavailable=unavailable,
        TIMED=True,
        REPORT_ORDER=REPORT_ORDER,
        REPORT_COLUMN=REPORT_COLUMN,
        name="kernels",
    )
)
