"""The decode cost at a target length, for the frontier (docs/tasks/frontier.md): a training task
times the decode task's greedy steps with a KV cache (``generation``) on its own model at each
target length, in several repeats, so the frontier can put quality beside what serving at that
length costs and how much that cost moved between repeats.
"""

from __future__ import annotations

import statistics
from functools import partial

TPOT = "decode_tpot_ms@"  # + the context: median over repeats of each repeat's median decode step (batch 1)
TPOT_MIN = "decode_tpot_ms_min@"  # + the context: the fastest repeat's median step
TPOT_MAX = "decode_tpot_ms_max@"  # + the context: the slowest repeat's median step
TTFT = "decode_ttft_ms@"  # + the context: milliseconds of the prefill, median over repeats


def decode_cost(model, lengths: list[int], device, tokens: int, seed: int = 0, repeats: int = 1) -> dict:
    """``TPOT`` and ``TTFT`` (ms) at each context C of ``lengths``, with ``TPOT_MIN``/``TPOT_MAX`` for
    several repeats: batch 1, one untimed prefill and step per C, then ``repeats`` rounds over the
    lengths, each a timed prefill of a random (1, C) prompt and ``tokens`` timed greedy steps. The
    model is left in eval mode."""
    import torch

    from posbench.engine.timing import make_device
    from posbench.protocols.generation import decode_step, greedy, last_position_only, prefill

    if repeats < 1:
        raise ValueError(f"decode repeats must be at least 1, got {repeats}")
    dev = make_device(torch.device(device).type)
    g = torch.Generator().manual_seed(seed)
    prompts = {C: torch.randint(0, model.cfg.vocab_size, (1, C), generator=g).to(device) for C in lengths}  # (1, C)
    state: dict = {}

    def do_prefill(C: int):
        state["cache"], logits = prefill(model, prompts[C], capacity=C + tokens + 1)
        state["token"] = greedy(logits)

    def do_step():
        state["token"] = greedy(decode_step(model, state["cache"], state["token"]))

    ttft: dict[int, list[float]] = {C: [] for C in lengths}
    tpot: dict[int, list[float]] = {C: [] for C in lengths}  # each repeat's median step
    model.eval()
    with torch.inference_mode(), last_position_only(model):
        for C in lengths:  # untimed: the first call at each length allocates and builds tables
            do_prefill(C)
            do_step()
        for _ in range(repeats):  # rounds over the lengths, so drift hits every length alike
            for C in lengths:
                ttft[C].append(dev.time_window(partial(do_prefill, C), 1))
                tpot[C].append(statistics.median(dev.time_window(do_step, 1) for _ in range(tokens)))
    out: dict = {}
    for C in lengths:
        out[f"{TPOT}{C}"] = statistics.median(tpot[C]) * 1e3
        if repeats > 1:  # one pass has no spread to report
            out[f"{TPOT_MIN}{C}"] = min(tpot[C]) * 1e3
            out[f"{TPOT_MAX}{C}"] = max(tpot[C]) * 1e3
        out[f"{TTFT}{C}"] = statistics.median(ttft[C]) * 1e3
    return out


def case_decode_cost(case, s, vocab_size: int, lengths: list[int]) -> dict:
    """``decode_cost`` of a training case at ``lengths``, on a fresh model of its configuration in
    its ``eval_dtype`` (the cost does not depend on the weights), ``s.decode_tokens`` steps and
    ``s.decode_repeats`` repeats."""
    import torch

    from posbench.core.model import build_model
    from posbench.core.task import case_model_config

    torch.manual_seed(s.seed)
    cfg = case_model_config(case, s.method_options.get(case.method, {}), vocab_size=vocab_size)
    model = build_model(cfg).to(device=case.device, dtype=getattr(torch, s.eval_dtype))
    return decode_cost(model, lengths, case.device, s.decode_tokens, s.seed, s.decode_repeats)
