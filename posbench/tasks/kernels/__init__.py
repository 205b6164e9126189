"""Kernels: the fused ALiBi- and T5-Triton attention kernels against the alternatives, one shape
each, timed forward, backward and forward+backward with TFLOP/s and peak memory. The suite's
``methods`` are the task's own variants (``timed_points.py`` defines and times them). Details:
docs/tasks/kernels.md.
"""

from posbench.tasks.kernels.task import TASK

__all__ = ["TASK"]
