"""The tile table chosen by timing on a GPU (``python -m posbench.triton_kernels.tune``), one file per
architecture, ``tuned/sm<NN>.json``, committed and read by default: a run does no autotuning unless
``POSBENCH_AUTOTUNE=1``. A kernel, dtype, head dim and bias the table lacks keeps the offline
choice (``tile_configs.configs_for``). Torch- and triton-free: the tests read tables on any machine.

A table: ``{"version": 1, "arch": 90, "device": ..., "versions": {...}, "configs": {key: [BLOCK_M,
BLOCK_N, warps, stages]}, "timings_ms": {key: {config: ms}}}``, key ``<kernel>/<dtype>/d<head
dim>/<bias>`` with kernel fwd, dkdv or dq (docs/kernels.md, "Tiles").
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

TUNED_DIR = Path(__file__).resolve().parent / "tuned"
TABLE_VERSION = 1
KERNELS = ("fwd", "dkdv", "dq")
Blocks = tuple[int, int, int, int]  # (BLOCK_M, BLOCK_N, num_warps, num_stages)


def autotune_requested() -> bool:
    """``POSBENCH_AUTOTUNE=1``: let ``triton.autotune`` time the offered configs at the first call."""
    return os.environ.get("POSBENCH_AUTOTUNE", "") == "1"


def table_key(kernel: str, dtype: str, head_dim: int, bias: str) -> str:
    """``fwd/bfloat16/d64/alibi``: dtype without ``torch.``."""
    return f"{kernel}/{dtype.removeprefix('torch.')}/d{head_dim}/{bias}"


def table_path(arch: int, folder: Path | str = TUNED_DIR) -> Path:
    return Path(folder) / f"sm{arch}.json"


def _blocks(key: str, value, path: Path) -> Blocks:
    if not (isinstance(value, list) and len(value) == 4 and all(isinstance(x, int) and x > 0 for x in value)):
        raise ValueError(f"{path}: configs[{key!r}] must be [BLOCK_M, BLOCK_N, warps, stages] (positive integers), got {value!r}")
    return tuple(value)


@functools.cache
def load_table(arch: int, folder: str = str(TUNED_DIR)) -> dict[str, Blocks]:
    """The tuned configs for ``arch`` (80, 86, 89, 90, ...), ``{}`` when no table was measured there."""
    path = table_path(arch, folder)
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or data.get("version") != TABLE_VERSION or not isinstance(data.get("configs"), dict):
        raise ValueError(f"{path}: not a tuned-tile table (want a mapping with version {TABLE_VERSION} and configs)")
    if data.get("arch") != arch:
        raise ValueError(f"{path}: measured on sm{data.get('arch')}, not sm{arch}")
    return {key: _blocks(key, value, path) for key, value in data["configs"].items()}


def tuned_blocks(arch: int, kernel: str, dtype: str, head_dim: int, bias: str) -> Blocks | None:
    """The measured best blocks of one kernel, dtype, head dim and bias on ``arch`` (the table in
    ``TUNED_DIR``), or None."""
    return load_table(arch, str(TUNED_DIR)).get(table_key(kernel, dtype, head_dim, bias))
