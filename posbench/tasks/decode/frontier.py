"""The decode cost at a target length, for the frontier (docs/tasks/frontier.md): a training task
times the decode task's greedy steps with a KV cache (``generation``) on its own model at each
target length, so the frontier can put quality beside what serving at that length costs.
"""
from __future__ import annotations

import statistics

TPOT = "decode_tpot_ms@"  # + the context: median milliseconds of one decode step (batch 1)
TTFT = "decode_ttft_ms@"  # + the context: milliseconds of the prefill


def decode_cost(model, lengths: list[int], device, tokens: int, seed: int = 0) -> dict:
    """{``decode_tpot_ms@C``, ``decode_ttft_ms@C``} at each context C of ``lengths``: batch 1, one
    untimed prefill and step (allocation), then a timed prefill of a random (1, C) prompt and
    ``tokens`` timed greedy steps, their median. The model is left in eval mode."""
    import torch

    from posbench.engine.timing import make_device
    from posbench.tasks.decode.generation import decode_step, greedy, last_position_only, prefill

    dev = make_device(torch.device(device).type)
    g = torch.Generator().manual_seed(seed)
    out: dict = {}
    model.eval()
    with torch.inference_mode(), last_position_only(model):
        for C in lengths:
            prompt = torch.randint(0, model.cfg.vocab_size, (1, C), generator=g).to(device)  # (1, C)
            state: dict = {}

            def do_prefill():
                state["cache"], logits = prefill(model, prompt, capacity=C + tokens + 1)
                state["token"] = greedy(logits)

            def do_step():
                state["token"] = greedy(decode_step(model, state["cache"], state["token"]))

            do_prefill()  # untimed: the first call at this length allocates and builds tables
            do_step()
            ttft = dev.time_window(do_prefill, 1)
            steps = [dev.time_window(do_step, 1) for _ in range(tokens)]
            out[f"{TPOT}{C}"] = statistics.median(steps) * 1e3
            out[f"{TTFT}{C}"] = ttft * 1e3
    return out


def case_decode_cost(case, s, vocab_size: int, lengths: list[int]) -> dict:
    """``decode_cost`` of a training case at ``lengths``, on a fresh model of its configuration in
    its ``eval_dtype`` (the cost does not depend on the weights) with ``s.decode_tokens`` steps."""
    import torch

    from posbench.core.model import TransformerLM
    from posbench.core.task import case_model_config

    torch.manual_seed(s.seed)
    cfg = case_model_config(case, s.method_options.get(case.method, {}), vocab_size=vocab_size)
    model = TransformerLM(cfg).to(device=case.device, dtype=getattr(torch, s.eval_dtype))
    return decode_cost(model, lengths, case.device, s.decode_tokens, s.seed)
