"""The decode task's declaration: its settings, grid point, metrics and ``TASK``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from posbench.core.registry import register_task
from posbench.core.task import Metric, ModelSettings, Task
from posbench.tasks.decode.report import REPORT_COLUMN, REPORT_ORDER
from posbench.tasks.decode.run import run

METRICS = {
    "ttft_ms": Metric(
        title="Time to first token (prefill)",
        unit="ms",
        doc="prefill of the (B, C) prompt into the KV cache and the "
        "argmax of its last logits, median over repeats; lower is better",
        higher_is_better=False,
        fmt="ms",
        table=True,
    ),
    "ttft_ms_min": Metric(
        title="Time to first token, fastest", unit="ms", doc="fastest prefill", higher_is_better=None, fmt="ms"
    ),
    "ttft_ms_max": Metric(
        title="Time to first token, slowest", unit="ms", doc="slowest prefill", higher_is_better=None, fmt="ms"
    ),
    "prefill_wps": Metric(
        title="Prefill speed", unit="tokens/s", doc="B * C / ttft_ms; higher is better", higher_is_better=True, fmt="count"
    ),
    "tpot_ms": Metric(
        title="Time per output token (median)",
        unit="ms",
        doc="one greedy decode step of the whole batch at context C..C+n-1, median over every measured step; lower is better",
        higher_is_better=False,
        fmt="ms",
        table=True,
    ),
    "tpot_p90_ms": Metric(
        title="Time per output token (p90)",
        unit="ms",
        doc="90th percentile of the measured decode step times; lower is better",
        higher_is_better=False,
        fmt="ms",
        table=True,
    ),
    "tpot_ms_min": Metric(
        title="Time per output token, fastest", unit="ms", doc="fastest decode step", higher_is_better=None, fmt="ms"
    ),
    "tpot_ms_max": Metric(
        title="Time per output token, slowest", unit="ms", doc="slowest decode step", higher_is_better=None, fmt="ms"
    ),
    "decode_wps": Metric(
        title="Decode speed",
        unit="tokens/s",
        doc="B * decode_tokens / decode time of a repeat, median over repeats; higher is better",
        higher_is_better=True,
        fmt="count",
        table=True,
    ),
    "kv_cache_bytes": Metric(
        title="KV-cache size",
        unit="bytes",
        doc="keys (as the method caches them: fox's carry one "
        "float of log f per key and head) and values of every layer after the prefill (C tokens); "
        "lower is better",
        higher_is_better=False,
        fmt="bytes",
        table=True,
    ),
    "peak_mem_prefill_bytes": Metric(
        title="Peak prefill memory",
        unit="bytes",
        doc="CUDA max_memory_allocated, CPU peak resident set, prefill phase (largest over repeats); lower is better",
        higher_is_better=False,
        fmt="bytes",
    ),
    "peak_mem_prefill_reserved_bytes": Metric(
        title="Peak prefill memory reserved",
        unit="bytes",
        doc="CUDA max_memory_reserved in the prefill (null on CPU)",
        higher_is_better=False,
        fmt="bytes",
    ),
    "peak_mem_decode_bytes": Metric(
        title="Peak decode memory",
        unit="bytes",
        doc="as peak_mem_prefill_bytes, decode steps 2..n (weights and cache included); lower is better",
        higher_is_better=False,
        fmt="bytes",
        table=True,
    ),
    "peak_mem_decode_reserved_bytes": Metric(
        title="Peak decode memory reserved",
        unit="bytes",
        doc="CUDA max_memory_reserved in decoding (null on CPU)",
        higher_is_better=False,
        fmt="bytes",
    ),
    "mem_base_bytes": Metric(
        title="Base memory",
        unit="bytes",
        doc="in use before the first repeat: model and prompt (CPU: also the Python and torch runtime)",
        higher_is_better=None,
        fmt="bytes",
    ),
    "compile_s": Metric(
        title="Compile time",
        unit="s",
        doc="compile: true: the compiling repeats (a prefill and decode_tokens steps each, "
        "until one compiles nothing new), timed apart from the measured repeats",
        higher_is_better=None,
    ),
    "n_rounds": Metric(
        title="Rounds",
        unit="",
        doc="interleaved rounds that finished ok; every other metric is the median over them",
        higher_is_better=None,
        fmt="int",
    ),
    "n_params": Metric(title="Parameters", unit="", doc="parameters of the model", higher_is_better=None, fmt="count"),
    "threads": Metric(title="Threads", unit="", doc="torch CPU threads in the worker", higher_is_better=None, fmt="int"),
}


class Settings(ModelSettings):
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="dtype of weights and cache")
    decode_tokens: int = Field(32, ge=32, description="greedy tokens generated (and timed) per repeat")
    warmup_repeats: int = Field(1, ge=0, description="uncounted repeats (prefill + decode) before the measured ones")
    repeats: int = Field(
        3, ge=1, description="measured repeats in one process; TTFT is the median over them, TPOT over all their steps"
    )
    rounds: int = Field(
        1,
        ge=1,
        description="interleaved rounds (runner): every method of a grid point once per "
        "round, round-robin, each round a fresh process; ratios paired by round",
    )
    compile: bool = Field(
        False,
        description="run the model through torch.compile (inductor; mode reduce-overhead, i.e. CUDA graphs, on "
        "CUDA); one uncounted repeat compiles the prefill and the decode step, timed apart (compile_s); a method the "
        "compiler fails on gets an unavailable row with the compiler's reason",
    )


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    context: int = Field(ge=1, description="prompt length C: tokens in the KV cache when decoding starts")
    batch: int = Field(1, ge=1, description="sequences decoded together, B")


TASK = register_task(
    Task(
        Settings=Settings,
        Params=Params,
        METRICS=METRICS,
        run=run,
        REPORT_ORDER=REPORT_ORDER,
        REPORT_COLUMN=REPORT_COLUMN,
        name="decode",
    )
)
