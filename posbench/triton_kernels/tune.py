"""``python -m posbench.triton_kernels.tune``: time the candidate tiles of each fused kernel on this GPU
and write the table a run then reads by default (``tuned/sm<NN>.json``, see ``tuned_table``).

Per dtype, head dim and bias, the forward's candidates are timed on the forward alone; then each
dK/dV candidate in a whole backward with dQ at its default, then each dQ candidate with the best
dK/dV: the backward kernels get their own tiles (FlashAttention-2's wide key blocks for dK/dV,
tall query blocks for dQ). A candidate that fails to compile or run (shared memory) is skipped
and named. Work is ordered by weight (bf16 first, the biases the suites time first) and stops
starting new points when ``--budget-s`` is spent; what was not reached keeps the offline choice.

    python -m posbench.triton_kernels.tune [--budget-s 170] [--seq-len 4096] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from posbench.triton_kernels import tuned_table

# Candidates per kernel, (BLOCK_M, BLOCK_N, warps, stages): large query tiles for the forward and
# dQ (Triton's tutorial and FlashAttention-2 on sm_80/sm_90 run 128-row tiles), wide key blocks for
# dK/dV; the offline no-spill choices (tile_configs.CONFIGS) are among them. Spills are measured
# here by their time, not forbidden.
CANDIDATES = {
    "fwd": [(128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), (128, 32, 4, 3), (64, 64, 4, 3), (64, 32, 4, 2)],
    "dkdv": [(32, 128, 8, 3), (64, 128, 8, 3), (32, 64, 4, 3), (64, 64, 8, 2), (32, 32, 4, 2)],
    "dq": [(128, 32, 8, 3), (128, 64, 8, 3), (64, 64, 4, 3), (64, 32, 4, 2), (32, 32, 4, 2)],
}
DTYPES = ("bfloat16", "float16")
HEAD_DIMS = (64, 128)
BIASES = ("alibi", "none", "t5", "row-learned", "row", "none+key")  # as BiasSpec.tuning_name names them

Point = tuple[str, int, str]  # (dtype, head_dim, bias)
# time_ms(point, fwd, dkdv, dq, backward) -> ms of the forward (backward False) or the backward
TimeFn = Callable[[Point, tuple, tuple, tuple, bool], float]


def points(dtypes=DTYPES, head_dims=HEAD_DIMS, biases=BIASES) -> list[Point]:
    """Every (dtype, head dim, bias), most wanted first: dtype, then bias, then head dim."""
    return [(dt, d, b) for dt in dtypes for b in biases for d in head_dims]


def _best(timings: dict[tuple, float]) -> tuple:
    return min(timings, key=timings.get)


def tune(
    todo: list[Point],
    time_ms: TimeFn,
    default: Callable[[str, Point], tuple],
    budget_s: float,
    clock: Callable[[], float] = time.monotonic,
    candidates: dict[str, list[tuple]] = CANDIDATES,
    failures: tuple[type[Exception], ...] = (RuntimeError,),
) -> tuple[dict[str, list[int]], dict[str, dict[str, float]], list[str]]:
    """Time the candidates of each point of ``todo`` until ``budget_s`` is spent; returns the
    chosen configs and every timing by table key, and the notes (failures, points not reached).
    ``default(kernel, point)`` is the offline choice, the partner of a backward kernel under test;
    a candidate raising one of ``failures`` (a compile or launch failure) is noted and skipped."""
    start = clock()
    configs: dict[str, list[int]] = {}
    timings: dict[str, dict[str, float]] = {}
    notes: list[str] = []
    for n, point in enumerate(todo):
        if clock() - start > budget_s:
            notes.append(f"budget of {budget_s:.0f} s spent: {len(todo) - n} points not tuned (offline choice kept)")
            break
        dtype, head_dim, bias = point
        chosen: dict[str, tuple] = {}
        for kernel in tuned_table.KERNELS:
            measured: dict[tuple, float] = {}
            for cand in candidates[kernel]:
                fwd = cand if kernel == "fwd" else chosen["fwd"]
                dkdv = cand if kernel == "dkdv" else chosen.get("dkdv", default("dkdv", point))
                dq = cand if kernel == "dq" else default("dq", point)
                try:
                    measured[cand] = time_ms(point, fwd, dkdv, dq, kernel != "fwd")
                except failures as exc:
                    notes.append(
                        f"{tuned_table.table_key(kernel, dtype, head_dim, bias)} {cand}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                    )
            if not measured:
                chosen[kernel] = default(kernel, point)
                continue
            chosen[kernel] = _best(measured)
            key = tuned_table.table_key(kernel, dtype, head_dim, bias)
            configs[key] = list(chosen[kernel])
            timings[key] = {"m{}n{}w{}s{}".format(*c): round(ms, 4) for c, ms in measured.items()}
    return configs, timings, notes


def make_timer(
    device, arch: int, seq_len: int, batch: int, heads: int, bench: Callable[[Callable[[], None]], float]
) -> tuple[TimeFn, Callable[[str, Point], tuple]]:
    """The timer of the points on ``device`` (inputs of each point made once; ``bench(fn)`` -> ms:
    ``triton.testing.do_bench`` on a GPU) and the offline choice on ``arch``."""
    import torch

    from posbench.core.alibi_math import slopes_tensor
    from posbench.triton_kernels import bias_spec
    from posbench.triton_kernels.autograd import fused_attention
    from posbench.triton_kernels.tile_configs import configs_for

    made: dict[Point, tuple] = {}

    def inputs(point: Point):
        if point not in made:
            made.clear()  # one point's tensors alive at a time
            dtype, d, bias = point
            q, k, v = (
                torch.randn(batch, heads, seq_len, d, device=device, dtype=getattr(torch, dtype), requires_grad=True)
                for _ in range(3)
            )
            kind = bias.removesuffix("+key")
            tensor = {
                "none": lambda: slopes_tensor(heads, device=device),
                "alibi": lambda: slopes_tensor(heads, device=device),
                "t5": lambda: torch.randn(32, heads, device=device, dtype=q.dtype, requires_grad=True),
                "row": lambda: torch.randn(heads, seq_len, device=device),
                "row-learned": lambda: torch.randn(heads, seq_len, device=device, requires_grad=True),
            }[kind]()
            key_bias = -torch.rand(batch, heads, seq_len, device=device).cumsum(-1) if bias.endswith("+key") else None
            names = {
                "none": bias_spec.NO_BIAS,
                "alibi": bias_spec.ALIBI,
                "t5": bias_spec.T5,
                "row": bias_spec.ROW,
                "row-learned": bias_spec.ROW_LEARNED,
            }
            spec = bias_spec.BiasSpec(names[kind], tensor, key_bias=key_bias)
            made[point] = (q, k, v, spec, torch.randn_like(q))
        return made[point]

    def time_ms(point, fwd, dkdv, dq, backward):
        q, k, v, spec, grad = inputs(point)
        if not backward:
            with torch.no_grad():
                return bench(lambda: fused_attention(q, k, v, spec, fwd, dkdv, dq))
        out = fused_attention(q, k, v, spec, fwd, dkdv, dq)

        def step():
            for t in (q, k, v):
                t.grad = None
            out.backward(grad, retain_graph=True)

        return bench(step)

    def default(kernel: str, point: Point) -> tuple:
        dtype, d, _ = point
        return configs_for("fwd" if kernel == "fwd" else "bwd", arch, getattr(torch, dtype), d)[0].blocks()

    return time_ms, default


def write_table(out: Path, arch: int, device: str, configs, timings, notes, settings: dict, versions: dict) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = tuned_table.table_path(arch, out)
    table = {
        "version": tuned_table.TABLE_VERSION,
        "arch": arch,
        "device": device,
        "versions": versions,
        "settings": settings,
        "configs": configs,
        "timings_ms": timings,
        "notes": notes,
    }
    path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="time the fused kernels' candidate tiles on this GPU; write tuned/sm<NN>.json")
    parser.add_argument("--out", type=Path, default=tuned_table.TUNED_DIR)
    parser.add_argument("--budget-s", type=float, default=170.0, help="stop starting new points after this many seconds")
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--head-dims", default=",".join(map(str, HEAD_DIMS)))
    parser.add_argument("--biases", default=",".join(BIASES), help=f"a comma list of: {', '.join(BIASES)}")
    args = parser.parse_args(argv)
    biases = args.biases.split(",")
    if not set(biases) <= set(BIASES):
        parser.error(f"unknown bias(es) {sorted(set(biases) - set(BIASES))}; allowed: {', '.join(BIASES)}")
    import torch

    if not torch.cuda.is_available() or tuned_table.autotune_requested():
        print("tune needs a CUDA GPU, with POSBENCH_AUTOTUNE unset", file=sys.stderr)
        return 2
    import triton

    from posbench.triton_kernels.tile_configs import device_arch

    device = torch.device("cuda")
    arch = device_arch(device)
    time_ms, default = make_timer(
        device, arch, args.seq_len, args.batch, args.heads, lambda fn: triton.testing.do_bench(fn, warmup=5, rep=30)
    )
    todo = points(args.dtypes.split(","), [int(d) for d in args.head_dims.split(",")], biases)
    configs, timings, notes = tune(todo, time_ms, default, args.budget_s, failures=(RuntimeError, triton.errors.TritonError))
    settings = {"seq_len": args.seq_len, "batch": args.batch, "heads": args.heads, "causal": True}
    versions = {"torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda}
    path = write_table(args.out, arch, torch.cuda.get_device_name(device), configs, timings, notes, settings, versions)
    print(*notes, f"{len(configs)} configs -> {path}", sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
