"""Where a training step's time goes, and step-time ratios to nope, on the tiny model on a CPU.

    python benchmarks/step_profile.py profile t5_bias --seq-len 1024      # torch.profiler, self time
    python benchmarks/step_profile.py ratio t5_bias kerple_log --seq-len 1024 2048 --repeats 9
    python benchmarks/step_profile.py attention --seq-len 1024 2048 --repeats 9    # one layer's attention
    python benchmarks/step_profile.py ratio fox pope path path_fox nope:sdpa --seq-len 256 1024 2048  # issue 68
    python benchmarks/step_profile.py ratio alibi alibi:sdpa rotary+sink rotary+sink:sdpa path path_fox \
        --seq-len 256 512 1024 2048 --repeats 9 --clock cpu   # issue 68's routes: ":sdpa" is the rule off

One thread (``torch.set_num_threads(1)``), subnormals flushed as in the suites' workers
(``--keep-denormal``: not), batch x L = ``--tokens`` (2048, as the cpu-long profile). ``ratio`` interleaves the methods in every repeat (nope, then each method, in a rotated
order) and prints each method's step time / nope's: the median and the range over repeats. The
numbers are this machine's at that moment: quote them with their spread, never assert them in a
test. The efficiency suite (``bench.py --suite efficiency --profile cpu-long``) gives the same
ratios with paired windows and bootstrap intervals; this is the quicker loop while editing.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch

from posbench.core import causal
from posbench.core.model import build_model, lm_loss, model_config

SDPA_ONLY = ":sdpa"  # a method name's suffix: its plain causal attention on SDPA at every length


class Step:
    """One method's model at one length: ``run()`` is a training step (forward, loss, backward, AdamW).
    ``nope:sdpa`` (any method with the suffix ``SDPA_ONLY``): the method with posbench's rule of the
    faster causal path per length switched off (``posbench.core.causal``), SDPA's backward at
    every length, so ``ratio nope:sdpa`` times nope's floor before and after that rule (and
    ``alibi:sdpa``, ``rotary+sink:sdpa`` their routes without it: both read the same switch)."""

    def __init__(self, method: str, seq_len: int, tokens: int, seed: int = 0, compiled: bool = False):
        torch.manual_seed(seed)
        self.sdpa_only = method.endswith(SDPA_ONLY)
        method = method.removesuffix(SDPA_ONLY)
        self.model = build_model(model_config("tiny", method)).train()
        self.forward = torch.compile(self.model) if compiled else self.model  # compiled at the first step
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(0, self.model.cfg.vocab_size, (max(tokens // seq_len, 1), seq_len + 1), generator=g)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)

    def run(self) -> None:
        if self.sdpa_only:
            with sdpa_only():
                return self.step()
        return self.step()

    def step(self) -> None:
        loss = lm_loss(self.forward(self.x[:, :-1]), self.x[:, 1:])
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def seconds(self, steps: int, clock=time.perf_counter) -> float:
        t0 = clock()
        for _ in range(steps):
            self.run()
        return (clock() - t0) / steps


@contextlib.contextmanager
def sdpa_only():
    """Within: plain causal attention on SDPA at every length (``causal.blocked_backward_pays`` False)."""
    rule = causal.blocked_backward_pays
    causal.blocked_backward_pays = lambda length: False
    try:
        yield
    finally:
        causal.blocked_backward_pays = rule


def warm_up(run, compiled: bool) -> None:
    """Calls before timing: one fills lazily built tables and the allocator; compiled, a second
    settles the graph (the first compiles, with positions' tables still empty)."""
    for _ in range(2 if compiled else 1):
        run()


def profile(method: str, seq_len: int, tokens: int, steps: int, rows: int, compiled: bool = False) -> None:
    step = Step(method, seq_len, tokens, compiled=compiled)
    warm_up(step.run, compiled)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step.run()
    print(f"{method} L {seq_len}, {steps} steps, one thread{', torch.compile' if compiled else ''}")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))


