"""Decode: what a position method costs at inference time with a KV cache: time to first token
(prefill), time per output token (greedy decode steps, each timed) and memory, at context C and
batch B. How a case runs and is timed: docs/tasks/decode.md.
"""
from __future__ import annotations

import statistics
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from posbench.core.registry import register_task
from posbench.core.task import Metric, ModelSettings, Task, case_model_config
from posbench.engine import compiled

# torch, the model and the decoding steps (posbench.tasks.decode.generation) are imported inside run():
# validating a suite imports this module for its Settings, and must not wait for torch.

METRICS = {
    "ttft_ms": Metric(title="Time to first token (prefill)", unit="ms", doc="prefill of the (B, C) prompt into the KV cache and the "
                 "argmax of its last logits, median over repeats; lower is better", higher_is_better=False, fmt="ms", table=True),
    "ttft_ms_min": Metric(title="Time to first token, fastest", unit="ms", doc="fastest prefill", higher_is_better=None, fmt="ms"),
    "ttft_ms_max": Metric(title="Time to first token, slowest", unit="ms", doc="slowest prefill", higher_is_better=None, fmt="ms"),
    "prefill_wps": Metric(title="Prefill speed", unit="tokens/s", doc="B * C / ttft_ms; higher is better", higher_is_better=True, fmt="count"),
    "tpot_ms": Metric(title="Time per output token (median)", unit="ms", doc="one greedy decode step of the whole batch at context "
                 "C..C+n-1, median over every measured step; lower is better", higher_is_better=False, fmt="ms", table=True),
    "tpot_p90_ms": Metric(title="Time per output token (p90)", unit="ms", doc="90th percentile of the measured decode step times; "
                     "lower is better", higher_is_better=False, fmt="ms", table=True),
    "tpot_ms_min": Metric(title="Time per output token, fastest", unit="ms", doc="fastest decode step", higher_is_better=None, fmt="ms"),
    "tpot_ms_max": Metric(title="Time per output token, slowest", unit="ms", doc="slowest decode step", higher_is_better=None, fmt="ms"),
    "decode_wps": Metric(title="Decode speed", unit="tokens/s", doc="B * decode_tokens / decode time of a repeat, median over repeats; "
                    "higher is better", higher_is_better=True, fmt="count", table=True),
    "kv_cache_bytes": Metric(title="KV-cache size", unit="bytes", doc="keys (as the method caches them: fox's carry one "
                        "float of log f per key and head) and values of every layer after the prefill (C tokens); "
                        "lower is better", higher_is_better=False, fmt="bytes", table=True),
    "peak_mem_prefill_bytes": Metric(title="Peak prefill memory", unit="bytes", doc="CUDA max_memory_allocated, CPU peak resident set, "
                                "prefill phase (largest over repeats); lower is better", higher_is_better=False, fmt="bytes"),
    "peak_mem_prefill_reserved_bytes": Metric(title="Peak prefill memory reserved", unit="bytes",
                                         doc="CUDA max_memory_reserved in the prefill (null on CPU)", higher_is_better=False, fmt="bytes"),
    "peak_mem_decode_bytes": Metric(title="Peak decode memory", unit="bytes", doc="as peak_mem_prefill_bytes, decode steps 2..n "
                               "(weights and cache included); lower is better", higher_is_better=False, fmt="bytes", table=True),
    "peak_mem_decode_reserved_bytes": Metric(title="Peak decode memory reserved", unit="bytes",
                                        doc="CUDA max_memory_reserved in decoding (null on CPU)", higher_is_better=False, fmt="bytes"),
    "mem_base_bytes": Metric(title="Base memory", unit="bytes", doc="in use before the first repeat: model and prompt (CPU: also the "
                        "Python and torch runtime)", higher_is_better=None, fmt="bytes"),
    "compile_s": Metric(title="Compile time", unit="s", doc="compile: true: the compiling repeats (a prefill and decode_tokens steps each, "
                   "until one compiles nothing new), timed apart from the measured repeats", higher_is_better=None),
    "n_rounds": Metric(title="Rounds", unit="", doc="interleaved rounds that finished ok; every other metric is the median over them",
                  higher_is_better=None, fmt="int"),
    "n_params": Metric(title="Parameters", unit="", doc="parameters of the model", higher_is_better=None, fmt="count"),
    "threads": Metric(title="Threads", unit="", doc="torch CPU threads in the worker", higher_is_better=None, fmt="int"),
}


class Settings(ModelSettings):
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="dtype of weights and cache")
    decode_tokens: int = Field(32, ge=32, description="greedy tokens generated (and timed) per repeat")
    warmup_repeats: int = Field(1, ge=0, description="uncounted repeats (prefill + decode) before the measured ones")
    repeats: int = Field(3, ge=1, description="measured repeats in one process; TTFT is the median over them, TPOT "
                         "over all their steps")
    rounds: int = Field(1, ge=1, description="interleaved rounds (runner): every method of a grid point once per "
                        "round, round-robin, each round a fresh process; ratios paired by round")
    compile: bool = Field(
        False, description="run the model through torch.compile (inductor; mode reduce-overhead, i.e. CUDA graphs, on "
        "CUDA); one uncounted repeat compiles the prefill and the decode step, timed apart (compile_s); a method the "
        "compiler fails on gets an unavailable row with the compiler's reason")


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    context: int = Field(ge=1, description="prompt length C: tokens in the KV cache when decoding starts")
    batch: int = Field(1, ge=1, description="sequences decoded together, B")


