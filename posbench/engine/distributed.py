"""Data parallelism through ``torch.distributed``, kept in one place so tasks stay readable.

``torchrun`` starts the ranks and sets ``RANK``, ``WORLD_SIZE``, ...; ``init_from_env`` joins that
group (nccl on CUDA, gloo on CPU), and without those variables every helper here is the
single-process identity. What the batch split, the evaluation shards and the global rate
guarantee: docs/distributed.md.
"""

from __future__ import annotations

import atexit
import gc
import os
from collections.abc import Sequence
from datetime import timedelta

import numpy as np


def env_world_size() -> int:
    """The world size torchrun announced (1 when not launched by torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def _dist():
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def is_distributed() -> bool:
    d = _dist()
    return d is not None and d.get_world_size() > 1


def rank() -> int:
    d = _dist()
    return d.get_rank() if d is not None else 0


def world_size() -> int:
    d = _dist()
    return d.get_world_size() if d is not None else 1


def is_main() -> bool:
    return rank() == 0


def init_from_env(device: str, timeout_s: float | None = None) -> bool:
    """Join torchrun's process group; True when this call created it (then call ``teardown``).
    ``timeout_s`` bounds every collective, so a rank whose peer died raises instead of waiting."""
    import torch
    import torch.distributed as dist

    if env_world_size() <= 1 or dist.is_initialized():
        return False
    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
        # One GPU per rank on each node; torch.device("cuda") then means this rank's GPU.
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    kwargs = {"timeout": timedelta(seconds=timeout_s)} if timeout_s else {}
    dist.init_process_group(backend=backend, **kwargs)
    # A rank that leaves without ``teardown`` (a case failed on it alone, an exception) must still
    # destroy the group before the interpreter shuts down: see ``_leave_at_exit``.
    atexit.unregister(_leave_at_exit)  # once, however often a group is joined
    atexit.register(_leave_at_exit)
    return True


def teardown(sync: bool = True) -> None:
    """Leave the process group; ``sync`` first waits for every rank (a group destroyed under a
    talking peer aborts it under gloo): pass False after a failure, when peers may never arrive."""
    d = _dist()
    if d is not None:
        if sync:
            d.barrier()
        # Whatever of the finished work still holds the group or its Work objects through a
        # reference cycle (a failed collective's exception and traceback, for one) goes now,
        # while the interpreter is whole, not during its shutdown (see ``_leave_at_exit``).
        gc.collect()
        d.destroy_process_group()


def _leave_at_exit() -> None:
    """atexit: destroy a process group that is still there (no barrier: peers may be gone)."""
    # gloo's worker threads hold Python-owned tensors; left to interpreter shutdown they cannot
    # take the GIL and the process dies with SIGABRT ("terminate called without an active exception").
    try:
        teardown(sync=False)
    except Exception:  # exiting anyway; a group that cannot be destroyed is not worth a traceback
        pass


def barrier() -> None:
    if is_distributed():
        _dist().barrier()


def _reduce(values, op: str, dtype) -> np.ndarray:
    """all_reduce a vector (list or array) on the CPU path of the backend; numpy back."""
    import torch

    array = np.asarray(values, dtype=dtype)
    if not is_distributed():
        return array
    dist = _dist()
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"  # nccl reduces CUDA tensors only
    t = torch.as_tensor(array).to(device)
    dist.all_reduce(t, op={"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}[op])
    return t.cpu().numpy()


def all_reduce_sum(values) -> np.ndarray:
    """Element-wise sum over ranks in float64 (exact enough that the order does not matter)."""
    return _reduce(values, "sum", np.float64)


def all_reduce_max(values) -> np.ndarray:
    return _reduce(values, "max", np.float64)


def all_reduce_mean(values) -> np.ndarray:
    return all_reduce_sum(values) / world_size()


def global_rate(tokens: Sequence[float], seconds: Sequence[float]) -> float:
    """Words/s of one window run by every rank at once: all tokens over the slowest rank's time
    (the window ends when its last rank does); pure, for tests."""
    return float(sum(tokens)) / max(seconds)


def global_rates(tokens_per_window: float, seconds: Sequence[float]) -> list[float]:
    """Per window, ``global_rate`` over the ranks: tokens summed, window seconds reduced by MAX."""
    total = float(all_reduce_sum([tokens_per_window])[0])
    slowest = all_reduce_max(seconds)
    return [total / t for t in slowest]


def split_batch(batch, r: int | None = None, n: int | None = None):
    """Rank r's contiguous slice of a global batch (first dimension); needs n | batch size."""
    r = rank() if r is None else r
    n = world_size() if n is None else n
    if n == 1:
        return batch
    size = batch.shape[0]
    if size % n:
        raise ValueError(f"batch_size {size} is not divisible by the {n} ranks; choose a multiple of {n}")
    per = size // n
    return batch[r * per : (r + 1) * per]


def shard_batches(n_windows: int, batch_size: int, r: int | None = None, n: int | None = None) -> list[range]:
    """Rank r's batches of window indices: batch b goes to rank b % n (same batches as n=1)."""
    r = rank() if r is None else r
    n = world_size() if n is None else n
    starts = range(0, n_windows, batch_size)
    return [range(b0, min(b0 + batch_size, n_windows)) for i, b0 in enumerate(starts) if i % n == r]


def wrap_ddp(model, device: str):
    """DistributedDataParallel around ``model`` when distributed, else ``model`` itself."""
    if not is_distributed():
        return model
    import torch
    from torch.nn.parallel import DistributedDataParallel

    ids = [torch.cuda.current_device()] if device == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def unwrap(model):
    return getattr(model, "module", model)
