"""Tile configurations of the fused kernels: the candidates each target fits without spills (the
offline choice), the blocks a launch takes (interpreter, tuned table, offline), and the
``triton.autotune`` decorator used under ``POSBENCH_AUTOTUNE=1``. Tiles and their measurements:
docs/kernels.md, "Tiles".
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from posbench.triton_kernels import tuned_table
from posbench.triton_kernels.checks import INTERPRETED


class TileConfig:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) and, per target, the largest head dim it fits
    without spills, as ``sm80=(half, fp32)``; sm86 covers sm_86/sm_89; 0 = not offered."""

    def __init__(self, block_m, block_n, warps, stages, sm80, sm86, sm90):
        self.block_m, self.block_n, self.warps, self.stages = block_m, block_n, warps, stages
        self.fits = {}
        for arch, (half, fp32) in ((80, sm80), (86, sm86), (90, sm90)):
            self.fits[(arch, "half")], self.fits[(arch, "fp32")] = half, fp32

    def allows(self, arch: int, dtype_class: str, head_dim: int) -> bool:
        return head_dim <= self.fits.get((arch, dtype_class), 0)

    def blocks(self) -> tuple[int, int, int, int]:
        return self.block_m, self.block_n, self.warps, self.stages

    def triton(self) -> triton.Config:
        return triton.Config({"BLOCK_M": self.block_m, "BLOCK_N": self.block_n}, num_warps=self.warps, num_stages=self.stages)

    def __repr__(self) -> str:
        return f"m{self.block_m}n{self.block_n}w{self.warps}s{self.stages}"


# Candidates per kernel, from the compile report (posbench/triton_kernels/compile_report.py; T5, the
# bias that needs the most registers): a config is offered only where it neither spills registers
# nor exceeds shared memory. Measured with ptxas (registers / spill bytes / shared KB, T5):
#   fwd  m128n64w8s3 half d128 sm_90: 255 / 284 / 128;  half d64 sm_90: 255 / 56 / 96
#   fwd  m64n64w4s3  half d128 sm_90: 255 / 272 / 80;   half d64 sm_90: 255 / 76 / 56
#   fwd  m64n64w4s3  fp32 d128 sm_80: 32 / 84728 / 208
#   fwd  m64n32w4s2  half d128 sm_90: 240 / 0 / 40;     half d128 sm_80: 255 / 8 / 36
#   fwd  m64n32w4s2  half d64  sm_80: 255 / 0 / 20
#   bwd  m64n64w8s2  half d128 sm_90: dQ 255 / 172, dK/dV 255 / 760 (ALiBi dQ: 253 / 0)
#   bwd  m32n64w4s2  half d64  sm_90: dQ 255 / 8; dK/dV 250 / 0
#   bwd  m32n32w4s2  half d128 sm_90: dQ 191 / 0 / 32, dK/dV 240 / 0 / 38
#   bwd  m32n32w4s2  half d128 sm_80: dQ 255 / 0 / 32, dK/dV 255 / 0 / 38
#   bwd  m32n32w4s2  fp32 d128 sm_80: dQ 168 / 4836 / 68, dK/dV 32 / 53676 / 52
# Entries below that were not measured are the smaller head dims of a measured config, or d <= 32;
# the slow compile-report test checks every one. Where nothing is offered (float32 at head dim
# >= 64, half at d128 on sm_80/86 for the forward) the last config runs: within shared memory,
# with some spills.
CONFIGS = {
    "fwd": [
        # sm_80/86 half: the T5 forward spills 8 bytes at head dim 32 (255 registers) since log2(e)
        # was folded into the bias reads (issue 54); the tuner may still time it there
        TileConfig(128, 64, 8, 3, sm80=(0, 0), sm86=(0, 0), sm90=(32, 0)),
        # sm_90 half: the T5 forward spills 8 bytes at head dim 32 (255 registers)
        TileConfig(64, 64, 4, 3, sm80=(32, 0), sm86=(32, 0), sm90=(0, 0)),
        # sm_90 fp32: the T5 forward spills 72 bytes at head dim 32
        TileConfig(64, 32, 4, 2, sm80=(64, 32), sm86=(64, 32), sm90=(128, 0)),
    ],
    "bwd": [
        TileConfig(64, 64, 8, 2, sm80=(32, 0), sm86=(32, 0), sm90=(32, 0)),
        # sm_80/86 half: the ALiBi dQ kernel spills 8 bytes at head dim 32 (168 registers)
        TileConfig(32, 64, 4, 2, sm80=(0, 0), sm86=(0, 0), sm90=(32, 0)),
        # fp32: dK/dV spills 1.4-2.2 KB at head dim 32 on every target (fp32 dots are FMA loops);
        # float32 backward therefore runs this config as the spilling fallback (configs_for)
        TileConfig(32, 32, 4, 2, sm80=(128, 0), sm86=(128, 0), sm90=(128, 0)),
    ],
}
INTERPRETER_CONFIG = TileConfig(32, 32, 1, 1, (0, 0), (0, 0), (0, 0))