def ratios(methods: list[str], seq_len: int, tokens: int, repeats: int, steps: int, options: argparse.Namespace) -> None:
    """``options``: ``compile`` (through torch.compile), ``clock`` ("wall" or "cpu": this thread's CPU
    time, which on a shared machine leaves out the time others held the core)."""
    compiled, clock = options.compile, time.thread_time if options.clock == "cpu" else time.perf_counter
    every = ["nope", *[m for m in methods if m != "nope"]]
    torch._dynamo.reset()  # each length compiles afresh (3 models per length reach dynamo's recompile limit of 8)
    steps_of = {m: Step(m, seq_len, tokens, compiled=compiled) for m in every}
    for s in steps_of.values():
        warm_up(s.run, compiled)
    times: dict[str, list[float]] = {m: [] for m in every}
    for r in range(repeats):
        order = every[r % len(every) :] + every[: r % len(every)]  # who goes first rotates
        for m in order:
            times[m].append(steps_of[m].seconds(steps, clock))
    print(
        f"L {seq_len}, {tokens} tokens per step, {repeats} repeats of {steps} steps, one thread"
        f"{', torch.compile' if compiled else ''}, {options.clock} clock"
    )
    for m in every[1:]:
        per = [t / b for t, b in zip(times[m], times["nope"])]
        print(
            f"  {m:12s} / nope: median {statistics.median(per):.3f} [{min(per):.3f}-{max(per):.3f}]"
            f"  (nope {statistics.median(times['nope']) * 1e3:.0f} ms/step)"
        )


def attention(seq_len: int, tokens: int, repeats: int, steps: int, compiled: bool = False) -> None:
    """One layer's attention forward + backward (4 heads of 32, batch x L = ``tokens``): causal SDPA
    (nope's) against the blocked path with a learnt distance row (t5_bias's and kerple_log's),
    interleaved; ratios of wall time and of this thread's CPU time (on a shared machine the CPU time
    leaves out the time others held the core). ``compiled``: both forwards through torch.compile."""
    from posbench.attention.distance_op import distance_attention

    g = torch.Generator().manual_seed(0)
    b, h, hd = max(tokens // seq_len, 1), 4, 32
    q, k, v = (torch.randn(b, h, seq_len, hd, generator=g).requires_grad_() for _ in range(3))
    row, dout = torch.randn(h, seq_len, generator=g).requires_grad_(), torch.randn(b, h, seq_len, hd, generator=g)

    def blocked(q, k, v, row):
        return distance_attention(q, k, v, row, 64)  # DistanceRoute's path compiled (one op), and eager

    def sdpa(q, k, v, row):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    if compiled:
        blocked, sdpa = torch.compile(blocked), torch.compile(sdpa)
    variants = {
        "sdpa causal": lambda: sdpa(q, k, v, row).backward(dout),
        "blocked, distance row": lambda: blocked(q, k, v, row).backward(dout),
    }
    wall: dict[str, list[float]] = {m: [] for m in variants}
    cpu: dict[str, list[float]] = {m: [] for m in variants}
    for f in variants.values():
        warm_up(f, compiled)
    for _ in range(repeats):
        for m, f in variants.items():
            t0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(steps):
                f()
            wall[m].append((time.perf_counter() - t0) / steps)
            cpu[m].append((time.thread_time() - c0) / steps)
    print(f"attention, L {seq_len}, batch {b}, {repeats} repeats of {steps}, one thread{', torch.compile' if compiled else ''}")
    for m in list(variants)[1:]:
        for what, t in (("wall", wall), ("cpu", cpu)):
            per = [x / y for x, y in zip(t[m], t["sdpa causal"])]
            print(
                f"  {m:26s} / sdpa ({what}): median {statistics.median(per):.3f} [{min(per):.3f}-{max(per):.3f}]"
                f"  (sdpa {statistics.median(t['sdpa causal']) * 1e3:.1f} ms)"
            )


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["profile", "ratio", "attention"])
    ap.add_argument("methods", nargs="*")
    ap.add_argument("--seq-len", type=int, nargs="+", default=[1024])
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--steps", type=int, default=2, help="steps per timing (ratio), or profiled steps")
    ap.add_argument("--rows", type=int, default=25, help="operators the profile table shows")
    ap.add_argument(
        "--compile", action="store_true", help="through torch.compile: the model (profile, ratio) or both attentions (attention)"
    )
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall", help="ratio: wall time, or this thread's CPU time")
    ap.add_argument(
        "--keep-denormal", action="store_true", help="leave subnormals unflushed (suite setting flush_denormal: false)"
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    # As every worker does (flush_denormal: true): a subnormal costs some CPUs a microcode trap.
    flushed = torch.set_flush_denormal(not args.keep_denormal) and not args.keep_denormal
    print(f"subnormals {'flushed' if flushed else 'kept'}; CPU dispatch {torch.backends.cpu.get_cpu_capability()}")
    for seq_len in args.seq_len:
        if args.what == "attention":
            attention(seq_len, args.tokens, args.repeats, args.steps, args.compile)
        elif args.what == "profile":
            for m in args.methods:
                profile(m, seq_len, args.tokens, args.steps, args.rows, args.compile)
        else:
            ratios(args.methods, seq_len, args.tokens, args.repeats, args.steps, args)


if __name__ == "__main__":
    main()
