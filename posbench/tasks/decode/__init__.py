"""Decode: what a position method costs at inference time with a KV cache: time to first token
(prefill), time per output token (greedy decode steps, each timed) and memory, at context C and
batch B. How a case runs and is timed: docs/tasks/decode.md.
"""
from __future__ import annotations

import statistics
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from posbench.core.task import Metric, ModelSettings, Task, case_model_config
from posbench.engine import compiled

# torch, the model and the decoding steps (posbench.tasks.decode.generation) are imported inside run():
# validating a suite imports this module for its Settings, and must not wait for torch.

M = Metric  # the declarations below read as a table
METRICS = {
    "ttft_ms": M("Time to first token (prefill)", "ms", "prefill of the (B, C) prompt into the KV cache and the "
                 "argmax of its last logits, median over repeats; lower is better", False, "ms", table=True),
    "ttft_ms_min": M("Time to first token, fastest", "ms", "fastest prefill", None, "ms"),
    "ttft_ms_max": M("Time to first token, slowest", "ms", "slowest prefill", None, "ms"),
    "prefill_wps": M("Prefill speed", "tokens/s", "B * C / ttft_ms; higher is better", True, "count"),
    "tpot_ms": M("Time per output token (median)", "ms", "one greedy decode step of the whole batch at context "
                 "C..C+n-1, median over every measured step; lower is better", False, "ms", table=True),
    "tpot_p90_ms": M("Time per output token (p90)", "ms", "90th percentile of the measured decode step times; "
                     "lower is better", False, "ms", table=True),
    "tpot_ms_min": M("Time per output token, fastest", "ms", "fastest decode step", None, "ms"),
    "tpot_ms_max": M("Time per output token, slowest", "ms", "slowest decode step", None, "ms"),
    "decode_wps": M("Decode speed", "tokens/s", "B * decode_tokens / decode time of a repeat, median over repeats; "
                    "higher is better", True, "count", table=True),
    "kv_cache_bytes": M("KV-cache size", "bytes", "keys (as the method caches them: fox's carry one "
                        "float of log f per key and head) and values of every layer after the prefill (C tokens); "
                        "lower is better", False, "bytes", table=True),
    "peak_mem_prefill_bytes": M("Peak prefill memory", "bytes", "CUDA max_memory_allocated, CPU peak resident set, "
                                "prefill phase (largest over repeats); lower is better", False, "bytes"),
    "peak_mem_prefill_reserved_bytes": M("Peak prefill memory reserved", "bytes",
                                         "CUDA max_memory_reserved in the prefill (null on CPU)", False, "bytes"),
    "peak_mem_decode_bytes": M("Peak decode memory", "bytes", "as peak_mem_prefill_bytes, decode steps 2..n "
                               "(weights and cache included); lower is better", False, "bytes", table=True),
    "peak_mem_decode_reserved_bytes": M("Peak decode memory reserved", "bytes",
                                        "CUDA max_memory_reserved in decoding (null on CPU)", False, "bytes"),
    "mem_base_bytes": M("Base memory", "bytes", "in use before the first repeat: model and prompt (CPU: also the "
                        "Python and torch runtime)", None, "bytes"),
    "compile_s": M("Compile time", "s", "compile: true: the compiling repeats (a prefill and decode_tokens steps each, "
                   "until one compiles nothing new), timed apart from the measured repeats", None),
    "n_rounds": M("Rounds", "", "interleaved rounds that finished ok; every other metric is the median over them",
                  None, "int"),
    "n_params": M("Parameters", "", "parameters of the model", None, "count"),
    "threads": M("Threads", "", "torch CPU threads in the worker", None, "int"),
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
TASK = Task(Settings, Params, METRICS, run, REPORT_ORDER=40, REPORT_COLUMN="context")
