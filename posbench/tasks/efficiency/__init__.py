"""Efficiency: training and evaluation words/s and peak memory of one method at one length (the ALiBi
paper's Table 1 / Figure 1), one case per process or every method of a grid point in one process
with alternating windows (``pairing: windows``), each table cell also as a ratio to ``nope``, the
floor. Details: docs/tasks/efficiency.md.
"""

from posbench.tasks.efficiency.task import TASK

__all__ = ["TASK"]
