"""Extrapolation: train at L_train, evaluate perplexity at L_valid = L, 2L, 4L, ... (Press et al.
2022, Figure 1 and Tables 2-5), non-overlapping and sliding, optionally with interpolated
positions, or evaluate a pretrained checkpoint; the report's tables in the paper's layout and the
frontier of perplexity against cost. Details: docs/tasks/extrapolation.md.
"""

from posbench.tasks.extrapolation.task import TASK

__all__ = ["TASK"]
