"""Decode: what a position method costs at inference time, with a KV cache.

Serving is prefill plus token-by-token decoding, and position methods differ there again: ALiBi
and T5 build one bias row per generated token, rotary rotates the keys, a fused kernel runs with
a single query row. The two numbers serving stacks quote are time to first token and time per
output token.

One case = one method at context length C (``context``) and batch B (``batch``):
1. Prefill: a (B, C) prompt of random token ids (seeded; speed does not depend on the values) in
   one forward through ``model.new_cache()``; the first generated token is the argmax of the last
   position's logits. ``ttft_ms`` is the time of both.
2. Decode: ``decode_tokens`` greedy steps, each one token per sequence fed with the cache (the
   context grows from C to C + decode_tokens - 1); every step is timed on its own, so ``tpot_ms``
   (median) and ``tpot_p90_ms`` describe the distribution of per-token latencies.
3. Memory: ``kv_cache_bytes`` (keys and values of all layers after the prefill) and the peak
   memory of each phase: the prefill's from its start, the decode's from the end of the first
   decode step (by then what the prefill left behind is freed); both include weights and cache.
A round is one prefill and its decode; ``warmup_rounds`` uncounted rounds come first, then
``rounds`` measured ones. Timing (``measure.make_device``): on CUDA, CUDA events around every
step read after a synchronize (each step starts with an empty queue); on CPU,
``time.perf_counter`` around every step, and the medians over all rounds ride over a shared
machine's drift. ``info.timing`` records which.

The model runs in ``dtype`` (``model.to(dtype)``: serving keeps no float32 master weights), so
the cache is stored in that dtype; position tables stay float32 (``register_position_buffer``).
Only the last position's logits are computed in the prefill (``last_position_only``), as a
server does: the (B, C, V) logits of a 267k vocabulary would be the largest tensor of the run.
"""
from __future__ import annotations

import contextlib
import statistics
from dataclasses import fields
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator

from .. import registry
from ..measure import make_device, summarize
from ..method import ModelConfig
from ..model import PRESETS, KVCache, TransformerLM, model_config
from . import TaskSettings

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

METRICS = {
    "ttft_ms": "ms, lower is better; time to first token: prefill of the (B, C) prompt into the KV cache "
               "and the argmax of its last logits, median over rounds",
    "ttft_ms_min": "ms, lower is better; fastest prefill",
    "ttft_ms_max": "ms, lower is better; slowest prefill",
    "prefill_wps": "tokens/s, higher is better; B * C / ttft_ms",
    "tpot_ms": "ms, lower is better; time per output token (one greedy decode step of the whole batch at "
               "context C..C+n-1), median over every measured step",
    "tpot_p90_ms": "ms, lower is better; 90th percentile of the measured decode step times",
    "tpot_ms_min": "ms, lower is better; fastest decode step",
    "tpot_ms_max": "ms, lower is better; slowest decode step",
    "decode_wps": "tokens/s, higher is better; B * decode_tokens / decode time of a round, median over rounds",
    "kv_cache_bytes": "bytes, lower is better; keys and values of every layer after the prefill (C tokens)",
    "peak_mem_prefill_bytes": "bytes, lower is better; CUDA max_memory_allocated, CPU peak resident set, "
                              "prefill phase (largest over rounds)",
    "peak_mem_prefill_reserved_bytes": "bytes; CUDA max_memory_reserved in the prefill (null on CPU)",
    "peak_mem_decode_bytes": "bytes, lower is better; as peak_mem_prefill_bytes, decode steps 2..n (weights "
                             "and cache included)",
    "peak_mem_decode_reserved_bytes": "bytes; CUDA max_memory_reserved in decoding (null on CPU)",
    "mem_base_bytes": "bytes in use before the first round: model and prompt (CPU: also the Python and torch runtime)",
    "n_params": "parameters of the model",
    "threads": "torch CPU threads in the worker",
}