def dtype_class(dtype) -> str:
    return "fp32" if dtype in (torch.float32, tl.float32) else "half"


def configs_for(kernel: str, arch: int, dtype: torch.dtype, head_dim: int) -> list[TileConfig]:
    """The configs of ``kernel`` ("fwd"/"bwd") that fit ``arch``; else the last, which spills."""
    arch = 90 if arch >= 90 else 86 if arch > 80 else 80  # sm_86/sm_89: sm_80's code, 99 KB of shared memory
    chosen = [c for c in CONFIGS[kernel] if c.allows(arch, dtype_class(dtype), head_dim)]
    return chosen or [CONFIGS[kernel][-1]]


def device_arch(device) -> int:
    """Compute capability as one number: 90 for sm_90."""
    major, minor = torch.cuda.get_device_capability(device)
    return major * 10 + minor


def choose_blocks(kernel: str, arch: int | None, dtype: torch.dtype, head_dim: int, bias: str) -> tuple | None:
    """The blocks (BLOCK_M, BLOCK_N, warps, stages) ``kernel`` ("fwd", "dkdv", "dq") launches with:
    the interpreter's one config (``arch`` None); None under ``POSBENCH_AUTOTUNE=1`` (autotune over
    the offered configs); the table timed on ``arch`` (``tuned_table``); else the first offered config."""
    if arch is None:
        return INTERPRETER_CONFIG.blocks()
    if tuned_table.autotune_requested():
        return None
    tuned = tuned_table.tuned_blocks(arch, kernel, str(dtype), head_dim, bias)
    if tuned is not None:
        return tuned
    return configs_for("fwd" if kernel == "fwd" else "bwd", arch, dtype, head_dim)[0].blocks()


def tiles_used(arch: int | None, dtype: torch.dtype, head_dim: int, bias: str) -> str:
    """What ``choose_blocks`` gives the three kernels, and from where: a row records it."""
    parts = []
    for kernel in tuned_table.KERNELS:
        blocks = choose_blocks(kernel, arch, dtype, head_dim, bias)
        if blocks is None:
            parts.append(f"{kernel} autotuned")
            continue
        tuned = arch is not None and tuned_table.tuned_blocks(arch, kernel, str(dtype), head_dim, bias) is not None
        source = "interpreter" if arch is None else f"tuned sm{arch}" if tuned else "offline"
        parts.append(f"{kernel} m{blocks[0]}n{blocks[1]}w{blocks[2]}s{blocks[3]} ({source})")
    return ", ".join(parts)


def _prune(kernel: str):
    def prune(configs, named_args, **kwargs):
        if INTERPRETED:
            return configs
        major, minor = torch.cuda.get_device_capability()
        wanted = {repr(c) for c in configs_for(kernel, major * 10 + minor, named_args["Q"].dtype, kwargs["HEAD_DIM"])}
        kept = [c for c in configs if _repr(c) in wanted]
        return kept or configs[-1:]

    return prune


def _repr(config: triton.Config) -> str:
    kw = config.kwargs
    return f"m{kw['BLOCK_M']}n{kw['BLOCK_N']}w{config.num_warps}s{config.num_stages}"


def autotune(kernel: str, reset=None):
    """``triton.autotune`` over ``kernel``'s ("fwd"/"bwd") configs, pruned to those that fit the GPU;
    the interpreter's one config under TRITON_INTERPRET=1."""
    configs = [INTERPRETER_CONFIG.triton()] if INTERPRETED else [c.triton() for c in CONFIGS[kernel]]
    return triton.autotune(
        configs=configs,
        key=["LEN_KEY", "HEAD_DIM", "BIAS"],
        prune_configs_by={"early_config_prune": _prune(kernel)},
        reset_to_zero=reset,
    )


def length_key(seq_k: int) -> int:
    """The key length rounded up to a power of two: one tuning per octave of lengths."""
    return 1 << max(seq_k - 1, 0).bit_length()
