"""One decode case: a (B, C) prompt prefilled into the KV cache, then ``decode_tokens`` greedy
steps, each timed, over warm-up and measured repeats."""

from __future__ import annotations

import statistics

from posbench.core.task import case_model_config
from posbench.engine import compiled

# torch, the model and the decoding steps (posbench.protocols.generation) are imported inside run():
# validating a suite imports this module, and must not wait for torch.


def run(case) -> dict:
    import torch

    from posbench.core.model import build_model
    from posbench.engine.timing import make_device, summarize
    from posbench.protocols.generation import decode_step, greedy, kv_cache_bytes, last_position_only, prefill

    s, p = case.settings, case.params
    device = torch.device(case.device)
    dev = make_device(case.device)
    dtype = getattr(torch, s.dtype)  # "float32" | "bfloat16" | "float16"
    torch.manual_seed(s.seed)
    cfg = case_model_config(case)
    model = build_model(cfg).to(device=device, dtype=dtype).eval()
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
    info = {
        **model.info(device, dtype),
        "timing": _timing_note(dev.kind, s),
        "weights": f"model.to({s.dtype})",
        "compile": compiled.describe(mode, s.compile),
    }
    if s.compile:
        info["compile_graph_breaks"] = str(compiled.graph_breaks() - graph_breaks)
    return {"metrics": metrics, "series": series, "info": info}


def _timing_note(kind: str, s) -> str:
    clock = "CUDA events per step after a synchronize" if kind == "cuda" else "time.perf_counter per step"
    return (
        f"{clock}; {s.warmup_repeats} warm-up repeat(s), then {s.repeats} repeat(s) of 1 prefill + "
        f"{s.decode_tokens} decode steps; medians over repeats (TTFT) and over all measured steps (TPOT)"
    )