class Settings(TaskSettings):
    model: Literal[tuple(PRESETS)] = Field(description="model preset (posbench.model.PRESETS)")  # type: ignore[valid-type]
    model_overrides: dict[str, int] = Field(default_factory=dict, description="ModelConfig fields, e.g. vocab_size")
    method_options: dict[str, dict] = Field(
        default_factory=dict, description="per method: constructor options, e.g. {alibi: {bias_dtype: compute}}")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="dtype of weights and cache")
    decode_tokens: int = Field(32, ge=32, description="greedy tokens generated (and timed) per round")
    warmup_rounds: int = Field(1, ge=0, description="uncounted rounds (prefill + decode) before the measured ones")
    rounds: int = Field(3, ge=1, description="measured rounds; TTFT is the median over them, TPOT over all their steps")

    @field_validator("model_overrides")
    @classmethod
    def _known_fields(cls, value):
        allowed = {f.name for f in fields(ModelConfig)} - {"method", "method_options"}
        unknown = sorted(set(value) - allowed)
        if unknown:
            raise ValueError(f"unknown ModelConfig field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
        return value


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    context: int = Field(ge=1, description="prompt length C: tokens in the KV cache when decoding starts")
    batch: int = Field(1, ge=1, description="sequences decoded together, B")


# ---------------------------------------------------------------------------------------------
# The decoding steps (also what tests/test_decode.py checks against the full forward)


@contextlib.contextmanager
def last_position_only(model: TransformerLM):
    """Within the block, ``model(...)`` returns (B, 1, V) logits of the last position only.

    ``TransformerLM.forward`` has no switch for it, so a forward hook on the final LayerNorm keeps
    the last position and the tied output projection runs on that row alone.
    """
    handle = model.ln_f.register_forward_hook(lambda module, inputs, out: out[:, -1:])
    try:
        yield
    finally:
        handle.remove()


def prefill(model: TransformerLM, prompt: torch.Tensor) -> tuple[KVCache, torch.Tensor]:
    """A new cache holding ``prompt`` (B, C); returns it and the (B, V) logits of its last position."""
    cache = model.new_cache()
    logits = model(prompt, cache=cache)  # (B, C or 1, V)
    return cache, logits[:, -1]


def decode_step(model: TransformerLM, cache: KVCache, token: torch.Tensor) -> torch.Tensor:
    """Feed ``token`` (B, 1) at the next position; the cache grows by one; returns (B, V) logits."""
    return model(token, cache=cache)[:, -1]


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """(B, V) -> (B, 1) token ids: the argmax, kept on the device (no host synchronisation)."""
    return logits.argmax(dim=-1, keepdim=True)


def generate(model: TransformerLM, prompt: torch.Tensor, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decoding of ``steps`` tokens after ``prompt`` (B, C).

    Returns the tokens (B, steps) and the logits (B, steps, V) each was chosen from: the first
    from the prefill, the others from decode steps whose input is the token before them.
    """
    cache, logits = prefill(model, prompt)
    tokens, all_logits = [greedy(logits)], [logits]
    for _ in range(steps - 1):
        logits = decode_step(model, cache, tokens[-1])
        tokens.append(greedy(logits))
        all_logits.append(logits)
    return torch.cat(tokens, dim=1), torch.stack(all_logits, dim=1)


def kv_cache_bytes(cache: KVCache) -> int:
    """Bytes of the keys and values held for every layer (the position tensor is not counted)."""
    return sum(t.numel() * t.element_size() for t in cache.keys + cache.values if t is not None)


# ---------------------------------------------------------------------------------------------
# The case


def run(case) -> dict:
    s, p = case.settings, case.params
    if s.threads:
        torch.set_num_threads(s.threads)
    for folder in case.methods_dirs:
        registry.add_methods_dir(folder)
    device = torch.device(case.device)
    dev = make_device(case.device)
    dtype = DTYPES[s.dtype]
    torch.manual_seed(s.seed)
    cfg = model_config(s.model, case.method, method_options=s.method_options.get(case.method, {}), **s.model_overrides)
    model = TransformerLM(cfg).to(device=device, dtype=dtype).eval()
    g = torch.Generator().manual_seed(s.seed)
    prompt = torch.randint(0, cfg.vocab_size, (p.batch, p.context), generator=g).to(device)  # (B, C)
    metrics = {"n_params": model.num_parameters(), "threads": torch.get_num_threads(), "mem_base_bytes": dev.in_use()}

    ttft, step_s, decode_wps, peaks, kv_bytes = [], [], [], {"prefill": [], "decode": []}, None
    state: dict = {}

    def do_prefill():
        state["cache"], logits = prefill(model, prompt)
        state["token"] = greedy(logits)

    def do_step():
        state["token"] = greedy(decode_step(model, state["cache"], state["token"]))

    with torch.inference_mode(), last_position_only(model):
        for r in range(s.warmup_rounds + s.rounds):
            state.clear()  # the last round's cache goes before this round's prefill allocates
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
            if r < s.warmup_rounds:
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
    series = {"ttft_ms_rounds": ttft, "tpot_ms_steps": tpot, "decode_wps_rounds": decode_wps}
    info = {**model.info(device, dtype), "timing": _timing_note(dev.kind, s), "weights": f"model.to({s.dtype})"}
    return {"metrics": metrics, "series": series, "info": info}


def _timing_note(kind: str, s: Settings) -> str:
    clock = "CUDA events per step after a synchronize" if kind == "cuda" else "time.perf_counter per step"
    return (f"{clock}; {s.warmup_rounds} warm-up round(s), then {s.rounds} round(s) of 1 prefill + "
            f"{s.decode_tokens} decode steps; medians over rounds (TTFT) and over all measured steps (TPOT)")