# ---------------------------------------------------------------------------------------------
# The case


def run(case) -> dict:
    import torch

    from posbench.tasks.decode.generation import decode_step, greedy, kv_cache_bytes, last_position_only, prefill
    from posbench.engine.timing import make_device, summarize
    from posbench.core.model import TransformerLM

    s, p = case.settings, case.params
    device = torch.device(case.device)
    dev = make_device(case.device)
    dtype = getattr(torch, s.dtype)  # "float32" | "bfloat16" | "float16"
    torch.manual_seed(s.seed)
    cfg = case_model_config(case)
    model = TransformerLM(cfg).to(device=device, dtype=dtype).eval()
    mode = compiled.mode_for(case.device, decode=True)
    run_model = compiled.compile_module(model, mode) if s.compile else model  # what prefill and steps call
    g = torch.Generator().manual_seed(s.seed)
    prompt = torch.randint(0, cfg.vocab_size, (p.batch, p.context), generator=g).to(device)  # (B, C)
    metrics = {"n_params": model.num_parameters(), "threads": torch.get_num_threads(), "mem_base_bytes": dev.in_use()}

    ttft, step_s, decode_wps, peaks, kv_bytes = [], [], [], {"prefill": [], "decode": []}, None
    state: dict = {}

    def do_prefill():
        # Capacity for the prompt and every token to come: decoding writes one slot per step.
        state["cache"], logits = prefill(run_model, prompt, capacity=p.context + s.decode_tokens)
        state["token"] = greedy(logits)

    def do_step():
        state["token"] = greedy(decode_step(run_model, state["cache"], state["token"]))

    def compile_repeat():  # compile: true: a prefill and every decode step once, compiling, uncounted
        do_prefill()
        for _ in range(s.decode_tokens):
            do_step()

    graph_breaks = compiled.graph_breaks() if s.compile else 0
    with torch.inference_mode(), last_position_only(model):
        if s.compile:
            metrics["compile_s"], _ = compiled.settle(compile_repeat, case.method, lambda fn: dev.time_window(fn, 1))
            state.clear()
        # A recompilation in a measured repeat would time the compiler: an error instead.
        with compiled.no_recompile(s.compile):
            for r in range(s.warmup_repeats + s.repeats):
                state.clear()  # the last repeat's cache goes before this repeat's prefill allocates
                dev.reset_peak()
                prefill_s = dev.time_window(do_prefill, 1)
                prefill_peak = dev.peak()
                kv_bytes = kv_cache_bytes(state["cache"])
                steps = [dev.time_window(do_step, 1)]
                # The decode peak starts after the first step: until then the prefill's transient
                # tensors (and a method's cached (H, C, C) bias, dropped at the first decode step)
                # are still allocated, and they belong to the prefill's peak.
                dev.reset_peak()
                steps += [dev.time_window(do_step, 1) for _ in range(s.decode_tokens - 1)]
                if r < s.warmup_repeats:
                    continue
                ttft.append(prefill_s * 1e3)
                step_s.extend(steps)
                decode_wps.append(p.batch * len(steps) / sum(steps))
                peaks["prefill"].append(prefill_peak)
                peaks["decode"].append(dev.peak())
            state.clear()

    tpot = [t * 1e3 for t in step_s]
    metrics["ttft_ms"], metrics["ttft_ms_min"], metrics["ttft_ms_max"] = summarize(ttft)
    metrics["prefill_wps"] = p.batch * p.context / (metrics["ttft_ms"] / 1e3)
    metrics["tpot_ms"], metrics["tpot_ms_min"], metrics["tpot_ms_max"] = summarize(tpot)
    metrics["tpot_p90_ms"] = statistics.quantiles(tpot, n=10, method="inclusive")[-1]
    metrics["decode_wps"] = statistics.median(decode_wps)
    metrics["kv_cache_bytes"] = kv_bytes
    for phase, values in peaks.items():
        allocated = [v["allocated"] for v in values if v["allocated"] is not None]
        reserved = [v["reserved"] for v in values if v["reserved"] is not None]
        metrics[f"peak_mem_{phase}_bytes"] = max(allocated) if allocated else None
        metrics[f"peak_mem_{phase}_reserved_bytes"] = max(reserved) if reserved else None
    series = {"ttft_ms_repeats": ttft, "tpot_ms_steps": tpot, "decode_wps_repeats": decode_wps}
    info = {**model.info(device, dtype), "timing": _timing_note(dev.kind, s), "weights": f"model.to({s.dtype})",
            "compile": compiled.describe(mode, s.compile)}
    if s.compile:
        info["compile_graph_breaks"] = str(compiled.graph_breaks() - graph_breaks)
    return {"metrics": metrics, "series": series, "info": info}


def _timing_note(kind: str, s: Settings) -> str:
    clock = "CUDA events per step after a synchronize" if kind == "cuda" else "time.perf_counter per step"
    return (f"{clock}; {s.warmup_repeats} warm-up repeat(s), then {s.repeats} repeat(s) of 1 prefill + "
            f"{s.decode_tokens} decode steps; medians over repeats (TTFT) and over all measured steps (TPOT)")


# The report: after the kernels section, methods x the context length C, a table per batch.
TASK = register_task(Task(Settings, Params, METRICS, run, REPORT_ORDER=40, REPORT_COLUMN="context", name="decode"))
