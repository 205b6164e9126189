"""Interleaved A/B timing of the position methods' training step (not a test; no assertions).

The efficiency suite runs each method in its own process, one after the other, so on a shared or
throttling machine a ratio between two methods mixes in whatever else the machine was doing at
the time. This script builds every model in ONE process and alternates between them many times:
rep 1 times a window of steps of each method (in a rotated order), rep 2 again, and so on. Noise
then lands on all methods alike, and the medians over reps compare like with like.

What one step is matches ``posbench/tasks/efficiency.py`` (cpu profile): the ``tiny`` preset,
float32, forward, loss, backward, AdamW step, ``zero_grad(set_to_none=True)``, ``tokens`` tokens
per step (batch = tokens // L), one thread unless ``--threads``.

    python benchmarks/methods_ab.py                              # all built-in methods, L 64/128/256
    python benchmarks/methods_ab.py --lengths 256 --reps 40 --methods sinusoidal,t5_bias
    python benchmarks/methods_ab.py --eval                       # no-grad forwards instead
    python benchmarks/methods_ab.py --clock cpu                  # CPU time: steadier on a shared machine

To compare an old and a new implementation of one method, copy the old file into a folder,
give its class another ``name`` and pass the folder:

    mkdir -p /tmp/old && git show HEAD~1:methods/t5_bias.py \
        | sed 's/name = "t5_bias"/name = "t5_bias_old"/' > /tmp/old/t5_bias_old.py
    python benchmarks/methods_ab.py --methods-dir /tmp/old --methods t5_bias,t5_bias_old

(An old file that imports a helper from ``posbench.method`` gets today's helper; copy the old
helper into the file when that helper is what changed.)
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from posbench import registry  # noqa: E402
from posbench.model import TransformerLM, lm_loss, model_config  # noqa: E402

DEFAULT_METHODS = "sinusoidal,rotary,t5_bias,alibi"


class Runner:
    """One method's model, optimizer and two fixed batches at one length."""

    def __init__(self, method: str, length: int, tokens: int, preset: str, seed: int, train: bool):
        torch.manual_seed(seed)
        self.model = TransformerLM(model_config(preset, method))
        g = torch.Generator().manual_seed(seed)
        batch = max(1, tokens // length)
        self.tokens = batch * length
        vocab = self.model.cfg.vocab_size
        self.batches = [torch.randint(0, vocab, (batch, length + 1), generator=g) for _ in range(2)]
        self.train = train
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4) if train else None
        self.model.train(train)
        self.n = 0

    def step(self) -> None:
        x = self.batches[self.n % 2]
        self.n += 1
        if not self.train:
            with torch.no_grad():
                self.model(x[:, :-1])
            return
        loss = lm_loss(self.model(x[:, :-1]), x[:, 1:])
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def window(self, steps: int, clock=time.perf_counter) -> float:
        """Seconds per step over ``steps`` steps."""
        start = clock()
        for _ in range(steps):
            self.step()
        return (clock() - start) / steps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default=DEFAULT_METHODS, help=f"comma-separated (default {DEFAULT_METHODS})")
    ap.add_argument("--baseline", default="sinusoidal", help="ratios are to this method (default sinusoidal)")
    ap.add_argument("--lengths", default="64,128,256", help="comma-separated sequence lengths")
    ap.add_argument("--tokens", type=int, default=1024, help="tokens per step (cpu profile: 1024)")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--reps", type=int, default=20, help="interleaved rounds (default 20)")
    ap.add_argument("--steps", type=int, default=3, help="steps per timed window (default 3)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per model first")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall: perf_counter, as the suite; cpu: this process's CPU time, which leaves out "
                    "the time other processes hold the core (with --threads 1 only)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval", action="store_true", help="time no-grad forwards instead of training steps")
    ap.add_argument("--methods-dir", action="append", default=[], help="extra folder of method files")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    for folder in args.methods_dir:
        registry.add_methods_dir(folder)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if args.baseline not in methods:
        methods.insert(0, args.baseline)
    lengths = [int(x) for x in args.lengths.split(",")]

    train = not args.eval
    runners = {(m, L): Runner(m, L, args.tokens, args.preset, args.seed, train) for L in lengths for m in methods}
    for r in runners.values():
        for _ in range(args.warmup):
            r.step()

    clock = time.perf_counter if args.clock == "wall" else time.process_time
    times: dict[tuple[str, int], list[float]] = {key: [] for key in runners}
    keys = list(runners)
    for rep in range(args.reps):
        shift = rep % len(keys)  # rotate the order so no method always follows the same one
        for key in keys[shift:] + keys[:shift]:
            times[key].append(runners[key].window(args.steps, clock))

    what = "eval forward" if args.eval else "train step"
    print(f"{what}, preset {args.preset}, {args.tokens} tokens/step, threads {args.threads}, "
          f"{args.reps} interleaved reps x {args.steps} steps, {args.clock} clock; medians "
          "(ratio: median over reps of baseline time / method time)")
    header = f"{'method':<14}" + "".join(f"{'L=' + str(L):>28}" for L in lengths)
    print(header)
    for m in methods:
        cells = []
        for L in lengths:
            t = statistics.median(times[(m, L)])
            base = times[(args.baseline, L)]
            # per-rep ratio (same rep: same machine conditions), then the median of those
            ratio = statistics.median(b / x for b, x in zip(base, times[(m, L)]))
            wps = runners[(m, L)].tokens / t
            cells.append(f"{t * 1e3:8.2f} ms {wps / 1e3:6.1f}k {ratio:5.2f}x")
        print(f"{m:<14}" + "".join(f"{c:>28}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
