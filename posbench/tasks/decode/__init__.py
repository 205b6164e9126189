"""Decode: what a position method costs at inference time with a KV cache: time to first token
(prefill), time per output token (greedy decode steps, each timed) and memory, at context C and
batch B. How a case runs and is timed: docs/tasks/decode.md.
"""

from posbench.tasks.decode.task import TASK

__all__ = ["TASK"]
