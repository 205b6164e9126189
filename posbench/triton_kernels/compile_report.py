"""Compile the fused attention kernels for GPU targets without a GPU and report their resources.

For every kernel, tile config (``tile_configs.CONFIGS``), target and dtype class, ptxas's log
gives registers and spill bytes and Triton's metadata the shared memory; a config *fits* a target
when it spills nothing and stays within shared memory. Needs triton's bundled ptxas only.

    TRITON_INTERPRET=0 python -m posbench.triton_kernels.compile_report            # check the claims
    TRITON_INTERPRET=0 python -m posbench.triton_kernels.compile_report --sweep    # find them (slow)
    TRITON_INTERPRET=0 python -m posbench.triton_kernels.compile_report --variants # FoX's key bias, GQA
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
from concurrent.futures import ProcessPoolExecutor

# Bytes of shared memory one block may use (opt-in maximum).
SHARED_LIMIT = {80: 166912, 86: 101376, 90: 232448}
ARCHS = (80, 90)
HEAD_DIMS = (128, 64, 32)
KERNELS = {"fwd": ("fwd_kernel", "fwd"), "dkdv": ("bwd_dkdv_kernel", "bwd"), "dq": ("bwd_dq_kernel", "bwd")}
POINTERS = {"Q", "K", "V", "O", "DO", "DK", "DV", "DQ"}
FLOAT_POINTERS = {"Bias", "KB", "LSE", "Delta", "DTab", "DKB"}
# What --variants compiles at every claim, beside the claims' own ALiBi and T5: FoX's per-key bias
# (no position bias) and dK/dV with 2 query heads per key/value head. Reported, not claimed.
VARIANTS = {"fox": dict(KEY_BIAS=True), "gqa2": dict(GROUP=2), "fox+gqa2": dict(KEY_BIAS=True, GROUP=2)}


def compile_one(job: tuple) -> dict:
    """Compile one (kernel, config index, arch, dtype class, head dim, bias) and measure it."""
    os.environ["TRITON_INTERPRET"] = "0"
    import triton
    from triton.backends.compiler import GPUTarget

    from posbench.triton_kernels import bias_spec, kernels, tile_configs

    kernel, index, arch, dclass, head_dim, bias, *target = job
    variant = target.pop() if target and isinstance(target[-1], str) else ""
    name, kind = KERNELS[kernel]
    fn = getattr(kernels, name)
    cfg = tile_configs.CONFIGS[kind][index]
    ptr = "fp32" if dclass == "fp32" else "bf16"
    const = dict(
        HEAD_DIM=head_dim,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        BIAS=bias,
        BIAS_ROUND=bias == bias_spec.ALIBI,
        SCALED=True,
        NUM_BUCKETS=32,
        MAX_DISTANCE=128,
        DOT_PRECISION="ieee" if dclass == "fp32" else "tf32",
        KEY_BIAS=False,
        **({"GROUP": 1} if name == "bwd_dkdv_kernel" else {}),
    )
    const.update({k: v for k, v in VARIANTS.get(variant, {}).items() if k in fn.arg_names})
    sig = {
        a: "constexpr"
        if a in const
        else f"*{ptr}"
        if a in POINTERS
        else "*fp32"
        if a in FLOAT_POINTERS
        else "fp32"
        if a.endswith("scale")
        else "i32"
        for a in fn.arg_names
    }
    log = io.StringIO()
    triton.knobs.nvidia.dump_ptxas_log = True  # make_cubin prints ptxas -v's log ...
    triton.knobs.compilation.always_compile = True  # ... only when it runs: never take the cache
    with contextlib.redirect_stdout(log):
        compiled = triton.compile(
            triton.compiler.ASTSource(fn, sig, const),
            target=GPUTarget("cuda", arch, 32),
            options=dict(num_warps=cfg.warps, num_stages=cfg.stages),
        )
    text = log.getvalue()
    regs = re.search(r"Used (\d+) registers", text)
    spills = re.search(r"(\d+) bytes spill stores", text)
    return dict(
        kernel=kernel,
        config=repr(cfg),
        arch=arch,
        target=target[0] if target else arch,
        dtype=dclass,
        head_dim=head_dim,
        bias=bias_spec.BIAS_NAMES[bias] + (f" {variant}" if variant else ""),
        registers=int(regs.group(1)) if regs else -1,
        spill_bytes=int(spills.group(1)) if spills else -1,
        shared=compiled.metadata.shared,
    )


def fits(row: dict, target: int | None = None) -> bool:
    """No spills and shared memory within ``target``'s limit (default: the row's claimed target)."""
    limit = SHARED_LIMIT[target or row["target"]]
    return row["spill_bytes"] == 0 and row["registers"] > 0 and row["shared"] <= limit


def claims() -> list[tuple]:
    """(kernel, config index, compile arch, dtype class, head dim, bias, claimed target) for every
    claim in CONFIGS."""
    from posbench.triton_kernels import bias_spec, tile_configs

    jobs = []
    for kernel, (_, kind) in KERNELS.items():
        for index, cfg in enumerate(tile_configs.CONFIGS[kind]):
            for target in (80, 86, 90):
                for dclass in ("fp32", "half"):
                    head_dim = cfg.fits.get((target, dclass), 0)
                    if head_dim:  # sm_86's claim: sm_80's code against the 99 KB limit
                        jobs += [
                            (kernel, index, min(target, 90) if target != 86 else 80, dclass, head_dim, b, target)
                            for b in (bias_spec.ALIBI, bias_spec.T5)
                        ]
    return jobs


def table(rows: list[dict]) -> str:
    head = "| kernel | config | compiled for | dtype | head dim | bias | registers | spill bytes | shared KB | fits |"
    lines = [head, "|" + "---|" * 10]
    for r in sorted(rows, key=lambda r: (r["kernel"], r["config"], r["target"], r["dtype"], r["bias"])):
        where = [f"sm_{a}" for a in ((80, 86) if r["arch"] == 80 else (90,)) if fits(r, a)]
        lines.append(
            f"| {r['kernel']} | {r['config']} | sm_{r['arch']} | {r['dtype']} | {r['head_dim']} | {r['bias']} "
            f"| {r['registers']} | {r['spill_bytes']} | {r['shared'] / 1024:.0f} | {', '.join(where) or 'no'} |"
        )
    return "\n".join(lines)


def sweep(jobs: int) -> list[dict]:
    """Largest head dim each (kernel, config, arch, dtype class) fits with the T5 bias (the larger
    of the two biases in registers; the check mode compiles ALiBi too)."""
    from posbench.triton_kernels import bias_spec, tile_configs

    todo = {
        (k, i, a, d): list(HEAD_DIMS)
        for k, (_, kind) in KERNELS.items()
        for i in range(len(tile_configs.CONFIGS[kind]))
        for a in ARCHS
        for d in ("fp32", "half")
    }
    rows = []
    with ProcessPoolExecutor(jobs) as pool:
        while todo:
            batch = [(*key, dims[0], bias_spec.T5) for key, dims in todo.items()]
            results = list(pool.map(compile_one, batch))
            rows += results
            for job, row in zip(batch, results):
                key = job[:4]
                todo[key].pop(0)
                if fits(row) or not todo[key]:
                    del todo[key]
            print(f"compiled {len(rows)}", file=sys.stderr, flush=True)
    return rows


def variants(jobs: int) -> list[dict]:
    """Every claimed (kernel, config, arch, dtype class, head dim) compiled with each of VARIANTS:
    FoX's key bias without a position bias, GQA (dK/dV only: the other kernels take the group as
    a number) with ALiBi and T5."""
    from posbench.triton_kernels import bias_spec

    todo = []
    for kernel, index, arch, dclass, head_dim, _, _ in claims():
        for variant in VARIANTS:
            gqa = "gqa2" in variant
            if gqa and kernel != "dkdv":
                continue
            for bias in (bias_spec.ALIBI, bias_spec.T5) if variant == "gqa2" else (bias_spec.NO_BIAS,):
                todo.append((kernel, index, arch, dclass, head_dim, bias, variant))
    todo = list(dict.fromkeys(todo))
    with ProcessPoolExecutor(jobs) as pool:
        rows = list(pool.map(compile_one, todo))
    return [dict(r, target=r["arch"]) for r in rows]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true", help="find the largest head dim each config fits")
    parser.add_argument("--variants", action="store_true", help="compile every claim with FoX's key bias and GQA (report only)")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2)))
    args = parser.parse_args(argv)
    if args.sweep:
        rows = sweep(args.jobs)
    elif args.variants:
        rows = variants(args.jobs)
    else:
        wanted = claims()
        compiles = list(dict.fromkeys(job[:6] for job in wanted))  # sm_86 claims share sm_80's compiles
        with ProcessPoolExecutor(args.jobs) as pool:
            measured = dict(zip(compiles, pool.map(compile_one, compiles)))
        rows = [dict(measured[job[:6]], target=job[6]) for job in wanted]
    print(table(rows))
    if args.sweep or args.variants:
        return 0
    bad = [r for r in rows if not fits(r)]
    for r in bad:
        print(f"DOES NOT FIT: {r}")
    print(f"{len(rows) - len(bad)} of {len(rows)} claims fit")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
